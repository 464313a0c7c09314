/**
 * Every transition a job can make after it was submitted, decided here and nowhere else.
 *
 * Each builder returns the store write (a compare-and-swap on the state, and on the lease for
 * writes of the lease holder) with its reason and patch. What a write announces follows from
 * the write alone (`eventsOf`): a `job:changed` for every applied write, and a
 * `job:cancel-requested` for one that records a cancel request. `transitions/apply.ts` writes
 * them and announces the applied ones, so no caller builds a transition or emits by hand.
 *
 * Claims (queued → running) and promotions (pending/retrying → queued) are written by the store
 * in bulk (`claimJobs`, `promoteDue`) and are not built here.
 *
 * Pure: no I/O.
 */
import type { JobError } from './errors.js';
import type { JobRecord } from './job.js';
import { decideAfterLostWorker, type FailureOutcome } from './lifecycle.js';
import type { JobState } from './states.js';
import { owesCompensation, readWorkflow } from './workflow.js';

/** What a transition changes besides the state (absent fields stay as they are). */
export interface JobPatch {
  runAt?: number;
  result?: unknown;
  error?: JobError | null;
  finishedAt?: number | null;
  expiresAt?: number | null;
  /** A manual retry: attempts back to 0, a new budget. */
  resetAttempts?: boolean;
  /** Hand-back on graceful shutdown: the interrupted attempt does not count. */
  refundAttempt?: boolean;
  clearCheckpoint?: boolean;
  /** Set (with a reason) or clear the cancel request. */
  cancelRequest?: { reason: string } | false;
  stalled?: boolean;
  /**
   * The stack of what ended the attempt (a handler's thrown error): kept in the attempt history
   * only (`job_attempts`), never on the job or its snapshot.
   */
  stack?: string;
}

/** One compare-and-swap write of a job's state. */
export interface TransitionParams {
  id: string;
  /** Expected current state (compare-and-swap). */
  from: JobState;
  to: JobState;
  /** Expected lease token; omit for transitions not made by the lease holder. */
  lease?: number;
  /** Expected cancel-request flag (so two cancel requests don't both apply). */
  cancelRequested?: boolean;
  reason: string;
  workerId?: string | null;
  at: number;
  patch?: JobPatch;
  /**
   * Retention 0 (delete on completion): the write ends the job and deletes it in the same
   * transaction, with its progress and signals, when it owns nothing else: no result files
   * (their blobs must go first, which only the eraser does), no webhook target or deliveries,
   * no parent and no children. A job that owns any is ended as usual and left to the eraser.
   */
  deleteOnEnd?: boolean;
}

/**
 * The record a job would read back after `write` applied: the job deleted on its end
 * (`deleteOnEnd`) has no row to read, and its last snapshot comes from this. The progress is
 * the one the caller last knew.
 */
export function endedRecord(job: JobRecord, write: TransitionParams): JobRecord {
  const p = write.patch ?? {};
  // One copy, then the patched fields (a spread per field allocated an object each, per job).
  const out: JobRecord = { ...job, state: write.to, updatedAt: Math.max(write.at, job.updatedAt + 1), workerId: write.workerId ?? job.workerId };
  if (p.runAt !== undefined) out.runAt = p.runAt;
  if (p.result !== undefined) out.result = p.result;
  if (p.error !== undefined) out.error = p.error;
  if (p.finishedAt !== undefined) out.finishedAt = p.finishedAt;
  if (p.expiresAt !== undefined) out.expiresAt = p.expiresAt;
  if (p.clearCheckpoint) out.checkpoint = null;
  if (p.stalled !== undefined) out.stalled = p.stalled;
  return out;
}

/** What a builder needs to know of a job. */
export type JobRef = Pick<JobRecord, 'id' | 'state' | 'lease'>;
/** What a job's announcements name. */
export type JobIdentity = Pick<JobRecord, 'id' | 'tenant' | 'type'> & { parentId?: string | null };

/** The announcements of an applied write. */
export type TransitionEvent =
  | { name: 'job:changed'; data: { id: string; tenant: string; type: string; from: JobState; to: JobState; reason: string; parentId?: string } }
  | { name: 'job:cancel-requested'; data: { id: string; reason: string } };

/** Why a cancel was asked for. */
export type CancelKind = 'cancelled' | 'timeout';

// ---- errors a transition records ----------------------------------------------------------------

