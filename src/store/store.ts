/**
 * The storage contract, in eight parts: the job queue (JobQueueStore), result files
 * (ResultFileStore), the webhook outbox (WebhookOutboxStore), workflows (WorkflowStore),
 * schedules (ScheduleStore), retention (RetentionStore), dead letters (DeadLetterStore) and API
 * keys (ApiKeyStore). Every store (SQLite, PostgreSQL)
 * implements all eight as one `Store` on one database, and one contract suite per
 * part (test/contract/store-contract/) checks every implementation. Each part's guarantees are with it;
 * the result-file, webhook, workflow, schedule, retention, dead-letter and API-key parts are in
 * result-file-store.ts, webhook-outbox-store.ts, workflow-store.ts, schedule-store.ts,
 * retention-store.ts, dead-letter-store.ts and api-key-store.ts, re-exported here.
 */
import type { Checkpoint, JobRecord, Priority, TransitionEntry } from '../core/job.js';
import { EMPTY_PROGRESS, type Progress } from '../core/progress.js';
import type { JobState } from '../core/states.js';
import type { DurationBucketCount } from '../core/stats-window.js';
import type { TransitionParams } from '../core/transitions.js';
import type { ApiKeyStore } from './api-key-store.js';
import type { DeadLetterStore } from './dead-letter-store.js';
import type { ResultFileStore } from './result-file-store.js';
import type { RetentionStore } from './retention-store.js';
import type { ScheduleStore } from './schedule-store.js';
import type { WebhookOutboxStore } from './webhook-outbox-store.js';
import type { WorkflowStore } from './workflow-store.js';

/** A job as submitted: everything the store writes on insert. */
export interface NewJob {
  id: string;
  tenant: string;
  type: string;
  state: 'pending' | 'queued';
  priority: Priority;
  input: unknown;
  metadata: Record<string, unknown> | null;
  maxAttempts: number;
  runAt: number;
  createdAt: number;
  timeoutMs: number | null;
  heartbeatTimeoutMs: number;
  stallTimeoutMs: number | null;
  resultTtlMs: number;
  parentId: string | null;
  idempotencyKey: string | null;
  /** Hash of the request, compared when the idempotency key is seen again. */
  requestHash: string | null;
  /** The task's `concurrencyKey` of the input, when the task has one. */
  concurrencyKey?: string | null | undefined;
  /** W3C trace context of the submit (`traceparent`), continued by the worker's attempt spans (src/telemetry/trace.ts). */
  traceParent?: string | null;
}

/**
 * The record of a job just inserted, as getJob will read it back (the request hash is stored
 * but is not part of a JobRecord). Written out field by field: a spread of the NewJob plus the
 * other fields cost more than the INSERT itself on the bulk-enqueue path (bench/RESULTS.md).
 */
export function insertedRecord(job: NewJob): JobRecord {
  return {
    id: job.id,
    tenant: job.tenant,
    type: job.type,
    state: job.state,
    priority: job.priority,
    input: job.input,
    metadata: job.metadata,
    result: null,
    error: null,
    attempts: 0,
    maxAttempts: job.maxAttempts,
    lease: 0,
    workerId: null,
    cancelRequested: false,
    cancelReason: null,
    cancelRequestedAt: null,
    stalled: false,
    parentId: job.parentId,
    createdAt: job.createdAt,
    startedAt: null,
    finishedAt: null,
    updatedAt: job.createdAt,
    runAt: job.runAt,
    expiresAt: null,
    heartbeatAt: null,
    timeoutMs: job.timeoutMs,
    heartbeatTimeoutMs: job.heartbeatTimeoutMs,
    stallTimeoutMs: job.stallTimeoutMs,
    resultTtlMs: job.resultTtlMs,
    checkpoint: null,
    idempotencyKey: job.idempotencyKey,
    progress: EMPTY_PROGRESS,
    workflow: null,
    wait: null,
    childrenTotal: 0,
  };
}

