/**
 * What the API answers besides a job snapshot (core/job.ts): a page of jobs, a transition as
 * the log shows it, the stats, a stream token. One declaration for the server and the client,
 * which imports these type-only (it takes nothing from the server), so they stay plain types.
 */
import type { JobSnapshot } from './job.js';
import type { JobState } from './states.js';

/** A page of `GET /v1/jobs`. */
export interface SnapshotPage {
  items: JobSnapshot[];
  /** Pass as `cursor` for the next page; null on the last one. */
  nextCursor: string | null;
}

/** One entry of a job's transition log (core/job.ts TransitionEntry) as the API shows it. */
export interface JobTransition {
  from: JobState | null;
  to: JobState;
  /** ISO 8601. */
  at: string;
  reason: string;
  attempt: number;
  workerId: string | null;
}

export interface JobStats {
  counts: Record<JobState, number>;
  rates: { submittedPerMinute: number; finishedPerMinute: number };
  /** Run time (startedAt → finishedAt of the last attempt) in ms per task type, over jobs finished in the last 15 minutes. */
  durations: Record<string, { count: number; p50: number; p95: number; p99: number }>;
}

/** A short-lived token for `EventSource` / WebSocket URLs (`?token=`), from `POST /v1/stream-tokens`. */
export interface StreamToken {
  token: string;
  /** ISO 8601. */
  expiresAt: string;
}
