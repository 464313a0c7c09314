/**
 * What both stores share to read job rows: the columns that make up a JobRecord, in the one
 * order both read them positionally (SQLite as a JSON array, PostgreSQL in array mode), and the
 * decoding of the JSON columns.
 */
import type { Checkpoint } from '../core/job.js';
import { parseJson as parseJsonText } from '../core/json-text.js';
import type { JobState } from '../core/states.js';
import type { JobWait } from '../core/workflow.js';

/** The job-row columns, in reading order. */
export const JOB_COLUMNS = [
  'id',
  'tenant',
  'type',
  'state',
  'priority',
  'input',
  'metadata',
  'result',
  'error',
  'attempts',
  'max_attempts',
  'lease',
  'worker_id',
  'cancel_requested',
  'cancel_reason',
  'cancel_requested_at',
  'stalled',
  'parent_id',
  'created_at',
  'started_at',
  'finished_at',
  'updated_at',
  'run_at',
  'expires_at',
  'heartbeat_at',
  'timeout_ms',
  'heartbeat_timeout_ms',
  'stall_timeout_ms',
  'result_ttl_ms',
  'checkpoint',
  'idempotency_key',
  'workflow',
  'wait_kind',
  'wait_name',
  'wait_fail_fast',
  'children_total',
] as const;

/** A JSON column's value, or `fallback` when it is NULL. */
export function parseJson<T>(text: unknown, fallback: T): T {
  return typeof text === 'string' ? (parseJsonText(text) as T) : fallback;
}

/** A checkpoint column: unreadable bytes or shape come back flagged `corrupt` (the next attempt starts over). */
export function parseCheckpoint(text: unknown): Checkpoint | null {
  if (typeof text !== 'string') return null;
  try {
    const value = parseJsonText(text) as { version?: unknown; data?: unknown };
    if (typeof value !== 'object' || value === null || typeof value.version !== 'number') return { version: Number.NaN, data: null, corrupt: true };
    return { version: value.version, data: value.data };
  } catch {
    return { version: Number.NaN, data: null, corrupt: true };
  }
}

/**
 * What a job waits for, from its wait columns. Transitions out of `waiting` leave the columns as
 * they were (they are rewritten by the next suspend), so they mean something only while waiting.
 */
export function readWait(state: JobState, kind: unknown, name: unknown, failFast: unknown): JobWait | null {
  if (state !== 'waiting' || typeof kind !== 'string') return null;
  return { kind: kind as JobWait['kind'], name: typeof name === 'string' ? name : null, failFast: failFast === true || failFast === 1 };
}
