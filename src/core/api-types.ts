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
  /**
   * What the sweeper found, read from the database (the same on every server, whichever
   * process is the elected sweeper): running jobs flagged stalled now, and zombies (running jobs
   * whose worker stopped heartbeating) reaped in the last 15 minutes.
   */
  sweeper: { stalled: number; zombiesReaped: number };
}

/** A short-lived token for `EventSource` / WebSocket URLs (`?token=`), from `POST /v1/stream-tokens`. */
export interface StreamToken {
  token: string;
  /** ISO 8601. */
  expiresAt: string;
}

/** A schedule as a user creates it (`POST /v1/schedules`) or declares it (tasks module). */
export interface ScheduleInput {
  /** Unique in the tenant: letters, digits and . _ : -, 1 to 128. */
  name: string;
  /** The task type each tick submits. */
  task: string;
  /** Five fields (minute first), or six with seconds first. */
  cron: string;
  /** IANA timezone the expression is read in, DST followed. Default 'UTC'. */
  timezone?: string;
  input?: unknown;
  /** Ticks missed while no process ran: 'skip' (default) or 'runOnce' (one run for all of them). */
  catchUp?: 'skip' | 'runOnce';
  /** False: no new run while the previous one is not terminal. Default true. */
  overlap?: boolean;
  /** Create it paused. */
  paused?: boolean;
}

/** A change to a schedule (`PATCH /v1/schedules/{name}`): the fields given replace the stored ones. */
export type SchedulePatch = Partial<Omit<ScheduleInput, 'name' | 'paused'>>;

/** A schedule as the API shows it. Times are ISO 8601 in UTC; `timezone` is the one its cron expression is read in. */
export interface ScheduleView {
  name: string;
  task: string;
  cron: string;
  timezone: string;
  input: unknown;
  catchUp: 'skip' | 'runOnce';
  overlap: boolean;
  paused: boolean;
  /** Declared in the tasks module: read-only over the API but for pause, resume, trigger and delete. */
  declared: boolean;
  /** The next five tick times (empty while paused). */
  nextRuns: string[];
  /** The last run submitted (by a tick or a trigger), with its job's state now (null once the job is gone). */
  lastRun: { at: string; jobId: string; status: JobState | null } | null;
  createdAt: string;
  updatedAt: string;
}

/**
 * One attempt of a job (`GET /v1/jobs/{id}/attempts`), oldest first. Attempts that ended without
 * succeeding are recorded when they end; the attempt running now (`outcome` 'running', `endedAt`
 * null) and the one that succeeded are read from the job itself.
 */
export interface JobAttempt {
  /** Its number in its attempt budget (1-based; a manual retry starts a new budget at 1). */
  attempt: number;
  workerId: string | null;
  /** ISO 8601. */
  startedAt: string | null;
  /** ISO 8601; null while it runs. */
  endedAt: string | null;
  /** The state the attempt left the job in: failed, retrying, cancelled, waiting, succeeded; or running. */
  outcome: JobState;
  /** Why, as the transition log says it ('retry scheduled', 'heartbeat lost; requeued', 'shutdown'...); null for a running attempt. */
  reason: string | null;
  error: { message: string; code: string; retryable: boolean } | null;
  /** The stack of what the handler threw (cut to 8192 characters), when it threw an Error. */
  stack: string | null;
}

/** A page of attempts. */
export interface AttemptPage {
  items: JobAttempt[];
  nextCursor: string | null;
}

/** Failed jobs of one task type and error code (`GET /v1/dead-letters`). */
export interface DeadLetterGroupView {
  type: string;
  /** The error code; null for a job that failed without an error. */
  code: string | null;
  count: number;
  /** ISO 8601: the newest failure in the group. */
  lastFailedAt: string;
  /** Present in an admin's all-tenant listing (`tenant=*`). */
  tenant?: string;
}

/**
 * Which failed jobs a dead-letter operation acts on (`POST /v1/dead-letters/retry|discard`). Every
 * field narrows; `ids` picks jobs out. Times are ISO 8601 (or ms since the epoch).
 */
export interface DeadLetterSelection {
  type?: string;
  /** The error code; null: only the jobs that failed without one (the group listed with `code: null`). */
  code?: string | null;
  /** Failed at or after this time. */
  failedAfter?: string | number;
  /** Failed before this time. */
  failedBefore?: string | number;
  ids?: string[];
  /** Admins only (LONGHAUL_ADMIN_TENANTS): another tenant's jobs, or '*' for every tenant's. */
  tenant?: string;
}

/** What a bulk dead-letter operation did: how many jobs it retried or discarded. */
export interface DeadLetterOutcome {
  count: number;
}

/** A registered task type (`GET /v1/task-types`), for forms that submit jobs. */
export interface TaskTypeView {
  type: string;
  /** The JSON Schema of its input, when the task declares one (a Standard Schema without a JSON Schema gives null). */
  inputSchema: Record<string, unknown> | boolean | null;
  description: string | null;
  maxAttempts: number | null;
  priority: string | null;
  timeoutMs: number | null;
  concurrency: number | null;
}
