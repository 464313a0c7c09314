/**
 * The shapes of a workflow's children as a handler sees them: what `ctx.spawn` takes and
 * resolves to, and `ctx.children`. Declared here, with TaskContext, so task-api/ needs nothing
 * from workflow/ (which implements them: workflow/run.ts).
 */
import type { JobRecord, Priority } from '../core/job.js';
import type { JobState } from '../core/states.js';

/** A child to spawn: a task type, its input and submit options (the tenant is the parent's). */
export interface ChildSpec {
  type: string;
  input?: unknown;
  priority?: Priority;
  metadata?: Record<string, unknown>;
  maxAttempts?: number;
  timeoutMs?: number;
  delayMs?: number;
}

export type FailurePolicy = 'fail-fast' | 'collect';

/** What ctx.spawn resolves to once the children are done: how many ended in each state. */
export interface ChildrenSummary {
  total: number;
  byState: Record<JobState, number>;
  succeeded: number;
  failed: number;
  cancelled: number;
}

/** The children of a job, for a handler run after its spawn (`ctx.children`). */
export interface ChildrenView {
  /** Children spawned by the job before this run. */
  readonly total: number;
  /** The children counted by state now. */
  counts(): Promise<ChildrenSummary>;
  /** One page of children, in id order: their state, result and error. */
  list(options?: { cursor?: string | null; limit?: number; states?: JobState[] }): Promise<{ items: ChildOutcome[]; nextCursor: string | null }>;
  /** Every child, page by page. */
  [Symbol.asyncIterator](): AsyncIterator<ChildOutcome>;
}

export interface ChildOutcome {
  id: string;
  type: string;
  status: JobState;
  input: unknown;
  result: unknown;
  error: JobRecord['error'];
}
