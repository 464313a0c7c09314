/** The retention part of the storage contract (see store.ts): deleting ended jobs with every row of theirs. */
import type { JobState } from '../core/states.js';

/** Ended jobs to delete: retention's rule (core/retention.ts) or a purge's filter. */
export interface EndedJobFilter {
  /** Ended states only (succeeded, expired, failed, cancelled); others never match. */
  states: readonly JobState[];
  /** Jobs that ended before this time. */
  finishedBefore?: number;
  /**
   * Jobs that ended at or after this time: a deletion that resumes where its previous batch
   * ended, so that it does not walk again over the index entries of the rows it just deleted
   * (PostgreSQL keeps them until vacuum, and a walk over them from the start grows with every batch).
   */
  finishedFrom?: number;
  tenant?: string;
  types?: readonly string[];
  excludeTypes?: readonly string[];
}

/** Rows removed by deleteJobs, per table (transitions, checkpoints and the journal are in the job row). */
export interface DeletedRows {
  jobs: number;
  progress: number;
  resultFiles: number;
  webhooks: number;
  deliveries: number;
  signals: number;
  /** Rows of the attempt history (DeadLetterStore). */
  attempts: number;
}

/**
 * Retention and erasure: deleting ended jobs with every row that belongs to them. Guarantees:
 * - Only ended jobs are deleted, and never a job that still has children rows: a parent goes
 *   after its last child (each child on its own clock), so no row ever names a missing parent.
 * - `deleteJobs` is one short transaction per call; a job that left its ended state since it
 *   was selected (a manual retry) is kept.
 * - Nothing here touches blob storage: the caller deletes a job's files first (so a crash in
 *   between leaves rows whose next deletion deletes the files again, never orphaned files).
 */
export interface RetentionStore {
  /** Ended jobs matching the filter that have no children rows, oldest end first, at most `limit`. */
  endedJobs(params: { filter: EndedJobFilter; limit: number }): Promise<Array<{ id: string; finishedAt: number }>>;
  /** Jobs of the tenant/type that are not ended (a purge skips and reports them). */
  countOpenJobs(params: { tenant?: string; type?: string }): Promise<number>;
  /**
   * Deletes the listed jobs that are ended (in one of `states`, when given) and childless, with
   * their progress, result file records, webhook target, delivery log, signals and attempt history.
   */
  deleteJobs(params: { ids: readonly string[]; states?: readonly JobState[] }): Promise<DeletedRows>;
}
