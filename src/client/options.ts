/** The client's options, requests and results (src/client/client.ts uses them; `longhaul/client` exports them). */
import type { JobSnapshot, Priority } from '../core/job.js';
import type { JobState } from '../core/states.js';

/** The subset of `fetch` the client uses; the global `fetch` fits. */
export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/** How polling (in `wait()`, and in `stream()` after it falls back) spaces its requests. */
export interface PollingOptions {
  /** First delay when the server sends no `Retry-After`; doubles on every unchanged read. Default 1000. */
  initialMs?: number;
  /** Cap of the doubling. Default 10000. */
  maxMs?: number;
  /** Floor under a `Retry-After` (so `Retry-After: 0` cannot become a hot loop). Default 50. */
  minMs?: number;
}

/** Reconnection behaviour of `stream()`. */
export interface StreamTuning {
  /** Delay before reconnecting when the server sent no `retry:` hint. Default 2000. */
  retryMs?: number;
  /** This many dropped connections within `fallbackWindowMs` switch the stream to polling. Default 3. */
  fallbackDrops?: number;
  /** Default 30000. */
  fallbackWindowMs?: number;
}

export interface LonghaulClientOptions {
  /** Where the API is, e.g. `http://127.0.0.1:8080` (a path prefix is kept: `https://host/jobs-api`). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** A `fetch` to use instead of the global one. */
  fetch?: FetchLike;
  /** Extra headers for every request. */
  headers?: HeadersInit;
  polling?: PollingOptions;
  stream?: StreamTuning;
}

export interface RequestOptions {
  /** Aborts the request; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface SubmitOptions extends RequestOptions {
  priority?: Priority;
  /** When to run: a Date or an ISO 8601 string. */
  runAt?: Date | string;
  delayMs?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  metadata?: Record<string, unknown> | null;
  /** Sent as the `Idempotency-Key` header: 1 to 255 printable ASCII characters (else a TypeError, before any request). */
  idempotencyKey?: string;
  /** Notify this URL (Standard Webhooks) when the job succeeds, fails or is cancelled; `secret` is `whsec_...`. */
  webhook?: { url: string; secret?: string };
}

export interface SubmitResult {
  job: JobSnapshot;
  /** True when the server answered an `Idempotency-Key` replay (`200`, `Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The `Retry-After` hint in ms: when polling the job first makes sense. Null when absent. */
  retryAfterMs: number | null;
  /** The `Location` header (the job's URL path), or null when absent. */
  location: string | null;
}

export interface GetResult {
  job: JobSnapshot;
  /** The `Retry-After` hint in ms; null for a terminal job. */
  retryAfterMs: number | null;
}

export interface ListFilters extends RequestOptions {
  status?: JobState | JobState[];
  type?: string;
  /** Only this job's children, oldest first. */
  parentId?: string;
  /** Only jobs whose id or metadata contains this text (letters A to Z in any case); at most 200 characters. */
  q?: string;
  /** Page size, 1–1000 (server default 50). */
  limit?: number;
  cursor?: string;
  /** Admin keys: another tenant's jobs, or '*' for every tenant's (a tenant key naming another tenant gets a 403). */
  tenant?: string;
}

export interface StreamTokenRequest extends RequestOptions {
  /** The job ids the token grants. */
  jobs?: string[];
  /** Grant the tenant-wide feed. */
  all?: boolean;
  /** Default 300, at most 3600. */
  ttlSeconds?: number;
}

export interface WaitOptions extends RequestOptions {
  /** Give up after this long: rejects with `LonghaulTimeoutError`. */
  timeoutMs?: number;
  /** Called with the first snapshot and then with every changed one. */
  onUpdate?: (job: JobSnapshot) => void;
  polling?: PollingOptions;
}

export interface StreamOptions extends RequestOptions {
  /** Called with every snapshot before it is yielded. */
  onSnapshot?: (job: JobSnapshot) => void;
  /** Resume after this event id (sent as `Last-Event-ID` on the first connection). */
  lastEventId?: string;
  polling?: PollingOptions;
}

/** What `purge` erases: at least one of tenant, type and before. */
export interface PurgeRequest {
  tenant?: string;
  /** Ended states (succeeded, expired, failed, cancelled); default all four. */
  state?: string | string[];
  type?: string;
  /** Only jobs that ended before this time (a Date or an ISO date-time). */
  before?: Date | string;
}

/** What a purge removed: rows per table, blobs deleted, and matching jobs left because they have not ended. */
export interface PurgeResponse {
  deleted: { jobs: number; files: number; progress: number; resultFiles: number; webhooks: number; deliveries: number; signals: number; attempts: number };
  skipped: number;
}
