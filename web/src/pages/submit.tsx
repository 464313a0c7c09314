/**
 * Submit: a job of any registered type. With `/v1/task-types` the input form is built from the
 * task's schema; without it (older servers) the type is typed in (suggestions from the jobs the
 * server has shown) and the input is written as JSON.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError } from '../api';
import { isFormSchema, readSchemaFields, SchemaFields } from '../components/schema-form';
import { navigate } from '../router';
import { type TaskTypes, taskTypes } from '../task-types';
import type { JobSnapshot as Job } from 'longhaul/client';

export function Submit() {
  const [types, setTypes] = useState<TaskTypes | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [type, setType] = useState('');
  const [error, setError] = useState<{ message: string; errors: { path: string; message: string }[] } | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    taskTypes(true).then(
      (t) => {
        setTypes(t);
        if (t.registered && t.types[0]) setType((cur) => cur || (t.types[0]?.type ?? ''));
      },
      (err: Error) => setLoadError(err.message),
    );
  }, []);

  const chosen = types?.types.find((t) => t.type === type);
  const schema = chosen?.inputSchema ?? null;
  const formSchema = isFormSchema(schema) ? schema : null;

  const submit = async (e: Event) => {
    e.preventDefault();
    const form = e.currentTarget as HTMLFormElement;
    const f = new FormData(form);
    setError(null);
    const body: Record<string, unknown> = { type: String(f.get('type') ?? '').trim() };
    try {
      if (formSchema) body.input = readSchemaFields(form);
      else {
        const text = String(f.get('input') ?? '').trim();
        if (text !== '') body.input = JSON.parse(text);
      }
      const metadata = String(f.get('metadata') ?? '').trim();
      if (metadata !== '') body.metadata = JSON.parse(metadata);
    } catch (err) {
      setError({ message: `Not valid JSON: ${(err as Error).message}`, errors: [] });
      return;
    }
    const priority = String(f.get('priority') ?? '');
    if (priority) body.priority = priority;
    const delay = String(f.get('delaySeconds') ?? '');
    if (delay !== '') body.delayMs = Math.round(Number(delay) * 1000);
    setBusy(true);
    try {
      const job = await api<Job>('/v1/jobs', { method: 'POST', body });
      navigate(`/jobs/${job.id}`);
    } catch (err) {
      setError(err instanceof ApiError ? { message: err.message, errors: err.errors } : { message: (err as Error).message, errors: [] });
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="submit-title">
      <h1 id="submit-title">Submit a job</h1>
      {loadError ? <p role="alert">{loadError}</p> : null}
      <form class="submit-form" onSubmit={submit} aria-describedby={error ? 'submit-error' : undefined}>
        <div class="field">
          <label for="submit-type">Task type</label>
          {types?.registered ? (
            <select id="submit-type" name="type" value={type} onChange={(e) => setType(e.currentTarget.value)} required>
              {types.types.map((t) => (
                <option key={t.type} value={t.type}>
                  {t.type}
                </option>
              ))}
            </select>
          ) : (
            <>
              <input id="submit-type" name="type" list="submit-type-list" value={type} onInput={(e) => setType(e.currentTarget.value)} required autoComplete="off" />
              <datalist id="submit-type-list">
                {(types?.types ?? []).map((t) => (
                  <option key={t.type} value={t.type} />
                ))}
              </datalist>
            </>
          )}
          {chosen?.description ? <small class="help">{chosen.description}</small> : null}
        </div>
        {formSchema ? (
          <SchemaFields schema={formSchema} idPrefix={`f-${type}`} key={type} />
        ) : (
          <div class="field">
            <label for="submit-input">Input (JSON)</label>
            <textarea id="submit-input" name="input" rows={6} placeholder='{"steps": 20}' aria-describedby="submit-input-help" />
            <small id="submit-input-help" class="help">
              {schema ? 'This task takes input of a shape the form cannot build field by field: write it as JSON.' : 'The task checks the input when the job is submitted.'}
            </small>
          </div>
        )}
        <details class="options">
          <summary>Options</summary>
          <div class="field">
            <label for="submit-priority">Priority</label>
            <select id="submit-priority" name="priority" defaultValue="">
              <option value="">default</option>
              <option value="critical">critical</option>
              <option value="high">high</option>
              <option value="normal">normal</option>
              <option value="low">low</option>
            </select>
          </div>
          <div class="field">
            <label for="submit-delay">Delay (seconds)</label>
            <input id="submit-delay" name="delaySeconds" type="number" min={0} step="any" />
          </div>
          <div class="field">
            <label for="submit-metadata">Metadata (JSON object)</label>
            <textarea id="submit-metadata" name="metadata" rows={3} />
          </div>
        </details>
        {error ? (
          <div id="submit-error" role="alert" class="error-box">
            <p>{error.message}</p>
            {error.errors.length > 0 ? (
              <ul>
                {error.errors.map((e) => (
                  <li key={e.path}>
                    <code>{e.path}</code>: {e.message}
                  </li>
                ))}
              </ul>
            ) : null}
          </div>
        ) : null}
        <button type="submit" disabled={busy}>
          Submit job
        </button>
      </form>
    </section>
  );
}
