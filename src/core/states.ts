/**
 * Job states and the one pure function that decides which transitions are allowed.
 *
 * Every state change in every store goes through `canTransition`; a store refuses a
 * transition the table below does not list, whatever the caller asked for.
 */

export const JOB_STATES = [
  'pending', // accepted, runAt in the future; the claim path or sweeper promotes it to queued when due
  'queued', // due, waiting for a worker to claim it
  'running', // claimed by a worker holding a lease (fencing token); heartbeats keep it alive
  'retrying', // an attempt failed or was interrupted; promoted to queued at runAt
  'waiting', // suspended without a worker: for its children, a time or a signal (core/workflow.ts)
  'succeeded', // done; the result is kept until expiresAt, then the sweeper expires it
  'failed', // fatal error or attempts exhausted: the dead-letter set; a manual retry requeues it
  'cancelled', // by a user, or by the system on timeout; a manual retry requeues it
  'expired', // the result was deleted after its TTL; final
] as const;

export type JobState = (typeof JOB_STATES)[number];

const ALLOWED: Readonly<Record<JobState, readonly JobState[]>> = {
  pending: ['queued', 'cancelled'],
  queued: ['running', 'cancelled'],
  running: ['succeeded', 'failed', 'retrying', 'cancelled', 'waiting'],
  retrying: ['queued', 'cancelled'],
  waiting: ['queued', 'cancelled', 'failed'],
  succeeded: ['expired'],
  failed: ['queued'],
  cancelled: ['queued'],
  expired: [],
};

/** States a job never leaves on its own; only a manual retry or expiry moves it on. */
export const TERMINAL_STATES: ReadonlySet<JobState> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** States that count against the queue limit (`LONGHAUL_MAX_QUEUED`). */
export const BACKLOG_STATES: readonly JobState[] = ['pending', 'queued', 'retrying'];

/** States from which a user's cancel takes effect at once (no worker holds the job). */
export const IMMEDIATELY_CANCELLABLE: ReadonlySet<JobState> = new Set(['pending', 'queued', 'retrying', 'waiting']);

export function isJobState(value: unknown): value is JobState {
  return typeof value === 'string' && (JOB_STATES as readonly string[]).includes(value);
}

export function isTerminal(state: JobState): boolean {
  return TERMINAL_STATES.has(state);
}

/**
 * Whether `from → to` is a legal state change. A self-transition (`from === to`) is not a
 * state change: stores use it for log annotations (cancel requested, checkpoint discarded,
 * stalled) and only allow it while the job is running.
 */
export function canTransition(from: JobState, to: JobState): boolean {
  if (from === to) return from === 'running';
  return ALLOWED[from].includes(to);
}

export function allowedTargets(from: JobState): readonly JobState[] {
  return ALLOWED[from];
}

export class IllegalTransitionError extends Error {
  constructor(
    readonly from: JobState,
    readonly to: JobState,
  ) {
    super(`illegal job transition ${from} → ${to}`);
    this.name = 'IllegalTransitionError';
  }
}

export function assertTransition(from: JobState, to: JobState): void {
  if (!canTransition(from, to)) throw new IllegalTransitionError(from, to);
}