/** A job cancelled by a user, or by its handler honouring a cancel request. */
export function cancelledError(cause?: string): JobError {
  return { message: cause === undefined ? 'cancelled' : `cancelled; ${cause}`, code: 'CANCELLED', retryable: false };
}

/** A job that ran past its timeout. */
export function timeoutError(timeoutMs: number | null, cause?: string): JobError {
  const message = `timed out after ${timeoutMs} ms`;
  return { message: cause === undefined ? message : `${message}; ${cause}`, code: 'TIMEOUT', retryable: false };
}

// ---- by a user ------------------------------------------------------------------------------------

/** A job that has not started (pending, queued, retrying, waiting) → cancelled. */
export function cancelNow(job: JobRef, now: number): TransitionParams {
  return { id: job.id, from: job.state, to: 'cancelled', reason: 'cancelled by user', at: now, patch: { finishedAt: now, error: cancelledError() } };
}

/** A running job: records the user's cancel request (its handler's ctx.signal fires). */
export function requestCancel(job: JobRef, now: number): TransitionParams {
  return {
    id: job.id,
    from: 'running',
    to: 'running',
    lease: job.lease,
    cancelRequested: false,
    reason: 'cancel requested by user',
    at: now,
    patch: { cancelRequest: { reason: 'user' } },
  };
}

/**
 * Whether an applied write ends an attempt that the store records in the attempt history: the
 * job leaves `running` for anything but `succeeded` (a success is read from the job itself, so
 * the hot completion path writes nothing more; see docs/operations.md, dead letters).
 */
export function endsRecordedAttempt(write: Pick<TransitionParams, 'from' | 'to'>): boolean {
  return write.from === 'running' && write.to !== 'running' && write.to !== 'succeeded';
}

/** A failed or cancelled job → queued with a fresh attempt budget; it resumes from its checkpoint. */
export function manualRetry(job: JobRef, now: number): TransitionParams {
  return {
    id: job.id,
    from: job.state,
    to: 'queued',
    reason: 'manual retry',
    at: now,
    // `error` stays: the snapshot shows it as `lastError` (its `error` is null while queued).
    patch: { resetAttempts: true, finishedAt: null, runAt: now, cancelRequest: false, stalled: false },
  };
}

/**
 * A child of a cancelled parent (or a sibling of a failed one), not running → cancelled at once;
 * `reason` says why ('parent cancelled', 'sibling failed') in the log and the error.
 */
export function cancelAsChild(job: JobRef, now: number, reason: string): TransitionParams {
  return { id: job.id, from: job.state, to: 'cancelled', reason, at: now, patch: { finishedAt: now, error: cancelledError(reason) } };
}

/** The same for a running child: a cancel request with `reason` (its handler's ctx.signal fires). */
export function requestCancelAsChild(job: JobRef, now: number, reason: string): TransitionParams {
  return {
    id: job.id,
    from: 'running',
    to: 'running',
    lease: job.lease,
    cancelRequested: false,
    reason: `cancel requested: ${reason}`,
    at: now,
    patch: { cancelRequest: { reason } },
  };
}

// ---- by the worker holding the lease ----------------------------------------------------------------
// (Object literals throughout: the worker builds one per job, and spreads cost more than the job.)

/** running → succeeded with the handler's result, kept `ttlMs`. */
export function succeed(job: JobRef, workerId: string, now: number, result: unknown, ttlMs: number): TransitionParams {
  // `error` stays: it is the last failed attempt's (a snapshot shows it as `lastError`).
  return {
    id: job.id,
    from: 'running',
    to: 'succeeded',
    lease: job.lease,
    workerId,
    at: now,
    reason: 'completed',
    patch: { result, finishedAt: now, expiresAt: now + ttlMs, clearCheckpoint: true },
  };
}

/** running → failed at once (an error that is not retried, e.g. a result no store accepts). */
export function failFatal(job: JobRef, workerId: string, now: number, error: JobError): TransitionParams {
  return { id: job.id, from: 'running', to: 'failed', lease: job.lease, workerId, at: now, reason: 'fatal', patch: { error, finishedAt: now } };
}

/** running → retrying or failed, as `decideAfterFailure` decided. */
export function afterFailure(job: JobRef, workerId: string, now: number, decision: FailureOutcome): TransitionParams {
  if (decision.to === 'failed') {
    const reason = decision.error.retryable ? 'attempts exhausted' : 'fatal';
    return { id: job.id, from: 'running', to: 'failed', lease: job.lease, workerId, at: now, reason, patch: { error: decision.error, finishedAt: now } };
  }
  return {
    id: job.id,
    from: 'running',
    to: 'retrying',
    lease: job.lease,
    workerId,
    at: now,
    reason: 'retry scheduled',
    patch: { error: decision.error, runAt: decision.runAt },
  };
}

