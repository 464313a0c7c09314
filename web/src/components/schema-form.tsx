/**
 * A form built from a task's JSON Schema input: one labelled control per property of an
 * object schema (text, number, checkbox, select for enums); a property of any other shape, or
 * a schema that is not an object, is edited as JSON. Values are read back into an input object.
 */
import type { JsonSchema } from '../types';

function typeOf(s: JsonSchema): string | undefined {
  return Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type;
}

/** True when the schema is an object of fields this form can render one by one. */
export function isFormSchema(schema: unknown): schema is JsonSchema & { properties: Record<string, JsonSchema> } {
  // A task type's inputSchema may also be a boolean schema, or null: neither is a form.
  return typeof schema === 'object' && schema !== null && typeOf(schema as JsonSchema) === 'object' && !!(schema as JsonSchema).properties;
}

export function SchemaFields({ schema, idPrefix }: { schema: JsonSchema & { properties: Record<string, JsonSchema> }; idPrefix: string }) {
  const required = new Set(schema.required ?? []);
  return (
    <fieldset class="schema-fields">
      <legend>Input</legend>
      {Object.entries(schema.properties).map(([name, prop]) => {
        const id = `${idPrefix}-${name}`;
        const t = typeOf(prop);
        const help = [
          prop.description,
          prop.default !== undefined ? `default ${JSON.stringify(prop.default)}` : '',
          prop.minimum !== undefined ? `min ${prop.minimum}` : '',
          prop.maximum !== undefined ? `max ${prop.maximum}` : '',
        ]
          .filter(Boolean)
          .join('; ');
        const label = (
          <label for={id}>
            {prop.title ?? name}
            {required.has(name) ? <span aria-hidden="true"> *</span> : null}
          </label>
        );
        const common = { id, name: `input.${name}`, required: required.has(name), 'aria-describedby': help ? `${id}-help` : undefined, 'data-kind': t ?? 'json' };
        let control: preact.JSX.Element;
        if (Array.isArray(prop.enum)) {
          control = (
            <select {...common} data-kind="enum" defaultValue={prop.default === undefined ? '' : JSON.stringify(prop.default)}>
              {required.has(name) ? null : <option value="">(not set)</option>}
              {prop.enum.map((v) => (
                <option key={JSON.stringify(v)} value={JSON.stringify(v)}>
                  {String(v)}
                </option>
              ))}
            </select>
          );
        } else if (t === 'boolean') {
          control = <input type="checkbox" {...common} defaultChecked={prop.default === true} />;
        } else if (t === 'integer' || t === 'number') {
          control = (
            <input
              type="number"
              {...common}
              step={t === 'integer' ? 1 : 'any'}
              min={prop.minimum}
              max={prop.maximum}
              placeholder={prop.default === undefined ? '' : String(prop.default)}
            />
          );
        } else if (t === 'string') {
          control = <input type="text" {...common} minLength={prop.minLength} maxLength={prop.maxLength} placeholder={typeof prop.default === 'string' ? prop.default : ''} />;
        } else {
          control = <textarea {...common} rows={3} placeholder="JSON" />;
        }
        return (
          <div class="field" key={name}>
            {label}
            {control}
            {help ? (
              <small id={`${id}-help`} class="help">
                {help}
              </small>
            ) : null}
          </div>
        );
      })}
    </fieldset>
  );
}

/** The input object the form's fields hold (empty fields left out, so defaults apply). */
export function readSchemaFields(form: HTMLFormElement): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  for (const el of Array.from(form.elements) as (HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement)[]) {
    if (!el.name?.startsWith('input.')) continue;
    const key = el.name.slice('input.'.length);
    const kind = el.dataset.kind;
    if (kind === 'boolean') {
      input[key] = (el as HTMLInputElement).checked;
      continue;
    }
    if (el.value === '') continue;
    if (kind === 'integer' || kind === 'number') input[key] = Number(el.value);
    else if (kind === 'string') input[key] = el.value;
    else input[key] = JSON.parse(el.value);
  }
  return input;
}
