/**
 * Submission checks: every option and the input are checked, and copied as the store will keep
 * them, before anything is written; the result is the row to insert, with the hash that lets an
 * idempotency key tell a replay from a different request.
 */
import { activeTraceParent } from '../telemetry/trace.js';
import { createHash } from 'node:crypto';
import type { LonghaulConfig } from '../config.js';
import { InputValidationError, InvalidOptionsError, UnknownTaskError, UnstorableValueError } from '../core/errors.js';
import { uuidv7 } from '../core/ids.js';
import { PRIORITIES } from '../core/job.js';
import { jsonCopy } from '../core/json-copy.js';
import { MAX_ATTEMPTS_LIMIT, MAX_IDEMPOTENCY_KEY, MAX_SCHEDULE_MS, MAX_TIMEOUT_MS } from '../core/limits.js';
import { findUnstorable, hasUnstorable, type UnstorableAt, unstorableIssue } from '../core/storable.js';
import type { NewJob } from '../store/store.js';
import type { Task } from '../task-api/define.js';
import { validateInput } from '../task-api/schema.js';
import { INTERNAL_TENANT } from '../webhooks/service.js';
import type { SubmitOptions } from './submission.js';

/** What checking a submission needs: the tasks it may name and the defaults a task does not set. */
export interface PrepareContext {
  readonly tasks: ReadonlyMap<string, Task>;
  readonly config: Pick<LonghaulConfig, 'defaultMaxAttempts' | 'heartbeatTimeoutMs' | 'stallTimeoutMs' | 'resultTtlMs'>;
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const keys = Object.keys(value as object)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);
}

function toEpoch(runAt: Date | string | number, now: number): number {
  const ms = runAt instanceof Date ? runAt.getTime() : typeof runAt === 'string' ? Date.parse(runAt) : runAt;
  if (typeof ms !== 'number' || !Number.isFinite(ms)) throw new InvalidOptionsError(`runAt must be a date, an ISO 8601 string or epoch ms (got ${JSON.stringify(runAt)})`, 'runAt');
  if (Math.abs(ms - now) > MAX_SCHEDULE_MS) throw new InvalidOptionsError('runAt must be within 100 years of now', 'runAt');
  return ms;
}

/** Refuses a submitted string no store accepts (core/storable.ts), naming where it is. */
function refuseUnstorable(at: UnstorableAt | null): void {
  if (at) throw new UnstorableValueError(at.path, unstorableIssue(at));
}

/**
 * Checks a submission and builds its row. Synchronous unless the task has an input schema
 * (validators may be async): most submissions then reach the group commit without an await.
 */
export function prepare(ctx: PrepareContext, type: unknown, input: unknown, options: SubmitOptions, now: number): NewJob | Promise<NewJob> {
  if (typeof type !== 'string' || type === '') throw new InvalidOptionsError('type must be a non-empty string', 'type');
  const task = ctx.tasks.get(type);
  if (!task) throw new UnknownTaskError(type);
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new InvalidOptionsError('options must be an object', 'options');
  const { priority, runAt, delayMs, maxAttempts, timeoutMs, metadata, idempotencyKey, tenant } = options;
  if (priority !== undefined && !PRIORITIES.includes(priority)) throw new InvalidOptionsError(`priority must be one of ${PRIORITIES.join(', ')}`, 'priority');
  if (runAt !== undefined && delayMs !== undefined) throw new InvalidOptionsError('give runAt or delayMs, not both');
  if (delayMs !== undefined && (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_SCHEDULE_MS)) {
    throw new InvalidOptionsError('delayMs must be a non-negative number of ms, at most 100 years', 'delayMs');
  }
  if (maxAttempts !== undefined && (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > MAX_ATTEMPTS_LIMIT)) {
    throw new InvalidOptionsError(`maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS_LIMIT}`, 'maxAttempts');
  }
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_TIMEOUT_MS)) {
    throw new InvalidOptionsError('timeoutMs must be a positive number of ms, at most 100 years', 'timeoutMs');
  }
  if (metadata !== undefined && !isPlainObject(metadata)) throw new InvalidOptionsError('metadata must be an object', 'metadata');
  const meta = metadata === undefined ? null : (jsonCopy(metadata, 'metadata') as Record<string, unknown>);
  if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || idempotencyKey.length === 0 || idempotencyKey.length > MAX_IDEMPOTENCY_KEY)) {
    throw new InvalidOptionsError(`idempotencyKey must be a string of 1 to ${MAX_IDEMPOTENCY_KEY} characters`, 'idempotencyKey');
  }
  if (tenant !== undefined && (typeof tenant !== 'string' || tenant === '')) throw new InvalidOptionsError('tenant must be a non-empty string', 'tenant');
  if (idempotencyKey !== undefined && hasUnstorable(idempotencyKey)) refuseUnstorable(findUnstorable(idempotencyKey, 'idempotencyKey'));
  if (tenant !== undefined && hasUnstorable(tenant)) refuseUnstorable(findUnstorable(tenant, 'tenant'));
  if (typeof options.parentId === 'string' && hasUnstorable(options.parentId)) refuseUnstorable(findUnstorable(options.parentId, 'parentId'));
  if (tenant === INTERNAL_TENANT) throw new InvalidOptionsError(`tenant "${INTERNAL_TENANT}" is reserved for internal jobs`, 'tenant');
  const value: unknown = input === undefined || input === null ? null : jsonCopy(input, 'input');
  if (task.input === undefined) return newJob(ctx, task, type, input, value, meta, options, now);
  return validateInput(task.input, input === undefined ? undefined : value).then((checked) => {
    if (!checked.ok) throw new InputValidationError(type, checked.issues);
    // A schema may transform the input: what is stored is checked again.
    if (checked.value !== value) refuseUnstorable(findUnstorable(checked.value, 'input'));
    return newJob(ctx, task, type, input, checked.value ?? null, meta, options, now);
  });
}

