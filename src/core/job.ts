/** The job record every store keeps, its transition log entries, and the public snapshot. */
import type { JobError } from './errors.js';
import type { Progress } from './progress.js';
import type { JobState } from './states.js';
import type { JobWait, WorkflowState } from './workflow.js';

export const PRIORITIES = ['critical', 'high', 'normal', 'low'] as const;
export type Priority = (typeof PRIORITIES)[number];

/** Stored rank: lower runs first. */
export function priorityRank(p: Priority): number {
  return PRIORITIES.indexOf(p);
}

export function priorityName(rank: number): Priority {
  return PRIORITIES[rank] ?? 'normal';
}

export interface Checkpoint {
  version: number;
  data: unknown;
  /** Set by a store when the saved bytes could not be read back; the next attempt starts over. */
  corrupt?: boolean;
}

/** A job as stores hold it. Times are Unix milliseconds. */
export interface JobRecord {
  id: string;
  tenant: string;
  type: string;
  state: JobState;
  priority: Priority;
  input: unknown;
  metadata: Record<string, unknown> | null;
  result: unknown;
  error: JobError | null;
  attempts: number;
  maxAttempts: number;
  /** Fencing token: incremented by every claim. */
  lease: number;
  workerId: string | null;
  cancelRequested: boolean;
  cancelReason: string | null;
  cancelRequestedAt: number | null;
  stalled: boolean;
  parentId: string | null;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  updatedAt: number;
  runAt: number;
  expiresAt: number | null;
  heartbeatAt: number | null;
  timeoutMs: number | null;
  heartbeatTimeoutMs: number;
  stallTimeoutMs: number | null;
  resultTtlMs: number;
  checkpoint: Checkpoint | null;
  idempotencyKey: string | null;
  progress: Progress;
  /** The workflow journal (waits reached, stage outputs, saga steps); null until the handler first waits or completes a stage. */
  workflow: WorkflowState | null;
  /** What the job waits for while `waiting` (null otherwise). */
  wait: JobWait | null;
  /** Children spawned by this job so far (ctx.spawn). */
  childrenTotal: number;
}

/** One entry of a job's transition log. `from === to` marks an annotation (e.g. cancel requested). */
export interface TransitionEntry {
  from: JobState | null;
  to: JobState;
  at: number;
  reason: string;
  attempt: number;
  workerId: string | null;
}

/** A parent's children: how many in all, and by state (every state present). */
export interface ChildrenCounts {
  total: number;
  byState: Record<JobState, number>;
}

/** A result file as a snapshot lists it: `url` is a signed, expiring download URL. */
export interface ResultFileLink {
  name: string;
  size: number;
  contentType: string;
  url: string;
}

/** The public view of a job, identical in the library API, HTTP and events. */
export interface JobSnapshot {
  id: string;
  type: string;
  status: JobState;
  priority: Priority;
  input: unknown;
  metadata: Record<string, unknown> | null;
  progress: Progress;
  result: unknown;
  resultUrl: string | null;
  /** The job's result files with signed URLs (empty when it has none, or once it expired). */
  results: ResultFileLink[];
  /** Downloads of the job's result files so far (each download counted once). */
  downloads: number;
  /**
   * Why the job is in its current state: set while it is `retrying`, `failed` or `cancelled`,
   * null otherwise (a new attempt running, or done). The failure of an earlier attempt is `lastError`.
   */
  error: JobError | null;
  /** The error of the latest attempt that failed (or of the cancel), kept after a retry or a later success. */
  lastError: JobError | null;
  attempts: number;
  maxAttempts: number;
  cancelRequested: boolean;
  stalled: boolean;
  parentId: string | null;
  /** While `waiting`: what the job waits for (its children, a time, or a signal); null otherwise. */
  waitingFor: JobWait | null;
  /** A job that spawned children: how many, and how many are in each state; null for others. */
  children: ChildrenCounts | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  updatedAt: string;
  runAt: string;
  expiresAt: string | null;
  links: { self: string; events: string; cancel: string };
}

// The last instant written: a new job's createdAt, updatedAt and runAt are one instant, and
// jobs submitted together share it (toISOString is a third of toSnapshot's time).
let lastMs = Number.NaN;
let lastIso = '';

function iso(ms: number | null): string | null {
  if (ms === null) return null;
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString();
    lastMs = ms;
  }
  return lastIso;
}

/** The states a job is in because of its error (the snapshot's `error` is set only in these). */
export const ERROR_STATES: ReadonlySet<JobState> = new Set<JobState>(['retrying', 'failed', 'cancelled']);

export function toSnapshot(job: JobRecord, basePath = '/v1/jobs'): JobSnapshot {
  const self = `${basePath}/${job.id}`;
  const progress = job.state === 'succeeded' && job.progress.percent !== 100 ? { ...job.progress, percent: 100, eta: 0 } : job.progress;
  return {
    id: job.id,
    type: job.type,
    status: job.state,
    priority: job.priority,
    input: job.input,
    metadata: job.metadata,
    progress,
    result: job.result ?? null,
    resultUrl: null,
    results: [],
    downloads: 0,
    error: ERROR_STATES.has(job.state) ? job.error : null,
    lastError: job.error,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    cancelRequested: job.cancelRequested,
    stalled: job.stalled,
    parentId: job.parentId,
    waitingFor: job.state === 'waiting' ? job.wait : null,
    // Counted by the reader (facade/reads.ts) for a job with children: not part of the job record.
    children: null,
    createdAt: iso(job.createdAt) as string,
    startedAt: iso(job.startedAt),
    finishedAt: iso(job.finishedAt),
    updatedAt: iso(job.updatedAt) as string,
    runAt: iso(job.runAt) as string,
    expiresAt: iso(job.expiresAt),
    links: { self, events: `${self}/events`, cancel: `${self}/cancel` },
  };
}
