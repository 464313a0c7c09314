/**
 * How an attempt's end is logged: every failed attempt once, with what an operator needs to
 * find it. (A handler's result is copied as the store keeps it by core/json-copy.ts.)
 */
import type { Logger } from 'pino';
import type { JobError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';

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
