/**
 * Pure decisions about where a job goes next. The worker and the sweeper ask these; the
 * store then applies the answer as a compare-and-swap.
 */
import { type BackoffPolicy, backoffDelay } from './backoff.js';
import type { Classified, JobError } from './errors.js';

export type FailureOutcome = { to: 'retrying'; runAt: number; error: JobError } | { to: 'failed'; error: JobError };

/**
 * After attempt `attempts` (1-based, the one that just failed) threw: retry with backoff
 * while the error is retryable and the budget allows, otherwise fail (dead-letter).
 */
export function decideAfterFailure(
  failure: Classified,
  attempts: number,
  maxAttempts: number,
  backoff: BackoffPolicy,
  now: number,
  random: () => number = Math.random,
): FailureOutcome {
  if (!failure.error.retryable) return { to: 'failed', error: failure.error };
  if (attempts >= maxAttempts) {
    return { to: 'failed', error: { ...failure.error, message: `${failure.error.message} (attempts exhausted: ${attempts}/${maxAttempts})` } };
  }
  // A handler's delay is honoured only when it is a real number: `delayMs: NaN` (e.g. from a missing
  // Retry-After header) or Infinity would make runAt unstorable or the retry never due.
  const asked = failure.delayMs;
  const delay = asked !== undefined && Number.isFinite(asked) ? Math.round(asked) : backoffDelay(backoff, attempts, random);
  return { to: 'retrying', runAt: now + Math.max(0, delay), error: failure.error };
}

/** A running job whose worker stopped heartbeating: run it again at once, or fail when spent. */
export function decideAfterLostWorker(attempts: number, maxAttempts: number, now: number): FailureOutcome {
  const error = lostWorkerError(attempts, maxAttempts);
  return attempts >= maxAttempts ? { to: 'failed', error } : { to: 'retrying', runAt: now, error };
}

/** The error of attempt `attempts` whose worker stopped heartbeating (not retryable once it was the last). */
export function lostWorkerError(attempts: number, maxAttempts: number): JobError {
  const message = 'worker stopped heartbeating (crashed or stuck)';
  if (attempts < maxAttempts) return { message, code: 'HEARTBEAT_TIMEOUT', retryable: true };
  return { message: `${message}; attempts exhausted: ${attempts}/${maxAttempts}`, code: 'HEARTBEAT_TIMEOUT', retryable: false };
}

/** Whether a saved checkpoint may be handed to a new attempt of a task at `taskVersion`. */
export function checkpointUsable(saved: { version: unknown } | null, taskVersion: number): 'none' | 'usable' | 'version-mismatch' {
  if (saved === null) return 'none';
  return saved.version === taskVersion ? 'usable' : 'version-mismatch';
}
