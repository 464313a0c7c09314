/**
 * How an attempt ends: from the job, its task's settings, what the handler returned or threw,
 * why its signal fired (if it did) and the time, the transition the worker writes, the counter
 * it moves, and the failed attempt to log, if any.
 *
 * Pure: no I/O, no clock, no logger. The worker decides one outcome per job, tens of thousands a
 * second on SQLite, so the common path allocates object literals only, no spreads.
 */
import type { BackoffPolicy } from '../core/backoff.js';
import { classifyError, errorStack, type JobError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';
import { decideAfterFailure } from '../core/lifecycle.js';
import { MAX_ATTEMPT_STACK } from '../core/limits.js';
import { afterFailure, COMPENSATION_EXTRA_ATTEMPTS, type CancelKind, endCancelled, failFatal, forceCancel, handBack, succeed, type TransitionParams } from '../core/transitions.js';
import { owesCompensation, type WorkflowState } from '../core/workflow.js';
import type { AbortKind } from '../core/abort.js';
import { storedResult } from '../core/json-copy.js';

/** What the handler did: returned `value`, or threw `error`. */
export type HandlerResult = { ok: true; value: unknown } | { ok: false; error: unknown };

/** The worker counter an applied outcome moves (see WorkerStats). */
export type OutcomeStat = 'succeeded' | 'failed' | 'retried' | 'cancelled' | 'handedBack';

/** A failed attempt, for `logFailedAttempt`: what was thrown (null when nothing was) and what the job records. */
export interface FailedAttempt {
  thrown: unknown;
  error: JobError;
  next: 'retrying' | 'failed' | 'cancelled';
  /** When the retry is due (next: 'retrying'). */
  runAt: number | undefined;
}

export interface Outcome {
  write: TransitionParams;
  stat: OutcomeStat;
  /** Logged once the outcome is decided; null for an attempt that did not fail. */
  failure: FailedAttempt | null;
}

/** The job fields an outcome reads. */
export type OutcomeJob = Pick<JobRecord, 'id' | 'state' | 'lease' | 'attempts' | 'maxAttempts' | 'timeoutMs' | 'resultTtlMs'>;

/** The task settings an outcome reads. */
export interface OutcomeTask {
  readonly backoff: BackoffPolicy;
  readonly resultTtlMs: number | undefined;
}

/** What the worker adds: its id (the writes carry it) and its default result TTL. */
export interface OutcomeWorker {
  readonly id: string;
  readonly resultTtlMs: number;
}

/**
 * The outcome of an attempt whose handler returned or threw. `abort` is why its signal fired:
 * a result still counts (the handler finished its work), an error after a cancel or timeout ends
 * the job cancelled, and after a shutdown hands it back. (A lost lease has no outcome: the worker
 * no longer owns the job.) `random` draws the retry's jitter.
 */
export function decideOutcome(
  job: OutcomeJob,
  task: OutcomeTask,
  worker: OutcomeWorker,
  result: HandlerResult,
  abort: Exclude<AbortKind, 'lease-lost' | 'suspended'> | null,
  now: number,
  random: () => number = Math.random,
): Outcome {
  if (result.ok) {
    const stored = storedResult(result.value);
    if (!stored.ok) {
      return { write: failFatal(job, worker.id, now, stored.error), stat: 'failed', failure: { thrown: null, error: stored.error, next: 'failed', runAt: undefined } };
    }
    const ttl = task.resultTtlMs ?? job.resultTtlMs ?? worker.resultTtlMs;
    return { write: succeed(job, worker.id, now, stored.value, ttl), stat: 'succeeded', failure: null };
  }
  if (abort === 'cancelled' || abort === 'timeout') {
    const write = endCancelled(job, worker.id, now, abort, abort);
    // A timeout's stack says where the handler was when it ran out of time; a cancel's is noise.
    if (abort === 'timeout') withStack(write, result.error);
    // A timeout is the job's failure (its handler ran too long); a cancel is what its user asked for.
    const failure: FailedAttempt | null =
      abort === 'timeout' ? { thrown: result.error, error: write.patch?.error as JobError, next: 'cancelled', runAt: undefined } : null;
    return { write, stat: 'cancelled', failure };
  }
  if (abort === 'shutdown') return { write: handBack(job, worker.id, now, 'shutdown'), stat: 'handedBack', failure: null };
  const decision = decideAfterFailure(classifyError(result.error), job.attempts, job.maxAttempts, task.backoff, now, random);
  const runAt = decision.to === 'retrying' ? decision.runAt : undefined;
  return {
    write: withStack(afterFailure(job, worker.id, now, decision), result.error),
    stat: decision.to === 'failed' ? 'failed' : 'retried',
    failure: { thrown: result.error, error: decision.error, next: decision.to, runAt },
  };
}

/** Adds the stack of what the handler threw to a write that ends the attempt (attempt history only). */
function withStack(write: TransitionParams, thrown: unknown): TransitionParams {
  const stack = errorStack(thrown, MAX_ATTEMPT_STACK);
  if (stack !== undefined && write.patch) write.patch.stack = stack;
  return write;
}

/**
 * The outcome of a job the worker ends without its handler: at shutdown (`why` 'shutdown'), or
 * claimed ahead and not started in time ('no free slot'). A job whose cancel was asked for
 * (`cancel`, seen here or recorded in the store) ends cancelled: handing it back would run it
 * again although its user asked it to stop. The others are handed back, the attempt refunded.
 */
export function leftoverOutcome(job: OutcomeJob, worker: OutcomeWorker, now: number, cancel: CancelKind | null, why: 'shutdown' | 'no free slot'): Outcome {
  if (cancel === null) return { write: handBack(job, worker.id, now, why), stat: 'handedBack', failure: null };
  const note = why === 'shutdown' ? 'worker stopping' : 'before it started';
  return { write: endCancelled(job, worker.id, now, cancel, `${cancel} (${note})`), stat: 'cancelled', failure: null };
}

/**
 * The outcome of an attempt whose handler ignored its signal past the drain period after a
 * cancel or a timeout (stuck-handlers.ts): the same forced cancel the sweeper writes after the
 * drain (core/transitions.ts forceCancel), so the job ends the same whichever of the two writes
 * first (the other is refused by the lease).
 */
export function abandonedOutcome(job: OutcomeJob, worker: OutcomeWorker, kind: CancelKind, now: number): Outcome {
  const write = forceCancel({ id: job.id, state: job.state, lease: job.lease, workerId: worker.id, timeoutMs: job.timeoutMs, cancelReason: kind }, now, 'drain');
  const error = write.patch?.error as JobError;
  // A timeout is the job's failure (logged like any timed-out attempt); a cancel is what its user asked for.
  const failure: FailedAttempt | null = kind === 'timeout' ? { thrown: null, error, next: 'cancelled', runAt: undefined } : null;
  return { write, stat: 'cancelled', failure };
}

/**
 * A saga's outcome: one that would fail the job while the saga owes compensation (completed
 * steps not undone) becomes a retry at once, within COMPENSATION_EXTRA_ATTEMPTS beyond its
 * maxAttempts, as when its worker dies (core/transitions.ts reapLostWorker): the next attempt
 * compensates. A saga compensates a step that fails for good itself; what reaches here failed
 * outside its steps: the journal write after a step refused or out of reach past its retries
 * (then `journal`, as this attempt knew it, may hold a step the store does not: that step counts
 * as not completed, and the attempt beyond maxAttempts only compensates: workflow/saga.ts), or a
 * step's output that cannot be stored.
 */
export function sagaOutcome(outcome: Outcome, job: OutcomeJob, journal: WorkflowState, now: number): Outcome {
  if (outcome.write.to !== 'failed' || outcome.failure === null) return outcome;
  if (job.attempts >= job.maxAttempts + COMPENSATION_EXTRA_ATTEMPTS || !owesCompensation(journal)) return outcome;
  const { error } = outcome.failure;
  const write = afterFailure(job, outcome.write.workerId ?? '', now, { to: 'retrying', runAt: now, error });
  write.reason = 'retry scheduled: compensation owed';
  if (outcome.write.patch?.stack !== undefined && write.patch) write.patch.stack = outcome.write.patch.stack;
  return { write, stat: 'retried', failure: { ...outcome.failure, next: 'retrying', runAt: now } };
}

/** The outcome that fails a job in place of one the store refused (see outcome-isolation.ts). */
export function refusedOutcome(write: TransitionParams): Outcome {
  return { write, stat: 'failed', failure: null };
}
