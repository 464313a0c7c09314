/**
 * Values copied as JSON, as a store keeps them: a submission's input, metadata or a signal's
 * payload (refused with an error naming it), and a handler's result (a failed attempt when it
 * cannot be kept). Shared by the facade, the worker and workflows, so it lives in core/.
 */
import { type JobError, InvalidOptionsError, UnstorableValueError } from './errors.js';
import { parseJson } from './json-text.js';
import { jsonDepth, MAX_JSON_DEPTH } from './limits.js';
import { findUnstorableInJson, unstorableIssue, unstorableMessage } from './storable.js';

/** A JSON copy of `value` (what the store keeps), or a clear error naming `what`. */
export function jsonCopy(value: unknown, what: string): unknown {
  const tooDeep = () => new InvalidOptionsError(`${what} nests deeper than ${MAX_JSON_DEPTH} levels`, what);
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    if (jsonDepth(value) > MAX_JSON_DEPTH) throw tooDeep();
    throw new InvalidOptionsError(`${what} must be JSON-serializable: ${(err as Error).message}`, what);
  }
  if (text === undefined) throw new InvalidOptionsError(`${what} must be JSON-serializable: ${typeof value} has no JSON form`, what);
  // Each level of nesting takes at least two characters: short texts need no walk.
  if (text.length > 2 * MAX_JSON_DEPTH && jsonDepth(value) > MAX_JSON_DEPTH) throw tooDeep();
  const copy: unknown = parseJson(text);
  const at = findUnstorableInJson(copy, text, what);
  if (at) throw new UnstorableValueError(at.path, unstorableIssue(at));
  return copy;
}

/** A handler's return value as the store keeps it (a JSON copy), or why the attempt fails. */
export function storedResult(value: unknown): { ok: true; value: unknown } | { ok: false; error: JobError } {
  if (value === null || value === undefined) return { ok: true, value: null };
  let text: string | undefined;
  let copy: unknown;
  try {
    text = JSON.stringify(value);
    copy = parseJson(text as string);
  } catch (err) {
    return { ok: false, error: { message: `result is not JSON-serializable: ${(err as Error).message}`, code: 'RESULT_NOT_SERIALIZABLE', retryable: false } };
  }
  const at = findUnstorableInJson(copy, text as string, 'result');
  if (at) return { ok: false, error: { message: unstorableMessage(at), code: 'UNSTORABLE_RESULT', retryable: false } };
  return { ok: true, value: copy };
}

/** Whether the stored copy is the value itself as JSON (no Date, Map or class instance the copy would flatten). */
export function isDeepJson(value: unknown, copy: unknown): boolean {
  if (value === null || typeof value !== 'object') return Object.is(value, copy) || (typeof value === 'number' && value === copy);
  if (Array.isArray(value)) return Array.isArray(copy) && value.length === copy.length && value.every((v, i) => isDeepJson(v, (copy as unknown[])[i]));
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return false;
  const keys = Object.keys(value);
  return typeof copy === 'object' && copy !== null && keys.length === Object.keys(copy).length && keys.every((k) => isDeepJson((value as Record<string, unknown>)[k], (copy as Record<string, unknown>)[k]));
}