/**
 * running → cancelled by the worker: its handler honoured a cancel request or a timeout, or the
 * worker ended the job at shutdown because a cancel was recorded (`reason` says which).
 */
export function endCancelled(job: JobRef & Pick<JobRecord, 'timeoutMs'>, workerId: string, now: number, kind: CancelKind, reason: string): TransitionParams {
  const error = kind === 'timeout' ? timeoutError(job.timeoutMs) : cancelledError();
  return { id: job.id, from: 'running', to: 'cancelled', lease: job.lease, workerId, at: now, reason, patch: { error, finishedAt: now } };
}

/** running → retrying at once, the attempt refunded: the worker stops, or had no free slot for a job claimed ahead. */
export function handBack(job: JobRef, workerId: string, now: number, reason: 'shutdown' | 'no free slot'): TransitionParams {
  return { id: job.id, from: 'running', to: 'retrying', lease: job.lease, workerId, at: now, reason, patch: { runAt: now, refundAttempt: true } };
}

/**
 * Fails the job in place of an outcome the store refused to record (`refused`, any write of the
 * lease holder): same compare-and-swap, the job failed with `error` and none of the refused data.
 */
export function failRefused(refused: TransitionParams, error: JobError): TransitionParams {
  const at = refused.at;
  const reason = 'outcome refused by the store';
  const workerId = refused.workerId ?? null;
  const patch: JobPatch = { error, finishedAt: at };
  return refused.lease === undefined
    ? { id: refused.id, from: refused.from, to: 'failed', reason, workerId, at, patch }
    : { id: refused.id, from: refused.from, to: 'failed', lease: refused.lease, reason, workerId, at, patch };
}

/** A note in a running job's log (no change of state), fenced by the lease. */
export function runningNote(job: JobRef, workerId: string, now: number, reason: string): TransitionParams {
  return { id: job.id, from: 'running', to: 'running', lease: job.lease, reason, workerId, at: now };
}

/**
 * Records a timeout's cancel request on a running job, by its worker (`workerId`) or by the
 * sweeper (the worker's id as the job holds it). The sweeper forces the cancel after the drain
 * period if the handler ignores the signal.
 */
export function requestTimeout(job: JobRef, workerId: string | null, now: number): TransitionParams {
  return {
    id: job.id,
    from: 'running',
    to: 'running',
    lease: job.lease,
    cancelRequested: false,
    reason: 'cancel requested: timeout',
    workerId,
    at: now,
    patch: { cancelRequest: { reason: 'timeout' } },
  };
}

/**
 * running → waiting: the handler waits (for children, a time or a signal) without holding the
 * worker. The attempt is refunded (waiting is not a failure); `runAt` is the wake-up time, or
 * NEVER when only the condition wakes the job. Not once a cancel was asked for: a job whose
 * cancel (or timeout) is recorded ends instead of waiting (and spawning) any further.
 */
export function suspend(job: JobRef, workerId: string, now: number, runAt: number, reason: string): TransitionParams {
  return { id: job.id, from: 'running', to: 'waiting', lease: job.lease, cancelRequested: false, workerId, at: now, reason, patch: { runAt, refundAttempt: true } };
}

// ---- by the sweeper -------------------------------------------------------------------------------

type SweptJob = JobRef & Pick<JobRecord, 'workerId' | 'timeoutMs' | 'cancelReason'>;

/**
 * Attempts a saga that owes compensation (core/workflow.ts owesCompensation) gets beyond its
 * maxAttempts when its worker dies (see reapLostWorker): enough for a crash or two during the
 * compensation itself, and a bound for a compensation that kills its process every time.
 */
export const COMPENSATION_EXTRA_ATTEMPTS = 3;

/** running → cancelled for a job whose cancel request its handler cannot (or did not) honour. */
export function forceCancel(job: SweptJob, now: number, why: 'drain' | 'heartbeat lost'): TransitionParams {
  const timeout = job.cancelReason === 'timeout';
  const cause = why === 'drain' ? 'the handler ignored cancellation' : 'the worker stopped heartbeating';
  const what = timeout ? 'timeout' : 'cancelled';
  return {
    id: job.id,
    from: 'running',
    to: 'cancelled',
    lease: job.lease,
    reason: why === 'drain' ? `${what} (forced after drain)` : `${what} (heartbeat lost)`,
    at: now,
    workerId: job.workerId,
    patch: { error: timeout ? timeoutError(job.timeoutMs, cause) : cancelledError(cause), finishedAt: now },
  };
}

