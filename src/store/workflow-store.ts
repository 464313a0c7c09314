/** The workflow part of the storage contract (see store.ts): waiting jobs, signals and children. */
import type { JobState } from '../core/states.js';
import type { JobIdentity, TransitionParams } from '../core/transitions.js';
import type { WaitCondition, WorkflowState } from '../core/workflow.js';
import type { LeaseRef, NewJob } from './store.js';

/** A running job's suspension: its transition to waiting, and what it waits for. */
export interface SuspendParams {
  /** running → waiting under the lease (core/transitions.ts `suspend`), its runAt the wake-up time or NEVER. */
  write: TransitionParams;
  wait: WaitCondition;
  /** The job's journal after this wait (replaces the stored one). */
  workflow: WorkflowState;
  /** Children inserted in the same transaction (wait kind 'children'); each has `parentId` = the job. */
  children?: NewJob[];
}

export type SuspendResult =
  /** The job is waiting (children inserted, journal saved). */
  | { kind: 'suspended' }
  /**
   * A signal wait found the signal already sent: it is consumed by this wait (`wait.key`), the
   * journal is saved, and the job stays running; `payload` is the signal's body.
   */
  | { kind: 'signalled'; payload: unknown }
  /** The lease moved on (or the job is not running): nothing changed. */
  | { kind: 'lost' };

/**
 * A child the store stopped because a sibling failed under their parent's fail-fast wait: the
 * transition it applied (core/transitions.ts `cancelAsChild`, or `requestCancelAsChild` for a
 * running child), for the caller to announce; `childrenTotal` > 0 when it has children of its
 * own, which the caller cancels in turn (workflow/cancel-children.ts).
 */
export interface StoppedSibling {
  job: JobIdentity & { parentId: string };
  write: TransitionParams;
  childrenTotal: number;
}

/** A waiting job the store queued again, for the caller to announce (`job:changed` waiting → queued). */
export interface ResumedJob extends JobIdentity {
  reason: string;
  /** Reason 'child failed' only: the open siblings stopped in the same transaction (absent when there were none). */
  stopped?: StoppedSibling[];
}

export type SignalResult =
  | { kind: 'not-found' }
  /** The job is terminal: the signal is refused and not stored. */
  | { kind: 'ended'; state: JobState }
  /** Stored; `resumed` when it woke the job (waiting for this signal), else buffered for its next wait. */
  | { kind: 'accepted'; job: JobIdentity; resumed: boolean; reason: string };

/**
 * Workflows (core/workflow.ts): suspending a running job, waking it again, signals and children.
 * Guarantees:
 * - `suspend` is one transaction: the CAS running → waiting under the lease, the wait, the
 *   journal and the children; a crash leaves all of it or none.
 * - A waiting job is queued again exactly once per wake-up: when its runAt is due (promoted like
 *   pending and retrying jobs, reason 'wait over'), when the signal it waits for arrives
 *   (`sendSignal`), or when its children are done (`resumeParents`, reason 'children done', or
 *   'child failed' for a failFast wait). Every resumption appends one log entry.
 * - Fail-fast: the transaction that queues a parent with reason 'child failed' also stops the
 *   parent's other open children, one log entry each naming the failed child (store/fail-fast.ts):
 *   pending, queued, retrying and waiting ones are cancelled, a running one gets a cancel request
 *   (none when one is already recorded). They come back in `ResumedJob.stopped`, for the caller
 *   to announce and to cascade to their own children. No failed or cancelled child left (retried
 *   since), nothing is stopped. A child both stopped and listed as a parent is stopped, not queued.
 * - A signal is never lost: one sent while the job is not waiting for it is kept and consumed,
 *   oldest first, by the next wait for that name. Each signal is consumed by one wait at most.
 */
export interface WorkflowStore {
  suspend(params: SuspendParams): Promise<SuspendResult>;
  /** Saves the journal of a running job under its lease (a stage's output, a saga step); false when the lease is gone. */
  saveWorkflow(params: LeaseRef & { workflow: WorkflowState; now: number }): Promise<boolean>;
  /**
   * Queues again each listed parent that waits for its children and whose children are now all
   * terminal, or (failFast wait, `childFailed`) one of whose children just failed or was
   * cancelled (its open siblings stopped in the same transaction, see above). Called after
   * children end; a parent not in that case is left alone.
   */
  resumeParents(params: { parents: ReadonlyArray<{ id: string; childFailed: boolean }>; at: number }): Promise<ResumedJob[]>;
  /** The same for every parent in that case, at most `limit` (the sweeper's backstop after a crash between a child's end and its resumeParents). */
  resumeStrandedParents(params: { at: number; limit: number }): Promise<ResumedJob[]>;
  /** Stores a signal for the job and wakes it when it waits for that name. */
  sendSignal(params: { id: string; tenant?: string; name: string; payload: unknown; at: number }): Promise<SignalResult>;
  /** The signal consumed by the wait `key` of job `id`; null when none was. */
  consumedSignal(params: { id: string; key: string }): Promise<{ payload: unknown } | null>;
  /** The job's children counted by state (every state present, 0 when none). */
  countChildren(params: { id: string }): Promise<Record<JobState, number>>;
}