/**
 * A database client with an open transaction, owned by the caller (PostgreSQL: a `pg` Client,
 * or a PoolClient from `pool.connect()`). Only the PostgreSQL store accepts one.
 */
export interface SqlTransaction {
  query: (...args: never[]) => unknown;
}

export interface InsertJobParams {
  job: NewJob;
  /** Refuse (kind 'full') when the tenant-independent backlog (pending+queued+retrying) is at least this. */
  maxBacklog?: number;
  /**
   * Per-tenant backlog limits, by tenant (core/quotas.ts): a new job whose tenant already has at
   * least this many jobs pending, queued or retrying is refused (kind 'tenant-full'). Counted in
   * the insert's own transaction, serialized per tenant (SQLite: the write lock; PostgreSQL: a
   * transaction-level advisory lock per tenant), so concurrent submissions never take a tenant
   * past its limit. Tenants not named have no limit. A job found again by its idempotency key
   * answers 'existing' (or 'conflict') whatever the limit.
   */
  maxTenantBacklog?: Readonly<Record<string, number>>;
  /** Lifetime of idempotency keys: a key held by a job created this long before the new one names a new job (core/retention.ts keyReusable). */
  idempotencyTtlMs?: number;
  /**
   * Insert on this client, inside the caller's open transaction: the job exists only if that
   * transaction commits. PostgreSQL only: Longhaul refuses the option on other stores.
   */
  tx?: SqlTransaction;
}

export interface InsertJobsParams extends Omit<InsertJobParams, 'job'> {
  jobs: NewJob[];
  /**
   * The tenant limits apply to the jobs as one batch: when the new jobs (those not found again by
   * their idempotency key) would take a tenant past its limit, none is inserted, and every new
   * job answers 'tenant-full'. Without it each job is decided on its own, in order (the group
   * commit of unrelated submissions).
   */
  wholeBatch?: boolean;
}

export type InsertResult =
  | { kind: 'created'; job: JobRecord }
  /** Same idempotency key, same request: the job that already exists. */
  | { kind: 'existing'; job: JobRecord }
  /** Same idempotency key, different request. */
  | { kind: 'conflict'; job: JobRecord }
  | { kind: 'full'; backlog: number }
  /** The tenant's backlog (counted up to the limit) would pass `maxTenantBacklog[tenant]`. */
  | { kind: 'tenant-full'; tenant: string; backlog: number; limit: number };

export interface GetJobParams {
  id: string;
  /** When given, a job of another tenant is not found. */
  tenant?: string;
}

/** A job's public snapshot as JSON text, read in one step (see Store.getSnapshotJson). */
export interface SnapshotJson {
  state: JobState;
  runAt: number;
  expiresAt: number | null;
  /** What `JSON.stringify(toSnapshot(job))` gives; null when this job takes the general path. */
  json: string | null;
}

export interface ListJobsParams {
  tenant?: string;
  /** Only the children of this job (ctx.spawn), in id order. */
  parentId?: string;
  states?: JobState[];
  type?: string;
  /**
   * Only jobs whose id, or whose metadata as JSON text, contains this text (letters A to Z
   * compared without case; the dashboard's search box).
   */
  text?: string;
  limit: number;
  /** Opaque cursor from a previous page. */
  cursor?: string | null;
}

export interface JobPage {
  items: JobRecord[];
  nextCursor: string | null;
}

/** A task type a claim takes jobs of, with the limits its task declares (all held across every worker). */
export interface ClaimType {
  type: string;
  /** At most this many jobs of the type running at once. */
  concurrency?: number | undefined;
  /** At most this many jobs running at once per concurrency key (the task has a `concurrencyKey`). */
  keyConcurrency?: number | undefined;
  /** At most `max` jobs of the type started (claimed) in any `perMs` window. */
  rateLimit?: { max: number; perMs: number } | undefined;
}

/** Running caps per tenant (`maxRunning` of the tenant quotas): `byTenant` first, else `others`. */
export interface TenantCaps {
  /** Cap per tenant; null: that tenant has none (even when `others` is set). */
  byTenant: Readonly<Record<string, number | null>>;
  others?: number | undefined;
}