/**
 * A running job whose worker stopped heartbeating: requeued while attempts remain, failed when
 * spent; cancelled when a cancel was asked for (no worker is left to honour it: requeueing would
 * run the job again, failing would report a crash instead of the cancel).
 *
 * A saga that owes compensation (it completed steps and no compensation of it failed) is
 * requeued even when its attempts are spent: failing it would leave its completed steps done and
 * not undone. An attempt beyond maxAttempts only compensates (workflow/saga.ts: the step the
 * worker died in does not run again, and the job ends failed with this error, `attempts
 * exhausted`, compensated). At most COMPENSATION_EXTRA_ATTEMPTS such attempts: a saga whose
 * compensation kills its process every time then ends failed here, its journal saying which
 * steps were compensated. The reason stays `heartbeat lost; requeued` (one of ZOMBIE_REASONS);
 * the saga's first note on its next attempt says why it compensates.
 */
export function reapLostWorker(job: SweptJob & Pick<JobRecord, 'attempts' | 'maxAttempts' | 'cancelRequested' | 'workflow'>, now: number): TransitionParams {
  if (job.cancelRequested) return forceCancel(job, now, 'heartbeat lost');
  const d = decideAfterLostWorker(job.attempts, job.maxAttempts, now);
  const write = { id: job.id, from: 'running' as const, lease: job.lease, at: now, workerId: job.workerId };
  if (d.to === 'retrying') return { ...write, to: 'retrying', reason: 'heartbeat lost; requeued', patch: { error: d.error, runAt: d.runAt } };
  const extra = job.attempts < job.maxAttempts + COMPENSATION_EXTRA_ATTEMPTS && owesCompensation(readWorkflow(job.workflow));
  if (extra) return { ...write, to: 'retrying', reason: 'heartbeat lost; requeued', patch: { error: d.error, runAt: now } };
  return { ...write, to: 'failed', reason: 'heartbeat lost; attempts exhausted', patch: { error: d.error, finishedAt: now } };
}

/**
 * The reasons of the transitions that hand on a zombie (a running job whose worker stopped
 * heartbeating: reapLostWorker, and forceCancel for one whose cancel was requested). The stores
 * count the attempts that end with one of these, cluster-wide (`Store.sweepHealth`): their
 * triggers (in each store's migrations/0001_baseline.sql) hold these strings, so changing one
 * needs a new migration (test/unit/*-schema-agreement.test.ts compare them).
 */
export const ZOMBIE_REASONS: readonly string[] = [
  'heartbeat lost; requeued',
  'heartbeat lost; attempts exhausted',
  'cancelled (heartbeat lost)',
  'timeout (heartbeat lost)',
];

/** Flags a running job that reported no progress for its stall timeout. */
export function flagStalled(job: JobRef & Pick<JobRecord, 'workerId'>, now: number): TransitionParams {
  return { id: job.id, from: 'running', to: 'running', lease: job.lease, reason: 'stalled: no progress', at: now, workerId: job.workerId, patch: { stalled: true } };
}

/** succeeded → expired once its result's TTL elapsed (the result is dropped). */
export function expireResult(job: Pick<JobRecord, 'id'>, now: number): TransitionParams {
  return { id: job.id, from: 'succeeded', to: 'expired', reason: 'result TTL elapsed', at: now, patch: { result: null } };
}

// ---- what an applied write announces ------------------------------------------------------------

/** The announcements of `write` once it applied: a change, and a cancel request when it records one. */
export function eventsOf(job: JobIdentity, write: TransitionParams): TransitionEvent[] {
  const data = { id: job.id, tenant: job.tenant, type: job.type, from: write.from, to: write.to, reason: write.reason };
  // A child's changes name its parent, for the parent's fan-in (workflow/parents.ts).
  const changed: TransitionEvent = { name: 'job:changed', data: job.parentId ? { ...data, parentId: job.parentId } : data };
  const request = write.patch?.cancelRequest;
  if (!request) return [changed];
  return [changed, { name: 'job:cancel-requested', data: { id: job.id, reason: request.reason } }];
}
