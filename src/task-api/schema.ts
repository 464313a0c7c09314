/**
 * Input validation for tasks: a Standard Schema (zod, valibot, arktype, ...) or a plain JSON
 * Schema object (checked with Ajv). Both give the same `FieldIssue` list on failure.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FieldIssue } from '../core/errors.js';

/** The Standard Schema v1 interface (https://standardschema.dev), the parts Longhaul uses. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined }> };

export type JsonSchema = Record<string, unknown>;
export type InputSchema = StandardSchemaV1 | JsonSchema;

export type InferInput<S> = S extends StandardSchemaV1<unknown, infer O> ? O : unknown;

export type ValidationResult = { ok: true; value: unknown } | { ok: false; issues: FieldIssue[] };

export function isStandardSchema(schema: unknown): schema is StandardSchemaV1 {
  return typeof schema === 'object' && schema !== null && '~standard' in schema;
}

/**
 * The JSON Schema of a task's input, for forms and docs: a JSON Schema as given; a Standard
 * Schema's when it also implements Standard JSON Schema (`~standard.jsonSchema.input`, e.g.
 * zod 4.2+, arktype, valibot through its converter); null otherwise (or when its converter throws).
 */
export function inputJsonSchema(schema: InputSchema | undefined): JsonSchema | null {
  if (schema === undefined) return null;
  if (!isStandardSchema(schema)) return schema;
  const converter = (schema['~standard'] as { jsonSchema?: { input?: (options: { target: string }) => unknown } }).jsonSchema;
  if (typeof converter?.input !== 'function') return null;
  try {
    const out = converter.input({ target: 'draft-2020-12' });
    return typeof out === 'object' && out !== null ? (out as JsonSchema) : null;
  } catch {
    return null;
  }
}

// ajv-formats is CommonJS; under NodeNext its default import is the module object.
const addFormats = (addFormatsModule as unknown as { default: typeof addFormatsModule.default }).default;
let ajv: Ajv | undefined;
const compiled = new WeakMap<object, ValidateFunction>();

export function compileJsonSchema(schema: JsonSchema): ValidateFunction {
  let fn = compiled.get(schema);
  if (fn === undefined) {
    if (!ajv) {
      ajv = new Ajv({ allErrors: true, strict: false, useDefaults: true });
      addFormats(ajv);
    }
    const made = ajv.compile(schema);
    compiled.set(schema, made);
    fn = made;
  }
  return fn;
}

function pathString(path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined): string {
  if (!path) return '';
  return path.map((p) => String(typeof p === 'object' && p !== null ? p.key : p)).join('.');
}

export async function validateInput(schema: InputSchema, input: unknown): Promise<ValidationResult> {
  if (isStandardSchema(schema)) {
    const result = await schema['~standard'].validate(input);
    if (result.issues) return { ok: false, issues: result.issues.map((i) => ({ path: pathString(i.path), message: i.message })) };
    return { ok: true, value: result.value };
  }
  // Ajv's useDefaults mutates: validate a copy so the caller's object stays untouched.
  const value = input === undefined ? undefined : structuredClone(input);
  const validate = compileJsonSchema(schema);
  if (validate(value)) return { ok: true, value };
  return {
    ok: false,
    issues: (validate.errors ?? []).map((e) => ({
      path: e.instancePath.replace(/^\//, '').replaceAll('/', '.'),
      message: e.message ?? 'is invalid',
    })),
  };
}
