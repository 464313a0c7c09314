/**
 * How an attempt's end is made ready for the store and the log: a handler's result is copied as
 * JSON and refused when no store could keep it (core/storable.ts), and every failed attempt is
 * logged once, with what an operator needs to find it.
 */
import type { Logger } from 'pino';
import type { JobError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';
import { findUnstorableInJson, unstorableMessage } from '../core/storable.js';
import { parseJson } from '../core/json-text.js';

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

/** One line per failed attempt (thrown, timed out, or a result that could not be kept). */
export function logFailedAttempt(log: Logger, job: JobRecord, thrown: unknown, error: JobError, next: 'retrying' | 'failed' | 'cancelled', runAt?: number): void {
  const fields = {
    jobId: job.id,
    type: job.type,
    attempt: job.attempts,
    maxAttempts: job.maxAttempts,
    tenant: job.tenant,
    code: error.code,
    retryable: error.retryable,
    next,
    ...(runAt === undefined ? {} : { retryAt: new Date(runAt).toISOString() }),
    err: thrown instanceof Error ? thrown : { message: error.message },
  };
  const what = next === 'retrying' ? 'attempt failed; retrying' : next === 'failed' ? 'attempt failed; job failed' : 'attempt timed out; job cancelled';
  if (next === 'retrying') log.warn(fields, what);
  else log.error(fields, what);
}