/** What a worker's cycle wrote and took. */
export interface ClaimCycle {
  applied: boolean[];
  jobs: JobRecord[];
  /** Per completion: the job was deleted in the same transaction (`deleteOnEnd`, retention 0). Absent: none was. */
  deleted?: boolean[];
  /**
   * When a rate limit held the claim back: the time (epoch ms) its window has room again, for
   * the worker to claim then. Absent otherwise.
   */
  wakeAt?: number | undefined;
}

export interface ClaimParams {
  workerId: string;
  /** Task types this worker runs, with their limits (core/claim-plan.ts says how a claim applies them). */
  types: ReadonlyArray<ClaimType>;
  limit: number;
  /** Priority aging: waiting this long counts as one priority level. null: strict priority. Default 5 min. */
  agingMs?: number | null | undefined;
  /** Running caps per tenant; absent: none. */
  tenantCaps?: TenantCaps | undefined;
  /**
   * The claim time (lease start). Stores read it once, inside their write transaction, so a
   * caller may pass a getter: a claim that first waited for a lock then starts when it ran.
   */
  readonly now: number;
}

/** What a transition may change besides the state. Undefined fields stay as they are. */
/** The transition types live with the builders (core/transitions.ts); re-exported for the stores. */
export type { JobPatch, TransitionParams } from '../core/transitions.js';

export interface LeaseRef {
  id: string;
  lease: number;
}

export interface HeartbeatResult {
  id: string;
  /** False when the lease was lost: the job was reaped, cancelled or finished elsewhere. */
  ok: boolean;
  cancelRequested: boolean;
  cancelReason: string | null;
}

export type SweepKind =
  /** running, heartbeat older than its heartbeat timeout */
  | 'stale'
  /** running past its timeout, no cancel requested yet */
  | 'timed-out'
  /** running, cancel requested longer ago than `drainMs` */
  | 'drained'
  /** running, heartbeat fresh, no progress for its stall timeout, not yet flagged */
  | 'stalled'
  /** succeeded and past expiresAt */
  | 'expired';

export interface SweepParams {
  kind: SweepKind;
  now: number;
  limit: number;
  /** For 'drained': the cancel drain period. */
  drainMs?: number;
}

export interface ActivityParams {
  tenant?: string;
  /** Rates count submissions and ends from this second on. */
  since: number;
  /** Run times of jobs that ended from this minute on. */
  durationsSince: number;
}

export interface Activity {
  submitted: number;
  finished: number;
  /** Run times per task type in log-scaled buckets (core/stats-window.ts). */
  durations: DurationBucketCount[];
}

/** See JobQueueStore.sweepHealth. */
export interface SweepHealth {
  /** Running jobs flagged stalled (no progress for their stall timeout), now. */
  stalled: number;
  /** Zombies reaped in the window. */
  zombiesReaped: number;
}

/** Jobs of one task type in one state. */
export interface TypeStateCount {
  type: string;
  state: JobState;
  count: number;
}

/** What `migrate()` did: `from` is the version found (0: no schema yet), `to` the version now. */
export interface MigrationResult {
  from: number;
  to: number;
}

/**
 * What a store can do beyond the contract, for callers to ask instead of checking which store
 * it is. A new store declares its own.
 */
export interface StoreCapabilities {
  /** `enqueue(..., { tx })` inside the caller's own database transaction (PostgreSQL). */
  transactionalEnqueue: boolean;
  /**
   * Outcome batches a worker may have in flight at once: 1 where one writer at a time is all
   * the database takes (SQLite), 2 where a claim can overlap the previous write (PostgreSQL).
   */
  claimDepth: number;
  /**
   * The store's database can relay events between processes (PostgreSQL NOTIFY). Null when it
   * cannot (SQLite: one machine, other processes poll).
   */
  notify: StoreNotify | null;
}

/**
 * A store's own event relay, in terms no driver owns: the relay of its `kind` reads it
 * (channel/create.ts). What the store shares with that relay (PostgreSQL: its pool and LISTEN
 * connection, store/postgres/notify-share.ts) is opaque here, so the contract names no driver type.
 */
