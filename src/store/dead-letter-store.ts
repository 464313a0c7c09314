/**
 * The dead-letter part of the storage contract (see store.ts): the attempt history of a job, and
 * the failed jobs (the dead-letter set) grouped by task type and error code, listed, and picked
 * out by a filter for a bulk retry or discard.
 */
import type { JobError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';
import type { JobState } from '../core/states.js';

/** One attempt that ended without succeeding, as the store keeps it. Times are Unix ms. */
export interface AttemptRecord {
  /** The attempt's number in its budget (1-based; a manual retry starts a new budget at 1). */
  attempt: number;
  /** The lease the attempt ran under: unique per run of a job, in the order the runs started. */
  lease: number;
  workerId: string | null;
  startedAt: number | null;
  endedAt: number;
  /** The state the attempt left the job in: failed, retrying, cancelled or waiting. */
  outcome: JobState;
  /** The transition's reason ('retry scheduled', 'heartbeat lost; requeued', 'shutdown'...). */
  reason: string;
  /** The error the attempt ended with; null when it ended without one (a hand-back, a wait). */
  error: JobError | null;
  /** The stack of what the handler threw, when it threw an Error. */
  stack: string | null;
}

/** Failed jobs to act on or list. Every field narrows; none is required by the store. */
export interface DeadLetterFilter {
  /** Absent: every tenant's (an admin's view). */
  tenant?: string;
  type?: string;
  /** The failed job's error code; null: only jobs that failed without one (the group listed with code null). */
  code?: string | null;
  /** Failed at or after this time (its finishedAt). */
  failedFrom?: number;
  /** Failed before this time. */
  failedBefore?: number;
  /** Only these jobs. */
  ids?: readonly string[];
}

/** Failed jobs of one task type and error code (and tenant, in an all-tenant listing). */
export interface DeadLetterGroup {
  tenant: string;
  type: string;
  /** The error code; null for a job that failed without an error. */
  code: string | null;
  count: number;
  /** The newest failure in the group. */
  lastFailedAt: number;
}

/** Where a page of failed jobs continues: after this (finishedAt, id), in the page's order. */
export interface DeadLetterCursor {
  finishedAt: number;
  id: string;
}

/**
 * The attempt history and the dead-letter set. Guarantees:
 * - Each attempt that ends without succeeding (the job leaves `running` for failed, retrying,
 *   cancelled or waiting: a failure, a retry, a timeout, a reaped worker, a cancel, a hand-back,
 *   a wait) is recorded in the same transaction as the transition that ends it, once per run
 *   (per lease), with the error and stack the transition carries. An attempt that succeeded is
 *   not recorded: the job row is its record (started, finished, worker).
 * - Attempt rows are deleted with their job (RetentionStore.deleteJobs).
 * - `failedJobs` pages with a keyset cursor over (finishedAt, id): a job failing or leaving
 *   `failed` meanwhile neither repeats nor shifts the others.
 */
export interface DeadLetterStore {
  /**
   * The recorded attempts of a job, by lease, oldest first, after `afterLease` (exclusive), at most
   * `limit`. Null when the job does not exist (or is another tenant's).
   */
  listAttempts(params: { id: string; tenant?: string; afterLease?: number; limit: number }): Promise<AttemptRecord[] | null>;
  /** Failed jobs grouped by tenant, type and error code, most recent failure first, at most `limit` groups. */
  deadLetterGroups(params: { filter: DeadLetterFilter; limit: number }): Promise<DeadLetterGroup[]>;
  /**
   * Failed jobs matching the filter, at most `limit`, after `cursor`: newest failure first
   * (`order` 'desc', listings) or oldest first ('asc', bulk operations, which walk the set once).
   */
  failedJobs(params: { filter: DeadLetterFilter; limit: number; order: 'asc' | 'desc'; cursor?: DeadLetterCursor | null }): Promise<JobRecord[]>;
}
