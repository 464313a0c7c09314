/** The API shapes the dashboard reads (docs/api.md): a subset of the server's, kept by hand. */

export const JOB_STATES = ['pending', 'queued', 'running', 'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired'] as const;
export type JobState = (typeof JOB_STATES)[number];
export const TERMINAL: ReadonlySet<string> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

export interface Progress {
  percent: number | null;
  stage: string | null;
  itemsDone: number | null;
  itemsTotal: number | null;
  message: string | null;
  eta: number | null;
  updatedAt: string | null;
}

export interface JobError {
  message: string;
  code: string | null;
  retryable?: boolean;
  stack?: string | null;
}

export interface ResultFile {
  name: string;
  size: number;
  contentType: string;
  url: string;
}

export interface Job {
  id: string;
  type: string;
  status: JobState;
  priority: string;
  input: unknown;
  metadata: Record<string, unknown> | null;
  progress: Progress;
  result: unknown;
  resultUrl: string | null;
  results?: ResultFile[];
  downloads?: number;
  error: JobError | null;
  lastError?: JobError | null;
  attempts: number;
  maxAttempts: number;
  cancelRequested: boolean;
  stalled: boolean;
  parentId: string | null;
  waitingFor?: { kind: string; name: string | null } | null;
  children?: { total: number; byState: Record<string, number> } | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  updatedAt: string;
  runAt: string;
  expiresAt: string | null;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export interface Transition {
  from: string | null;
  to: string;
  at: string;
  reason: string | null;
  attempt: number;
  workerId: string | null;
}

export interface WebhookDelivery {
  deliveryId: string;
  event: string;
  attempt: number;
  at: string;
  url: string;
  status: number | null;
  ok: boolean;
  error: string | null;
  durationMs: number | null;
}

export interface Stats {
  counts: Record<string, number>;
  rates: { submittedPerMinute: number; finishedPerMinute: number };
  durations: Record<string, { count: number; p50: number; p95: number; p99: number }>;
  /** Stalled jobs now and zombies reaped in the last 15 minutes, from the database (absent on older servers). */
  sweeper?: { stalled: number; zombiesReaped: number };
}

/** `GET /v1/jobs/{id}/attempts` (newer servers): `{items, nextCursor}`, oldest first. */
export interface Attempt {
  attempt: number;
  workerId: string | null;
  startedAt: string | null;
  endedAt: string | null;
  /** The state the attempt ended in (`failed`, `retrying`, `cancelled`, `waiting`, `succeeded`), or `running`. */
  outcome: string;
  reason: string | null;
  error: JobError | null;
  stack: string | null;
}

/** `GET /v1/task-types` (newer servers). */
export interface TaskType {
  type: string;
  inputSchema: JsonSchema | null;
  description?: string | null;
}

export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  enum?: unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  description?: string;
  title?: string;
  items?: JsonSchema;
  [extra: string]: unknown;
}

/** `GET /v1/dead-letters` (newer servers): failed jobs grouped by type and error code. */
export interface DeadLetterGroup {
  type: string;
  code: string | null;
  count: number;
  lastFailedAt?: string | number | null;
  tenant?: string;
}