export interface StoreNotify {
  /** Which relay can use it: 'postgres' (LISTEN/NOTIFY, channel/postgres-notify.ts). */
  kind: string;
  /** The database URL the relay's own connections use. */
  connectionString: string;
  /** The relay's channel name (PostgreSQL: the NOTIFY channel). */
  channel: string;
  /** What the store shares with the relay of its kind; only that relay narrows and reads it. */
  shared: unknown;
}

/**
 * The job queue: jobs, their transition log and progress, claims under leases, and what the
 * sweeper and the stats read. Guarantees:
 * - A transition is a compare-and-swap on (id, expected state[, lease token]); the loser gets
 *   `false` and nothing changes. Every applied transition appends one log entry atomically.
 * - A claim increments the job's lease token (fencing); lease-carrying writes (heartbeat,
 *   progress, checkpoint, completion) are refused once the lease has moved on.
 * - `canTransition` from core decides what is legal; a store never applies anything else.
 * - An idempotency key names one job per tenant: the same request finds it again, a different
 *   one is a conflict, and neither inserts a second job. Once that job failed or was cancelled,
 *   or the key's lifetime (`idempotencyTtlMs`) is over, the key is taken from it and names the
 *   new job (core/retention.ts keyReusable).
 */
export interface JobQueueStore {
  readonly capabilities: StoreCapabilities;

  insertJob(params: InsertJobParams): Promise<InsertResult>;
  /** Many jobs in one transaction (bulk enqueue); same semantics as insertJob per job, unless `wholeBatch`. */
  insertJobs(params: InsertJobsParams): Promise<InsertResult[]>;
  getJob(params: GetJobParams): Promise<JobRecord | null>;
  /**
   * The listed jobs that exist, in one read, in no particular order (every tenant's: the caller
   * checked each job's tenant before). What a process's watches read at each interval
   * (facade/watch-backstop.ts): one read for every job it watches, not one per job.
   */
  getJobs(params: { ids: readonly string[] }): Promise<JobRecord[]>;
  /**
   * Optional fast path for status reads: the snapshot built by the database in the read that
   * finds the job. Null when the job is not found (or is another tenant's). Stores without it,
   * and jobs it returns `json: null` for, take getJob and `toSnapshot`.
   */
  getSnapshotJson?(params: GetJobParams): Promise<SnapshotJson | null>;
  listJobs(params: ListJobsParams): Promise<JobPage>;
  getTransitions(params: GetJobParams): Promise<TransitionEntry[] | null>;

  /** Promotes due pending/retrying/waiting jobs, then claims up to `limit` queued jobs for the worker. */
  claimJobs(params: ClaimParams): Promise<JobRecord[]>;
  /** A worker's cycle in one write: its completions (as `transition`), then a claim (as `claimJobs`). */
  completeAndClaim(params: { complete: TransitionParams[]; claim: ClaimParams }): Promise<ClaimCycle>;
  /**
   * Compare-and-swap transitions, applied in one write; one boolean per item, in order. An item
   * with `deleteOnEnd` that ends its job deletes it (with its progress and signals) when the job
   * owns no result files, webhook, parent or children, and counts as applied; otherwise it is
   * applied as usual.
   */
  transition(params: { items: TransitionParams[] }): Promise<boolean[]>;
  heartbeat(params: { items: LeaseRef[]; now: number }): Promise<HeartbeatResult[]>;
  /** Read-only: is each lease still held, and is a cancel requested? (cheap cancel polling) */
  leaseStatus(params: { items: LeaseRef[] }): Promise<HeartbeatResult[]>;
  saveProgress(params: LeaseRef & { progress: Progress; now: number }): Promise<boolean>;
  saveCheckpoint(params: LeaseRef & { checkpoint: Checkpoint; now: number }): Promise<boolean>;

