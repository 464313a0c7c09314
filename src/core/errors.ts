/**
 * Errors that steer jobs (thrown by handlers) and the typed errors of the library API.
 * Every library error carries a stable `code` and the HTTP status the API maps it to.
 */
import { escapeUnstorable } from './storable.js';

/** Thrown by a handler: do not retry, the job goes straight to `failed`. */
export class FatalError extends Error {
  readonly code: string;
  /** More the job's error records (a saga's compensation, see core/workflow.ts). */
  readonly details: Pick<JobError, 'compensated' | 'compensationFailed'> | undefined;
  constructor(message: string, options?: { code?: string; cause?: unknown; details?: Pick<JobError, 'compensated' | 'compensationFailed'> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'FatalError';
    this.code = options?.code ?? 'FATAL';
    this.details = options?.details;
  }
}

/** Thrown by a handler: retry (while attempts remain), optionally after a fixed delay. */
export class RetryableError extends Error {
  readonly code: string;
  readonly delayMs: number | undefined;
  constructor(message: string, options?: { code?: string; delayMs?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RetryableError';
    this.code = options?.code ?? 'RETRYABLE';
    this.delayMs = options?.delayMs;
  }
}

/**
 * Thrown to a handler by `ctx.checkpoint.save` and `ctx.results` when the job's lease is gone
 * (reaped, or finished elsewhere): this attempt's writes are refused.
 */
export class LeaseLostError extends Error {
  constructor(readonly jobId: string) {
    super(`lease on job ${jobId} was lost; this worker's writes are refused`);
    this.name = 'LeaseLostError';
  }
}

export interface JobError {
  message: string;
  code: string;
  retryable: boolean;
  /** A saga whose step failed for good: its completed steps were all compensated. */
  compensated?: boolean;
  /** A saga whose compensation itself failed: which step's, and why (the steps before it were not compensated). */
  compensationFailed?: { step: string; message: string };
}

/** A signal wait (ctx.waitFor) that timed out; the handler may catch it. */
export class WaitTimeoutError extends Error {
  readonly code = 'WAIT_TIMEOUT';
  constructor(readonly signalName: string) {
    super(`no signal "${signalName}" arrived before the wait's timeout`);
    this.name = 'WaitTimeoutError';
  }
}

/** ctx.spawn with failurePolicy 'fail-fast': a child failed (or was cancelled), its open siblings were cancelled. */
export class ChildFailedError extends FatalError {
  constructor(
    readonly failed: number,
    readonly cancelled: number,
  ) {
    super(`${failed + cancelled} child job(s) did not succeed (${failed} failed, ${cancelled} cancelled)`, { code: 'CHILD_FAILED' });
    this.name = 'ChildFailedError';
  }
}

export interface Classified {
  error: JobError;
  /** A delay the handler asked for, overriding backoff. */
  delayMs?: number;
}

function statusOf(err: object): number | undefined {
  const candidate = (err as { status?: unknown; statusCode?: unknown }).status ?? (err as { statusCode?: unknown }).statusCode;
  return typeof candidate === 'number' ? candidate : undefined;
}

/**
 * Retryable or fatal. FatalError, validation errors (zod's ZodError, a `name` ending in
 * ValidationError) and 4xx-like errors (a `status`/`statusCode` of 400–499 other than 408
 * and 429) are fatal; RetryableError and everything unknown retries. The message and code are
 * diagnostic text: U+0000 and lone surrogates in them are escaped (core/storable.ts), so that
 * every store can keep them.
 */
export function classifyError(err: unknown): Classified {
  const c = classifyRaw(err);
  c.error = storableJobError(c.error);
  return c;
}

/** A JobError every store can keep: its message and code escaped (see core/storable.ts). */
export function storableJobError(e: JobError): JobError {
  const message = typeof e.message === 'string' ? escapeUnstorable(e.message) : safeString(e.message);
  const code = typeof e.code === 'string' ? escapeUnstorable(e.code) : safeString(e.code);
  return message === e.message && code === e.code ? e : { ...e, message, code };
}

/**
 * The stack of a thrown Error, cut to MAX_ATTEMPT_STACK characters and made storable; undefined
 * for anything else (a thrown string has no stack). Kept in the attempt history only.
 */
export function errorStack(err: unknown, max: number): string | undefined {
  if (!(err instanceof Error)) return undefined;
  let stack: unknown;
  try {
    stack = err.stack;
  } catch {
    return undefined;
  }
  if (typeof stack !== 'string' || stack === '') return undefined;
  return escapeUnstorable(stack.length > max ? `${stack.slice(0, max)}…` : stack);
}

function classifyRaw(err: unknown): Classified {
  if (err instanceof RetryableError) {
    return { error: { message: err.message, code: err.code, retryable: true }, ...(err.delayMs === undefined ? {} : { delayMs: err.delayMs }) };
  }
  if (err instanceof FatalError) return { error: { message: err.message, code: err.code, retryable: false, ...err.details } };
  if (err instanceof Error) {
    const code = typeof (err as { code?: unknown }).code === 'string' ? String((err as { code?: unknown }).code) : err.name || 'Error';
    const status = statusOf(err);
    const validation = err.name === 'ZodError' || /ValidationError$/.test(err.name);
    const clientError = status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
    return { error: { message: err.message || err.name, code, retryable: !(validation || clientError) } };
  }
  return { error: { message: typeof err === 'string' ? err : safeString(err), code: 'NON_ERROR_THROWN', retryable: true } };
}

function safeString(value: unknown): string {
  try {
    return escapeUnstorable(JSON.stringify(value) ?? String(value));
  } catch {
    try {
      return escapeUnstorable(String(value));
    } catch {
      return Object.prototype.toString.call(value);
    }
  }
}

/** Base class of every error the library API throws on purpose. */
export class LonghaulError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly status: number,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

export class UnknownTaskError extends LonghaulError {
  constructor(readonly type: string) {
    super(`unknown task type "${type}"`, 'UNKNOWN_TASK', 422);
  }
}

export interface FieldIssue {
  path: string;
  message: string;
}

export class InputValidationError extends LonghaulError {
  constructor(
    readonly type: string,
    readonly issues: FieldIssue[],
  ) {
    super(`input for "${type}" is invalid: ${issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ')}`, 'INVALID_INPUT', 422, issues);
  }
}

/**
 * A submission holding a string no store accepts (U+0000, a lone surrogate), as a value or a
 * key, in its input, metadata, idempotency key, tenant or parent id (see core/storable.ts).
 */
export class UnstorableValueError extends LonghaulError {
  constructor(
    readonly path: string,
    /** What is wrong there, without the path (the field error's message). */
    readonly issue: string,
  ) {
    super(`${path}: ${issue}`, 'UNSTORABLE_STRING', 422, [{ path, message: issue }] satisfies FieldIssue[]);
  }
}

export class InvalidOptionsError extends LonghaulError {
  constructor(
    message: string,
    /** The option at fault (`runAt`, `limit`, `webhook.url`...), when one is. */
    readonly field?: string,
  ) {
    super(message, 'INVALID_OPTIONS', 400);
  }
}

export class JobNotFoundError extends LonghaulError {
  constructor(readonly id: string) {
    super(`job ${id} not found`, 'NOT_FOUND', 404);
  }
}

export class JobStateConflictError extends LonghaulError {
  constructor(
    readonly id: string,
    readonly state: string,
    action: string,
  ) {
    super(`cannot ${action} job ${id}: it is ${state}`, 'STATE_CONFLICT', 409);
  }
}

export class IdempotencyConflictError extends LonghaulError {
  constructor(readonly key: string) {
    super(`idempotency key "${key}" was already used with a different request`, 'IDEMPOTENCY_CONFLICT', 422);
  }
}

export class QueueFullError extends LonghaulError {
  constructor(
    readonly backlog: number,
    readonly limit: number,
  ) {
    super(`queue is full (${backlog} jobs waiting, limit ${limit})`, 'QUEUE_FULL', 503);
  }
}

/**
 * The tenant's own quota of waiting jobs (`tenantQuotas[tenant].maxQueued`) would be exceeded:
 * 429 over HTTP, with `Retry-After: retryAfterSeconds` (the tenant's backlog shrinks only as
 * workers start its jobs, so no exact time is known: a fixed hint, like the 503 of a full queue).
 * Distinct from QueueFullError, the global limit (503).
 */
export class TenantQuotaExceededError extends LonghaulError {
  readonly retryAfterSeconds = 5;
  constructor(
    readonly tenant: string,
    /** The tenant's jobs pending, queued or retrying when the submission was refused (counted up to the limit). */
    readonly backlog: number,
    readonly limit: number,
    /** How many jobs the refused submission carried (a batch is refused as a whole). */
    readonly submitted = 1,
  ) {
    super(
      `tenant "${tenant}" is over its quota of waiting jobs: ${backlog} pending, queued or retrying, limit ${limit}` +
        (submitted > 1 ? `, and the batch adds ${submitted}` : ''),
      'TENANT_QUOTA_EXCEEDED',
      429,
    );
  }
}

/** A signal sent to a job that already ended (succeeded, failed, cancelled, expired): it is not stored. */
export class JobEndedError extends LonghaulError {
  constructor(
    readonly id: string,
    readonly state: string,
  ) {
    super(`job ${id} is ${state}: it takes no more signals`, 'JOB_ENDED', 409);
  }
}

/** One job of a batch was refused: `index` names it, `cause` is what a single submission of it would have thrown. */
export class BatchItemError extends LonghaulError {
  constructor(
    readonly index: number,
    override readonly cause: LonghaulError,
  ) {
    super(`jobs[${index}]: ${cause.message}`, cause.code, cause.status, cause.details);
  }
}

/** A schedule's name, task, cron expression, timezone or policy is refused (422); `issues` names the field. */
export class InvalidScheduleError extends LonghaulError {
  constructor(readonly issues: FieldIssue[]) {
    super(`schedule is invalid: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, 'INVALID_SCHEDULE', 422, issues);
  }
}

export class ScheduleNotFoundError extends LonghaulError {
  constructor(readonly scheduleName: string) {
    super(`schedule "${scheduleName}" not found`, 'SCHEDULE_NOT_FOUND', 404);
  }
}

export class ScheduleExistsError extends LonghaulError {
  constructor(readonly scheduleName: string) {
    super(`schedule "${scheduleName}" already exists (update it with PATCH, or delete it first)`, 'SCHEDULE_EXISTS', 409);
  }
}

/** The tenant has as many schedules as its quota allows (`maxSchedules`): 429 until it deletes one. */
export class ScheduleQuotaExceededError extends LonghaulError {
  constructor(
    readonly tenant: string,
    readonly limit: number,
  ) {
    super(`tenant "${tenant}" has ${limit} schedules, its quota (maxSchedules of LONGHAUL_TENANT_QUOTAS): delete one first`, 'SCHEDULE_QUOTA_EXCEEDED', 429);
  }
}

/** The cron expression fires more often than the server allows (LONGHAUL_SCHEDULE_MIN_INTERVAL): 422. */
export class ScheduleTooFrequentError extends LonghaulError {
  constructor(
    readonly cron: string,
    /** The shortest time between two of its ticks (ms). */
    readonly intervalMs: number,
    readonly minIntervalMs: number,
  ) {
    super(
      `cron "${cron}" fires ${intervalMs / 1000} s apart; this server allows schedules at most every ${minIntervalMs / 1000} s (LONGHAUL_SCHEDULE_MIN_INTERVAL)`,
      'SCHEDULE_TOO_FREQUENT',
      422,
      [{ path: 'cron', message: `fires every ${intervalMs / 1000} s, under the minimum interval of ${minIntervalMs / 1000} s` }],
    );
  }
}

/**
 * An upload would take the tenant past its quota of uploads kept (`maxUploads`) or of their bytes
 * (`maxUploadBytes`): 429, with `Retry-After` when the tenant's oldest upload expires (room frees then).
 */
export class UploadQuotaExceededError extends LonghaulError {
  constructor(
    readonly tenant: string,
    readonly quota: 'maxUploads' | 'maxUploadBytes',
    readonly limit: number,
    readonly retryAfterSeconds: number,
    detail: string,
  ) {
    super(`tenant "${tenant}" is over its upload quota: ${detail} (${quota} ${limit}, LONGHAUL_TENANT_QUOTAS)`, 'UPLOAD_QUOTA_EXCEEDED', 429);
  }
}

/** A schedule declared in the tasks module cannot be changed over the API: the module is its source. */
export class ScheduleDeclaredError extends LonghaulError {
  constructor(readonly scheduleName: string) {
    super(`schedule "${scheduleName}" is declared in the tasks module: change it there (pause, resume and trigger work over the API)`, 'SCHEDULE_DECLARED', 409);
  }
}