/** The row of a checked submission (`value`: its input as stored). */
function newJob(
  ctx: PrepareContext,
  task: Task,
  type: string,
  input: unknown,
  value: unknown,
  meta: Record<string, unknown> | null,
  options: SubmitOptions,
  now: number,
): NewJob {
  const { priority, runAt, delayMs, maxAttempts, timeoutMs, metadata, idempotencyKey, tenant, parentId } = options;
  const { config } = ctx;
  const when = runAt !== undefined ? toEpoch(runAt, now) : now + (delayMs ?? 0);
  // The request as the caller gave it (the input before any schema transform), so that a replay
  // matches its first submission whatever the task's schema does with it.
  const requestHash =
    idempotencyKey === undefined
      ? null
      : createHash('sha256')
          .update(
            canonicalJson({
              type,
              input: input ?? null,
              priority,
              runAt: runAt === undefined ? undefined : when,
              delayMs,
              maxAttempts,
              timeoutMs,
              metadata,
              webhook: options.webhook === undefined ? undefined : (options.webhook as { url?: unknown })?.url,
            }),
          )
          .digest('base64url');
  return {
    id: uuidv7(now),
    tenant: tenant ?? 'default',
    type,
    state: when > now ? 'pending' : 'queued',
    priority: priority ?? task.priority ?? 'normal',
    input: value,
    metadata: meta,
    maxAttempts: maxAttempts ?? task.maxAttempts ?? config.defaultMaxAttempts,
    runAt: when,
    createdAt: now,
    timeoutMs: timeoutMs ?? task.timeoutMs ?? null,
    heartbeatTimeoutMs: task.heartbeatTimeoutMs ?? config.heartbeatTimeoutMs,
    stallTimeoutMs: task.stallTimeoutMs !== undefined ? task.stallTimeoutMs : config.stallTimeoutMs,
    resultTtlMs: task.resultTtlMs ?? config.resultTtlMs,
    parentId: parentId ?? null,
    idempotencyKey: idempotencyKey ?? null,
    requestHash,
    concurrencyKey: task.concurrencyKey === undefined ? null : concurrencyKeyOf(task, type, value),
    traceParent: activeTraceParent(),
  };
}

/** The task's concurrency key of a stored input: a non-empty storable string of at most 255 characters, or a 422. */
function concurrencyKeyOf(task: Task, type: string, value: unknown): string {
  let key: unknown;
  try {
    key = (task.concurrencyKey as (input: unknown) => unknown)(value);
  } catch (err) {
    throw new InputValidationError(type, [{ path: '', message: `the task's concurrencyKey failed on this input: ${(err as Error)?.message ?? String(err)}` }]);
  }
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY || hasUnstorable(key)) {
    throw new InputValidationError(type, [
      { path: '', message: `the task's concurrencyKey must give a non-empty string of at most ${MAX_IDEMPOTENCY_KEY} characters for this input (got ${typeof key === 'string' ? `${key.length} characters` : typeof key})` },
    ]);
  }
  return key;
}