  /** Moves due pending/retrying/waiting jobs to queued; returns how many. */
  promoteDue(params: { now: number; limit: number }): Promise<number>;
  /** Jobs the sweeper must act on; it then applies transitions (CAS) itself. */
  sweepCandidates(params: SweepParams): Promise<JobRecord[]>;
  /**
   * Jobs per state, exact, from counters the store keeps in the same transaction as every
   * insert, state change and delete of a job (its cost does not grow with the jobs table).
   */
  countByState(params: { tenant?: string }): Promise<Record<JobState, number>>;
  /** The same counters per task type (types with no job left are omitted). */
  countByTypeAndState(params: { tenant?: string }): Promise<TypeStateCount[]>;
  /** Jobs submitted and ended since `since` (to the second), and run-time buckets of jobs ended since `durationsSince` (to the minute). */
  activity(params: ActivityParams): Promise<Activity>;
  /**
   * What the (elected) sweeper found, cluster-wide: running jobs flagged stalled now, and zombies
   * reaped (attempts ended with one of core's ZOMBIE_REASONS) from the minute of `reapedSince` on;
   * one tenant's, or every tenant's without `tenant`. Reaps are counted per minute as their
   * attempt is recorded (same transaction), so deleting the job later does not uncount them; the
   * cost is the stalled jobs plus the minutes of the window, never the jobs table.
   */
  sweepHealth(params: { tenant?: string; reapedSince: number }): Promise<SweepHealth>;
  /**
   * Upkeep of the stats (the sweeper's pass): drops rate and run-time buckets older than
   * `before`, and folds counter changes written since the last call (stores that log changes
   * rather than update shared rows). Safe to call from several processes at once.
   */
  compactStats(params: { before: number }): Promise<void>;

  /** True when another connection may have written since the last call (cheap poll for idle workers). */
  pollChanges(): Promise<boolean>;
  /**
   * Calls `listener` as soon as another process's write may have made jobs claimable (stores
   * with a push signal: PostgreSQL's NOTIFY), so an idle worker claims at once instead of at
   * its next poll; the listener then reads pollChanges as the poll does. Returns the unsubscribe.
   * Stores without one (SQLite) leave it out: their workers poll.
   */
  onChanges?(listener: () => void): () => void;
  /** The stored trace context (`traceparent`) of each listed job that has one (read only when tracing is on). */
  traceParents(params: { ids: readonly string[] }): Promise<Map<string, string>>;

  /**
   * Stores shared by several nodes elect one sweeper: true while this process holds the
   * sweeper role (it keeps it until it closes or dies), false when another does. Stores
   * without it (SQLite) let every sweeper run.
   */
  tryAcquireSweeperLock?(): Promise<boolean>;
  /**
   * Gives the sweeper role up (a stopped sweeper calls it), so that another process takes it at
   * its next try even while this store stays open (a Longhaul closed over a store its caller
   * keeps). A later tryAcquireSweeperLock may take it again.
   */
  releaseSweeperLock?(): Promise<void>;
}

export type * from './api-key-store.js';
export type * from './dead-letter-store.js';
export type * from './result-file-store.js';
export type * from './retention-store.js';
export type * from './schedule-store.js';
export type * from './webhook-outbox-store.js';
export type * from './workflow-store.js';

/**
 * A whole store: the eight parts in one database, plus what concerns the database as a whole
 * (its schema, its connections, readiness). Code that needs one part takes that part's type.
 */
export interface Store extends JobQueueStore, ResultFileStore, WebhookOutboxStore, WorkflowStore, ScheduleStore, RetentionStore, DeadLetterStore, ApiKeyStore {
  /**
   * Creates or upgrades the schema; safe to run concurrently from several processes. Resolves to
   * the schema version found and the one left (equal when there was nothing to do). `to` stops at
   * that version instead of the latest (the upgrade tests build a database at an older version).
   */
  migrate(to?: number): Promise<MigrationResult>;
  close(): Promise<void>;
  /**
   * One cheap read of Longhaul's own schema: resolves when the database answers and is migrated,
   * rejects otherwise (readiness probes, `GET /readyz`).
   */
  ping(): Promise<void>;
}
