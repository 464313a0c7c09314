/**
 * The library API (DESIGN §3): `Longhaul.open({ database, tasks })`, then submit, get, list,
 * cancel, retry, transitions, watch, startWorker, close. The HTTP server and the CLI are thin
 * layers over this class.
 */
import { createHash } from 'node:crypto';
import pino, { type Logger } from 'pino';
import { JobFiles, type JobFilesOptions, lazyResults, lazyUploads } from './blobs/job-files.js';
import type { StoredResultFile } from './blobs/results.js';
import { sweepExpiredUploads } from './blobs/uploads.js';
import { type BusBridge, connectBus, isRelayed } from './channel/bridge.js';
import { JobBus } from './channel/bus.js';
import type { Channel } from './channel/channel.js';
import { createChannel } from './channel/create.js';
import { checkHeartbeat, type LonghaulConfig, logLevelFromEnv, resolveConfig } from './config.js';
import {
  IdempotencyConflictError,
  InputValidationError,
  InvalidOptionsError,
  JobNotFoundError,
  JobStateConflictError,
  QueueFullError,
  UnknownTaskError,
  UnstorableValueError,
} from './core/errors.js';
import { uuidv7 } from './core/ids.js';
import { jsonDepth, MAX_ATTEMPTS_LIMIT, MAX_IDEMPOTENCY_KEY, MAX_JSON_DEPTH, MAX_SCHEDULE_MS, MAX_TIMEOUT_MS } from './core/limits.js';
import { type JobRecord, type JobSnapshot, PRIORITIES, type Priority, toSnapshot } from './core/job.js';
import { nextInOrder } from './core/snapshot-order.js';
import { IMMEDIATELY_CANCELLABLE, isJobState, isTerminal, type JobState } from './core/states.js';
import { findUnstorable, findUnstorableInJson, hasUnstorable, type UnstorableAt, unstorableIssue } from './core/storable.js';
import { SqliteStore } from './store/sqlite/sqlite-store.js';
import { PostgresStore } from './store/postgres/postgres-store.js';
import { Batcher } from './store/batcher.js';
import type { InsertResult, MigrationResult, NewJob, SnapshotJson, SqlTransaction, Store } from './store/store.js';
import { Sweeper } from './sweeper/sweeper.js';
import { collectTasks, isTask, type Task } from './task-api/define.js';
import { validateInput } from './task-api/schema.js';
import {
  checkWebhookOption,
  dispatchWebhookEvents,
  INTERNAL_TENANT,
  resolveWebhookConfig,
  type WebhookConfig,
  type WebhookConfigOptions,
  type WebhookOption,
  WEBHOOK_TASK_TYPE,
  webhookTask,
} from './webhooks/service.js';
import { Worker, type WorkerOptions } from './worker/runtime.js';
import { parseJson } from './core/json-text.js';
import { cancelNow, manualRetry, requestCancel } from './core/transitions.js';
import { applyTransition } from './transitions/apply.js';

export interface OpenOptions extends Partial<LonghaulConfig> {
  /** A SQLite path or a `postgres://` URL (default `./longhaul.db`, or `LONGHAUL_DATABASE_URL`), or a ready Store. */
  database?: string;
  store?: Store;
  /**
   * How job events and progress reach the other processes of a deployment (other API servers'
   * SSE/WebSocket clients, workers running a job someone cancels):
   * - undefined (default): Redis pub/sub when `redisUrl` (or `LONGHAUL_REDIS_URL`) is set, else
   *   LISTEN/NOTIFY when the database is PostgreSQL, else none (SQLite: one machine, store polling);
   * - a Channel: that one (Longhaul neither opens nor closes it);
   * - false: none (a process that only migrates, or a single process on PostgreSQL).
   */
  channel?: Channel | false;
  /** Tasks: an array, an object of tasks, or an imported tasks module. */
  tasks?: readonly Task[] | Record<string, unknown>;
  logger?: Logger;
  /** Blob storage of result files and uploads (default: from LONGHAUL_BLOB_DIR / LONGHAUL_S3_*; opened on first use). */
  files?: JobFilesOptions;
  /** Webhook delivery settings (default: from LONGHAUL_WEBHOOK_*). */
  webhooks?: WebhookConfigOptions;
}

export interface SubmitOptions {
  priority?: Priority;
  /** When to run: a Date, an ISO string or epoch ms. Not with delayMs. */
  runAt?: Date | string | number;
  delayMs?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  metadata?: Record<string, unknown>;
  idempotencyKey?: string;
  tenant?: string;
  parentId?: string;
  /**
   * Notify this URL (Standard Webhooks) when the job succeeds, fails or is cancelled. The URL
   * must pass the SSRF guard (a `WebhookRefusedError`, 422, otherwise); `secret` (whsec_...)
   * defaults to LONGHAUL_WEBHOOK_SECRET.
   */
  webhook?: WebhookOption;
  /**
   * PostgreSQL only: a `pg` client (Client, or PoolClient from `pool.connect()`) with an open
   * transaction. The job is inserted in that transaction: a rollback leaves no job, and workers
   * see it (and are woken by NOTIFY, which PostgreSQL delivers at commit) only once it commits.
   * No `job:submitted` event is emitted for it, since this process cannot tell whether it will commit.
   */
  tx?: SqlTransaction;
}

export interface TenantScope {
  tenant?: string;
}

export interface ListOptions extends TenantScope {
  status?: JobState | JobState[];
  type?: string;
  limit?: number;
  cursor?: string | null;
}

export interface PublicTransition {
  from: JobState | null;
  to: JobState;
  at: string;
  reason: string;
  attempt: number;
  workerId: string | null;
}

export interface StartWorkerOptions
  extends Partial<Pick<WorkerOptions, 'concurrency' | 'workerId' | 'pollIntervalMs' | 'cancelPollMs' | 'progressIntervalMs' | 'claimAhead' | 'claimedWaitMs'>> {
  /** Also run the sweeper in this process. Default true. */
  sweeper?: boolean;
  /** Drain running jobs and exit on SIGTERM/SIGINT. Default false (the CLI turns it on). */
  handleSignals?: boolean;
  /** How long a graceful stop waits for running jobs before handing them back. Default 10 000 ms. */
  drainMs?: number;
}

export interface WorkerHandle {
  readonly id: string;
  readonly stats: Worker['stats'];
  stop(options?: { drainMs?: number }): Promise<void>;
  idle(): Promise<void>;
}

/** One webhook delivery attempt, as `GET /v1/jobs/{id}/webhooks` lists it. */
export interface WebhookDelivery {
  deliveryId: string;
  event: string;
  attempt: number;
  at: string;
  url: string;
  status: number | null;
  ok: boolean;
  error: string | null;
  durationMs: number;
  response: string | null;
}

export interface JobStats {
  counts: Record<JobState, number>;
  rates: { submittedPerMinute: number; finishedPerMinute: number };
  /** Run time (startedAt → finishedAt of the last attempt) in ms, per task type. */
  durations: Record<string, { count: number; p50: number; p95: number; p99: number }>;
}


function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const keys = Object.keys(value as object)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);
}

function toEpoch(runAt: Date | string | number, now: number): number {
  const ms = runAt instanceof Date ? runAt.getTime() : typeof runAt === 'string' ? Date.parse(runAt) : runAt;
  if (typeof ms !== 'number' || !Number.isFinite(ms)) throw new InvalidOptionsError(`runAt must be a date, an ISO 8601 string or epoch ms (got ${JSON.stringify(runAt)})`, 'runAt');
  if (Math.abs(ms - now) > MAX_SCHEDULE_MS) throw new InvalidOptionsError('runAt must be within 100 years of now', 'runAt');
  return ms;
}

/** Refuses a submitted string no store accepts (core/storable.ts), naming where it is. */
function refuseUnstorable(at: UnstorableAt | null): void {
  if (at) throw new UnstorableValueError(at.path, unstorableIssue(at));
}

/** A JSON copy of `value` (what the store keeps), or a clear error naming `what`. */
function jsonCopy(value: unknown, what: string): unknown {
  const tooDeep = () => new InvalidOptionsError(`${what} nests deeper than ${MAX_JSON_DEPTH} levels`, what);
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    if (jsonDepth(value) > MAX_JSON_DEPTH) throw tooDeep();
    throw new InvalidOptionsError(`${what} must be JSON-serializable: ${(err as Error).message}`, what);
  }
  if (text === undefined) throw new InvalidOptionsError(`${what} must be JSON-serializable: ${typeof value} has no JSON form`, what);
  // Each level of nesting takes at least two characters: short texts need no walk.
  if (text.length > 2 * MAX_JSON_DEPTH && jsonDepth(value) > MAX_JSON_DEPTH) throw tooDeep();
  const copy: unknown = parseJson(text);
  refuseUnstorable(findUnstorableInJson(copy, text, what));
  return copy;
}

/** How often a watch reads the store when no channel relays other processes' changes. */
const WATCH_POLL_MS = 250;
/** With a channel: a read now and then, in case a relayed event was lost. */
const WATCH_SAFETY_POLL_MS = 2000;

export class Longhaul {
  readonly bus = new JobBus();
  readonly config: LonghaulConfig;
  readonly logger: Logger;
  private readonly taskMap = new Map<string, Task>();
  private migrated: MigrationResult = { from: 0, to: 0 };
  private readonly workers = new Set<WorkerHandle>();
  private sweeper: Sweeper | null = null;
  /** Concurrent submissions share one transaction (group commit). */
  private readonly inserts = new Batcher<NewJob, InsertResult>((jobs) =>
    this.store.insertJobs({ jobs, ...(this.config.maxQueued === undefined ? {} : { maxBacklog: this.config.maxQueued }) }),
  );
  private closed = false;
  private signalCleanup: (() => void) | null = null;
  private filesPromise: Promise<JobFiles> | null = null;
  readonly webhookConfig: WebhookConfig;
  /** Internal tasks every worker of this instance runs besides the user's (webhook delivery). */
  private readonly internalTasks: Task[];
  private dispatchOff: (() => void) | null = null;
  private dispatching: Promise<void> | null = null;
  private dispatchAgain = false;
  /** Relays this process's bus to and from `channel`. */
  private readonly bridge: BusBridge | null;

  private constructor(
    readonly store: Store,
    config: LonghaulConfig,
    tasks: Task[],
    logger: Logger,
    private readonly ownsStore: boolean,
    private readonly filesOptions: JobFilesOptions,
    webhookConfig: WebhookConfig,
    /** The relay between processes (null: none, changes made elsewhere are seen by polling the store). */
    readonly channel: Channel | null,
    private readonly ownsChannel: boolean,
  ) {
    this.config = config;
    this.logger = logger;
    for (const t of tasks) this.addTask(t);
    this.webhookConfig = webhookConfig;
    this.internalTasks = [
      webhookTask({ store, config: webhookConfig, snapshot: async (id) => this.get(id) }),
    ];
    this.bridge = channel
      ? connectBus(this.bus, channel, {
          // A progress too large for a NOTIFY arrives without its value: read it from the store.
          getProgress: async (id) => (await this.store.getJob({ id }))?.progress ?? null,
          logger: logger.child({ component: 'channel', transport: channel.transport }),
        })
      : null;
  }

  /** Blob storage of result files and uploads, opened on first use. */
  files(): Promise<JobFiles> {
    this.assertOpen();
    this.filesPromise ??= JobFiles.open(this.config.database, this.filesOptions).catch((err) => {
      this.filesPromise = null;
      throw err;
    });
    return this.filesPromise;
  }

  static async open(options: OpenOptions = {}): Promise<Longhaul> {
    const config = resolveConfig(options);
    const logger = options.logger ?? pino({ level: logLevelFromEnv('LONGHAUL_LOG_LEVEL', 'info'), name: 'longhaul' });
    const tasks = Array.isArray(options.tasks) ? collectTasks({ default: options.tasks }) : options.tasks ? collectTasks(options.tasks as Record<string, unknown>) : [];
    if (tasks.some((t) => t.type === WEBHOOK_TASK_TYPE)) throw new Error(`the task type "${WEBHOOK_TASK_TYPE}" is reserved for webhook delivery`);
    const webhookConfig = resolveWebhookConfig(options.webhooks);
    let store = options.store;
    if (!store) {
      store = /^postgres(ql)?:\/\//.test(config.database)
        ? new PostgresStore({ connectionString: config.database, poolSize: config.pgPoolSize, logger })
        : new SqliteStore({ path: config.database });
    }
    const migration = await store.migrate();
    let channel: Channel | null = null;
    if (options.channel !== undefined) {
      channel = options.channel === false ? null : options.channel;
    } else {
      const notify = store.capabilities.notify;
      try {
        channel = createChannel({
          databaseUrl: notify ? notify.connectionString : config.database,
          redisUrl: config.redisUrl ?? '',
          redisPrefix: config.redisPrefix,
          ...(notify ? { pool: notify.pool, listen: notify.listen, notifyChannel: notify.channel } : {}),
          logger: logger.child({ component: 'channel' }),
        });
      } catch (err) {
        if (options.store === undefined) await store.close();
        throw err;
      }
    }
    const lh = new Longhaul(
      store,
      config,
      tasks,
      logger,
      options.store === undefined,
      options.files ?? {},
      webhookConfig,
      channel,
      options.channel === undefined && channel !== null,
    );
    lh.migrated = migration;
    if (channel) await lh.channelReady(channel);
    return lh;
  }

  /**
   * Waits (a few seconds at most) for the channel to receive, so that a process that reports
   * ready also relays. A channel that is down does not stop the process: it reconnects by itself
   * and, meanwhile, watchers catch up by reading the store.
   */
  private async channelReady(channel: Channel, timeoutMs = 5000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const up = await Promise.race([
      channel.ready().then(() => true, () => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!up) this.logger.warn({ transport: channel.transport }, 'the events channel is not up yet; continuing (it reconnects by itself, streams fall back to reading the store)');
  }

  /** What opening did to the schema: the version found (0: none yet) and the version now (equal: nothing to do). */
  get migration(): MigrationResult {
    return this.migrated;
  }

  /** Registers more tasks (e.g. a tasks module loaded after open). */
  register(...tasks: Task[]): void {
    for (const t of tasks) {
      if (!isTask(t)) throw new TypeError('register() takes values made by defineTask()');
      if (t.type === WEBHOOK_TASK_TYPE) throw new Error(`the task type "${WEBHOOK_TASK_TYPE}" is reserved for webhook delivery`);
      const prior = this.taskMap.get(t.type);
      if (prior && prior !== t) throw new Error(`a different task with type "${t.type}" is already registered`);
      this.addTask(t);
    }
  }

  /**
   * A task's own heartbeat settings are not refused (a test may make a worker look dead on
   * purpose), but a pair that reaps healthy jobs is logged once, when the task is registered.
   */
  private addTask(t: Task): void {
    if (!this.taskMap.has(t.type) && (t.heartbeatIntervalMs !== undefined || t.heartbeatTimeoutMs !== undefined)) {
      try {
        checkHeartbeat(t.heartbeatIntervalMs ?? this.config.heartbeatIntervalMs, t.heartbeatTimeoutMs ?? this.config.heartbeatTimeoutMs);
      } catch (err) {
        this.logger.warn({ task: t.type }, `task "${t.type}": ${(err as Error).message}`);
      }
    }
    this.taskMap.set(t.type, t);
  }

  get tasks(): ReadonlyMap<string, Task> {
    return this.taskMap;
  }

  // ---- submit ---------------------------------------------------------------------------

  /**
   * Checks a submission and builds its row. Synchronous unless the task has an input schema
   * (validators may be async): most submissions then reach the group commit without an await.
   */
  private prepare(type: unknown, input: unknown, options: SubmitOptions, now: number): NewJob | Promise<NewJob> {
    if (typeof type !== 'string' || type === '') throw new InvalidOptionsError('type must be a non-empty string', 'type');
    const task = this.taskMap.get(type);
    if (!task) throw new UnknownTaskError(type);
    if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new InvalidOptionsError('options must be an object', 'options');
    const { priority, runAt, delayMs, maxAttempts, timeoutMs, metadata, idempotencyKey, tenant } = options;
    if (priority !== undefined && !PRIORITIES.includes(priority)) throw new InvalidOptionsError(`priority must be one of ${PRIORITIES.join(', ')}`, 'priority');
    if (runAt !== undefined && delayMs !== undefined) throw new InvalidOptionsError('give runAt or delayMs, not both');
    if (delayMs !== undefined && (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_SCHEDULE_MS)) {
      throw new InvalidOptionsError('delayMs must be a non-negative number of ms, at most 100 years', 'delayMs');
    }
    if (maxAttempts !== undefined && (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > MAX_ATTEMPTS_LIMIT)) {
      throw new InvalidOptionsError(`maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS_LIMIT}`, 'maxAttempts');
    }
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_TIMEOUT_MS)) {
      throw new InvalidOptionsError('timeoutMs must be a positive number of ms, at most 100 years', 'timeoutMs');
    }
    if (metadata !== undefined && !isPlainObject(metadata)) throw new InvalidOptionsError('metadata must be an object', 'metadata');
    const meta = metadata === undefined ? null : (jsonCopy(metadata, 'metadata') as Record<string, unknown>);
    if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || idempotencyKey.length === 0 || idempotencyKey.length > MAX_IDEMPOTENCY_KEY)) {
      throw new InvalidOptionsError(`idempotencyKey must be a string of 1 to ${MAX_IDEMPOTENCY_KEY} characters`, 'idempotencyKey');
    }
    if (tenant !== undefined && (typeof tenant !== 'string' || tenant === '')) throw new InvalidOptionsError('tenant must be a non-empty string', 'tenant');
    if (idempotencyKey !== undefined && hasUnstorable(idempotencyKey)) refuseUnstorable(findUnstorable(idempotencyKey, 'idempotencyKey'));
    if (tenant !== undefined && hasUnstorable(tenant)) refuseUnstorable(findUnstorable(tenant, 'tenant'));
    if (typeof options.parentId === 'string' && hasUnstorable(options.parentId)) refuseUnstorable(findUnstorable(options.parentId, 'parentId'));
    if (tenant === INTERNAL_TENANT) throw new InvalidOptionsError(`tenant "${INTERNAL_TENANT}" is reserved for internal jobs`, 'tenant');
    const value: unknown = input === undefined || input === null ? null : jsonCopy(input, 'input');
    if (task.input === undefined) return this.newJob(task, type, input, value, meta, options, now);
    return validateInput(task.input, input === undefined ? undefined : value).then((checked) => {
      if (!checked.ok) throw new InputValidationError(type, checked.issues);
      // A schema may transform the input: what is stored is checked again.
      if (checked.value !== value) refuseUnstorable(findUnstorable(checked.value, 'input'));
      return this.newJob(task, type, input, checked.value ?? null, meta, options, now);
    });
  }

  /** The row of a checked submission (`value`: its input as stored). */
  private newJob(task: Task, type: string, input: unknown, value: unknown, meta: Record<string, unknown> | null, options: SubmitOptions, now: number): NewJob {
    const { priority, runAt, delayMs, maxAttempts, timeoutMs, metadata, idempotencyKey, tenant, parentId } = options;
    const when = runAt !== undefined ? toEpoch(runAt, now) : now + (delayMs ?? 0);
    const requestHash =
      idempotencyKey === undefined
        ? null
        : createHash('sha256')
            .update(
              canonicalJson({
                type,
                input: input ?? null,
                priority,
                runAt: runAt === undefined ? undefined : when,
                delayMs,
                maxAttempts,
                timeoutMs,
                metadata,
                webhook: options.webhook === undefined ? undefined : (options.webhook as { url?: unknown })?.url,
              }),
            )
            .digest('base64url');
    return {
      id: uuidv7(now),
      tenant: tenant ?? 'default',
      type,
      state: when > now ? 'pending' : 'queued',
      priority: priority ?? task.priority ?? 'normal',
      input: value,
      metadata: meta,
      maxAttempts: maxAttempts ?? task.maxAttempts ?? this.config.defaultMaxAttempts,
      runAt: when,
      createdAt: now,
      timeoutMs: timeoutMs ?? task.timeoutMs ?? null,
      heartbeatTimeoutMs: task.heartbeatTimeoutMs ?? this.config.heartbeatTimeoutMs,
      stallTimeoutMs: task.stallTimeoutMs !== undefined ? task.stallTimeoutMs : this.config.stallTimeoutMs,
      resultTtlMs: task.resultTtlMs ?? this.config.resultTtlMs,
      parentId: parentId ?? null,
      idempotencyKey: idempotencyKey ?? null,
      requestHash,
    };
  }

  /** Submits a job; `replayed` is true when an idempotency key returned an existing job. */
  enqueue(type: string, input?: unknown, options: SubmitOptions = {}): Promise<{ job: JobSnapshot; replayed: boolean }> {
    let prepared: NewJob | Promise<NewJob>;
    try {
      this.assertOpen();
      prepared = this.prepare(type, input, options, Date.now());
    } catch (err) {
      return Promise.reject(err);
    }
    // Most submissions (no webhook, no caller's transaction, no input schema) go straight to
    // the group commit: each await of their own would cost a promise round per request.
    if (!(prepared instanceof Promise) && options.webhook === undefined && options.tx === undefined) {
      const job = prepared;
      return this.inserts.add(job).then((res) => this.afterInsert(res, job));
    }
    return this.enqueuePrepared(prepared, options);
  }

  private async enqueuePrepared(prepared: NewJob | Promise<NewJob>, options: SubmitOptions): Promise<{ job: JobSnapshot; replayed: boolean }> {
    const job = await prepared;
    const webhook = options.webhook === undefined ? null : await checkWebhookOption(options.webhook, this.webhookConfig);
    if (options.tx !== undefined && !this.store.capabilities.transactionalEnqueue) throw new InvalidOptionsError('the tx option (transactional enqueue) needs a PostgreSQL database');
    // The target is saved first, under the new job's id: a target whose job never gets inserted
    // (refused, rolled back, process killed) is ignored, as events join it with the job.
    if (webhook) await this.store.saveWebhook({ jobId: job.id, ...webhook });
    let res: InsertResult;
    try {
      if (options.tx !== undefined) {
        const maxBacklog = this.config.maxQueued;
        res = await this.store.insertJob({ job, tx: options.tx, ...(maxBacklog === undefined ? {} : { maxBacklog }) });
      } else {
        res = await this.inserts.add(job);
      }
    } catch (err) {
      if (webhook) await this.store.deleteWebhook({ jobId: job.id }).catch(() => {});
      throw err;
    }
    if (webhook && res.kind !== 'created') await this.store.deleteWebhook({ jobId: job.id });
    return this.afterInsert(res, job, options.tx === undefined);
  }

  private afterInsert(res: InsertResult, job: NewJob, announce = true): { job: JobSnapshot; replayed: boolean } {
    switch (res.kind) {
      case 'created':
        if (announce) this.bus.emit('job:submitted', { job: res.job });
        return { job: toSnapshot(res.job), replayed: false };
      case 'existing':
        return { job: toSnapshot(res.job), replayed: true };
      case 'conflict':
        throw new IdempotencyConflictError(job.idempotencyKey ?? '');
      case 'full':
        throw new QueueFullError(res.backlog, this.config.maxQueued ?? 0);
    }
  }

  async submit(type: string, input?: unknown, options: SubmitOptions = {}): Promise<JobSnapshot> {
    return (await this.enqueue(type, input, options)).job;
  }

  /** Bulk enqueue in one transaction. Validation errors reject the whole batch before anything is written. */
  async submitMany(jobs: ReadonlyArray<{ type: string; input?: unknown; options?: SubmitOptions }>): Promise<JobSnapshot[]> {
    this.assertOpen();
    const now = Date.now();
    const prepared: NewJob[] = [];
    const webhooks: ({ url: string; secret: string | null } | null)[] = [];
    for (const j of jobs) {
      prepared.push(await this.prepare(j.type, j.input, j.options ?? {}, now));
      webhooks.push(j.options?.webhook === undefined ? null : await checkWebhookOption(j.options.webhook, this.webhookConfig));
    }
    const txs = new Set(jobs.map((j) => j.options?.tx));
    if (txs.size > 1) throw new InvalidOptionsError('submitMany takes one tx for the whole batch or none');
    const [tx] = txs;
    if (tx !== undefined && !this.store.capabilities.transactionalEnqueue) {
      throw new InvalidOptionsError('the tx option (transactional enqueue) needs a PostgreSQL database');
    }
    for (const [i, w] of webhooks.entries()) if (w) await this.store.saveWebhook({ jobId: (prepared[i] as NewJob).id, ...w });
    const results = await this.store.insertJobs({
      jobs: prepared,
      ...(this.config.maxQueued === undefined ? {} : { maxBacklog: this.config.maxQueued }),
      ...(tx === undefined ? {} : { tx }),
    });
    for (const [i, r] of results.entries()) if (webhooks[i] && r.kind !== 'created') await this.store.deleteWebhook({ jobId: (prepared[i] as NewJob).id });
    return results.map((r, i) => this.afterInsert(r, prepared[i] as NewJob, tx === undefined).job);
  }

  // ---- reads ----------------------------------------------------------------------------

  async get(id: string, scope: TenantScope = {}): Promise<JobSnapshot | null> {
    this.assertOpen();
    const job = await this.store.getJob({ id, ...scope });
    return job ? ((await this.snapshots([job]))[0] as JobSnapshot) : null;
  }

  /**
   * A job's snapshot as JSON text, with the fields a status route needs besides, or null (not
   * found). `json` parses to what `get` returns: the store builds it in one read where it can
   * (SQLite); otherwise it is serialised from `get`. Not async on purpose: status polls are the
   * hottest read, and each async layer costs a promise round.
   */
  snapshotJson(id: string, scope: TenantScope = {}): Promise<(SnapshotJson & { json: string }) | null> {
    this.assertOpen();
    if (!this.store.getSnapshotJson) return this.snapshotJsonFromGet(id, scope);
    return this.store
      .getSnapshotJson(scope.tenant === undefined ? { id } : { id, tenant: scope.tenant })
      .then((fast) => (fast === null ? null : fast.json !== null ? (fast as SnapshotJson & { json: string }) : this.snapshotJsonFromGet(id, scope)));
  }

  private async snapshotJsonFromGet(id: string, scope: TenantScope): Promise<(SnapshotJson & { json: string }) | null> {
    const snap = await this.get(id, scope);
    if (!snap) return null;
    const expiresAt = snap.expiresAt === null ? null : Date.parse(snap.expiresAt);
    return { state: snap.status, runAt: Date.parse(snap.runAt), expiresAt, json: JSON.stringify(snap) };
  }

  /** Snapshots with their result files' signed URLs. */
  private async snapshots(jobs: JobRecord[]): Promise<JobSnapshot[]> {
    const snaps = jobs.map((j) => toSnapshot(j));
    // Files exist only once an attempt ran; an expired job's are gone.
    const ids = jobs.filter((j) => j.attempts > 0 && j.state !== 'expired').map((j) => j.id);
    if (ids.length === 0) return snaps;
    const files = await this.store.listResults({ ids });
    if (files.size === 0) return snaps;
    let jf: JobFiles;
    let signer: Awaited<ReturnType<JobFiles['signer']>>;
    try {
      jf = await this.files();
      signer = await jf.signer();
    } catch (err) {
      this.logger.warn({ err }, 'result files cannot be linked: blob storage or URL signing is not configured');
      return snaps;
    }
    const now = Date.now();
    return snaps.map((s) => {
      const f = files.get(s.id);
      return f ? jf.decorate(s, f, signer, now) : s;
    });
  }

  /** The state and recorded files of a job (result routes); `tenant` null means any tenant. */
  async resultFiles(id: string, tenant: string | null): Promise<{ state: JobState; files: StoredResultFile[]; expiresAt: number | null } | null> {
    this.assertOpen();
    const job = await this.store.getJob({ id, ...(tenant === null ? {} : { tenant }) });
    if (!job) return null;
    const files = job.state === 'expired' ? [] : ((await this.store.listResults({ ids: [id] })).get(id) ?? []);
    return { state: job.state, files, expiresAt: job.expiresAt };
  }

  /** The webhook delivery log of a job (oldest first). */
  async webhookDeliveries(id: string, scope: TenantScope = {}): Promise<WebhookDelivery[]> {
    this.assertOpen();
    const job = await this.store.getJob({ id, ...scope });
    if (!job) throw new JobNotFoundError(id);
    const entries = await this.store.listWebhookDeliveries({ jobId: id, limit: 1000 });
    return entries.map((e) => ({
      deliveryId: e.deliveryId,
      event: e.eventType,
      attempt: e.attempt,
      at: new Date(e.at).toISOString(),
      url: e.url,
      status: e.status,
      ok: e.ok,
      error: e.error,
      durationMs: e.durationMs,
      response: e.responseSnippet,
    }));
  }

  async list(options: ListOptions = {}): Promise<{ items: JobSnapshot[]; nextCursor: string | null }> {
    this.assertOpen();
    const states = options.status === undefined ? undefined : Array.isArray(options.status) ? options.status : [options.status];
    for (const s of states ?? []) if (!isJobState(s)) throw new InvalidOptionsError(`unknown status "${String(s)}"`, 'status');
    const limit = options.limit ?? 50;
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new InvalidOptionsError('limit must be an integer from 1 to 1000', 'limit');
    // No job has a type or tenant that no store can hold (PostgreSQL would refuse the query).
    if ([options.type, options.tenant].some((f) => typeof f === 'string' && hasUnstorable(f))) return { items: [], nextCursor: null };
    let page: Awaited<ReturnType<Store['listJobs']>>;
    try {
      page = await this.store.listJobs({
        limit,
        ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
        ...(states === undefined ? {} : { states }),
        ...(options.type === undefined ? {} : { type: options.type }),
        cursor: options.cursor ?? null,
      });
    } catch (err) {
      if ((err as Error).message === 'invalid cursor') throw new InvalidOptionsError('cursor is invalid: pass the nextCursor of an earlier page, unchanged', 'cursor');
      throw err;
    }
    return { items: await this.snapshots(page.items), nextCursor: page.nextCursor };
  }

  async transitions(id: string, scope: TenantScope = {}): Promise<PublicTransition[]> {
    this.assertOpen();
    const log = await this.store.getTransitions({ id, ...scope });
    if (!log) throw new JobNotFoundError(id);
    return log.map((e) => ({ ...e, at: new Date(e.at).toISOString() }));
  }

  private async mustGet(id: string, scope: TenantScope): Promise<JobRecord> {
    const job = await this.store.getJob({ id, ...scope });
    if (!job) throw new JobNotFoundError(id);
    return job;
  }

  // ---- control ----------------------------------------------------------------------------

  /**
   * Cancels a job: queued work (pending, queued, retrying, waiting) is cancelled at once; a
   * running job gets a cancel request (its ctx.signal fires) and is forced to cancelled after
   * the drain period if the handler ignores it. A terminal job is a JobStateConflictError.
   */
  async cancel(id: string, scope: TenantScope = {}): Promise<JobSnapshot> {
    this.assertOpen();
    for (let round = 0; round < 20; round++) {
      const job = await this.mustGet(id, scope);
      const now = Date.now();
      if (isTerminal(job.state)) throw new JobStateConflictError(id, job.state, 'cancel');
      if (IMMEDIATELY_CANCELLABLE.has(job.state)) {
        if (await applyTransition(this.store, this.bus, job, cancelNow(job, now))) return toSnapshot(await this.mustGet(id, scope));
        continue; // lost a race: look again
      }
      if (job.state === 'running') {
        if (job.cancelRequested) return toSnapshot(job);
        if (await applyTransition(this.store, this.bus, job, requestCancel(job, now))) return toSnapshot(await this.mustGet(id, scope));
      }
    }
    throw new Error(`could not cancel job ${id}: it kept changing state`);
  }

  /** Manual retry of a failed or cancelled job: a fresh attempt budget; it resumes from its checkpoint. */
  async retry(id: string, scope: TenantScope = {}): Promise<JobSnapshot> {
    this.assertOpen();
    const job = await this.mustGet(id, scope);
    if (job.state !== 'failed' && job.state !== 'cancelled') throw new JobStateConflictError(id, job.state, 'retry');
    // Before the transition: the next end of the job sends an event again (the one already sent is not repeated).
    await this.store.rearmWebhook({ jobId: id });
    if (!(await applyTransition(this.store, this.bus, job, manualRetry(job, Date.now())))) {
      const fresh = await this.mustGet(id, scope);
      throw new JobStateConflictError(id, fresh.state, 'retry');
    }
    return toSnapshot(await this.mustGet(id, scope));
  }

  /**
   * Snapshots of one job as it changes: the current one first, then one per visible change
   * (state, flags, progress), ending after the terminal snapshot. Changes made in this process
   * arrive at once; so do changes made by other processes when a channel relays them (PostgreSQL
   * NOTIFY or Redis), with a store read every 2 s as a safety net. Without a channel they are
   * picked up by polling the store (`pollMs`, default 250 ms).
   */
  async *watch(id: string, options: TenantScope & { signal?: AbortSignal; pollMs?: number } = {}): AsyncGenerator<JobSnapshot> {
    this.assertOpen();
    const scope = options.tenant === undefined ? {} : { tenant: options.tenant };
    let wake: (() => void) | null = null;
    let dirty = true;
    const poke = () => {
      dirty = true;
      wake?.();
    };
    let last: JobSnapshot | null = null;
    // Progress published on the bus is applied to the last snapshot without a store read.
    let pushed: JobSnapshot | null = null;
    const offs = [
      this.bus.on('job:changed', (e) => e.id === id && poke()),
      // Relayed events may have been lost while the channel was down: read the store again.
      this.bus.on('channel:resync', poke),
      this.bus.on('job:progress', (e) => {
        if (e.id !== id || !last || last.status !== 'running') return;
        // Progress can reach the bus by more than one route (a relayed copy arriving after a
        // newer one, two channels): one older than the newest seen is never applied.
        const newest = (pushed ?? last).progress.updatedAt;
        if (newest && e.progress.updatedAt && e.progress.updatedAt < newest) return;
        pushed = { ...last, progress: e.progress };
        wake?.();
      }),
    ];
    const onAbort = () => wake?.();
    options.signal?.addEventListener('abort', onAbort);
    // With a channel, other processes' changes arrive as events; the poll is only a safety net.
    const timer = setInterval(poke, options.pollMs ?? (this.channel ? WATCH_SAFETY_POLL_MS : WATCH_POLL_MS));
    try {
      while (!options.signal?.aborted && !this.closed) {
        if (dirty || pushed) {
          let snap: JobSnapshot;
          if (dirty) {
            dirty = false;
            pushed = null;
            const job = await this.store.getJob({ id, ...scope });
            if (!job) throw new JobNotFoundError(id);
            snap = (await this.snapshots([job]))[0] as JobSnapshot;
          } else {
            snap = pushed as unknown as JobSnapshot;
            pushed = null;
          }
          // A store read may lag a progress event already seen: never step progress back.
          const ordered = nextInOrder(last ?? undefined, snap);
          if (ordered) {
            last = ordered;
            yield ordered;
          }
          if (isTerminal(snap.status)) return;
          continue;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = null;
      }
    } finally {
      clearInterval(timer);
      for (const off of offs) off();
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Resolves with the terminal snapshot. */
  async wait(id: string, options: TenantScope & { signal?: AbortSignal; pollMs?: number } = {}): Promise<JobSnapshot> {
    let last: JobSnapshot | undefined;
    for await (const s of this.watch(id, options)) last = s;
    if (!last || !isTerminal(last.status)) throw new Error(`stopped watching job ${id} before it finished`);
    return last;
  }

  /** Counts by state, submission/completion rates over the last minute, run-time percentiles per type over 15 minutes. */
  async stats(scope: TenantScope = {}): Promise<JobStats> {
    this.assertOpen();
    const now = Date.now();
    const [counts, activity] = await Promise.all([
      this.store.countByState(scope),
      this.store.activity({ ...scope, since: now - 60_000, durationsSince: now - 15 * 60_000, limit: 20_000 }),
    ]);
    const byType = new Map<string, number[]>();
    for (const d of activity.durations) {
      const list = byType.get(d.type) ?? [];
      list.push(d.ms);
      byType.set(d.type, list);
    }
    const durations: JobStats['durations'] = {};
    for (const [type, list] of byType) {
      list.sort((a, b) => a - b);
      const pick = (q: number) => list[Math.min(list.length - 1, Math.ceil(q * list.length) - 1)] ?? 0;
      durations[type] = { count: list.length, p50: pick(0.5), p95: pick(0.95), p99: pick(0.99) };
    }
    return { counts, rates: { submittedPerMinute: activity.submitted, finishedPerMinute: activity.finished }, durations };
  }

  // ---- runtime ----------------------------------------------------------------------------

  startSweeper(): Sweeper {
    this.assertOpen();
    if (!this.sweeper) {
      this.sweeper = new Sweeper({
        store: this.store,
        bus: this.bus,
        logger: this.logger,
        intervalMs: this.config.sweepIntervalMs,
        cancelDrainMs: this.config.cancelDrainMs,
        expireFiles: async (jobs) => {
          // Only jobs whose files were ever touched need blob storage opened.
          const files = await this.store.listResults({ ids: jobs.map((j) => j.id) });
          if (files.size === 0 && !this.filesPromise) return;
          const jf = await this.files();
          for (const job of jobs) await jf.deleteJobFiles(this.store, job.id);
        },
        maintenance: () => this.dispatchWebhooks(),
        everyPass: async (now) => {
          // Uploads expire where blob storage is open (API servers open it to accept uploads).
          if (this.filesPromise) {
            const jf = await this.filesPromise;
            await sweepExpiredUploads(jf.blobs, now);
          }
        },
      });
      this.sweeper.start();
      // A job that ends in this process has its webhook enqueued at once, not at the next sweep.
      // Debounced: a busy worker ends thousands of jobs a second, and most have no webhook.
      let soon: NodeJS.Timeout | null = null;
      const off = this.bus.on('job:changed', (e) => {
        // Relayed ends are dispatched by the process where they happened (the outbox makes a double dispatch harmless, not free).
        if (soon || (e.to !== 'succeeded' && e.to !== 'failed' && e.to !== 'cancelled') || isRelayed(e)) return;
        soon = setTimeout(() => {
          soon = null;
          this.dispatchWebhooks().catch((err) => this.logger.error({ err }, 'webhook dispatch failed'));
        }, 10);
        soon.unref?.();
      });
      this.dispatchOff = () => {
        off();
        if (soon) clearTimeout(soon);
      };
    }
    return this.sweeper;
  }

  /** Enqueues the delivery jobs of pending webhook events (coalesced: one run at a time, plus one more if asked meanwhile). */
  dispatchWebhooks(): Promise<void> {
    if (this.dispatching) {
      this.dispatchAgain = true;
      return this.dispatching;
    }
    this.dispatching = (async () => {
      try {
        do {
          this.dispatchAgain = false;
          if (this.closed) return;
          await dispatchWebhookEvents({
            store: this.store,
            config: this.webhookConfig,
            heartbeatTimeoutMs: this.config.heartbeatTimeoutMs,
            logger: this.logger,
            insert: async (job) => {
              const res = await this.store.insertJob({ job });
              if (res.kind === 'created') this.bus.emit('job:submitted', { job: res.job });
              return res;
            },
          });
        } while (this.dispatchAgain);
      } finally {
        this.dispatching = null;
      }
    })();
    return this.dispatching;
  }

  async startWorker(options: StartWorkerOptions = {}): Promise<WorkerHandle> {
    this.assertOpen();
    if (this.taskMap.size === 0) throw new InvalidOptionsError('startWorker needs at least one task (pass tasks to Longhaul.open or register them)');
    const files = () => this.files();
    const store = this.store;
    const worker = new Worker({
      store: this.store,
      bus: this.bus,
      tasks: new Map([...this.taskMap, ...this.internalTasks.map((t) => [t.type, t] as const)]),
      files: {
        results: (job, onLeaseLost, retry) => lazyResults(async () => (await files()).results(store, job, onLeaseLost, retry)),
        uploads: (tenant) => lazyUploads(async () => (await files()).uploads(tenant)),
      },
      logger: this.logger,
      defaults: { heartbeatIntervalMs: this.config.heartbeatIntervalMs, resultTtlMs: this.config.resultTtlMs },
      concurrency: options.concurrency ?? this.config.concurrency,
      ...(options.workerId === undefined ? {} : { workerId: options.workerId }),
      ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
      ...(options.cancelPollMs === undefined ? {} : { cancelPollMs: options.cancelPollMs }),
      ...(options.progressIntervalMs === undefined ? {} : { progressIntervalMs: options.progressIntervalMs }),
      ...(options.claimAhead === undefined ? {} : { claimAhead: options.claimAhead }),
      ...(options.claimedWaitMs === undefined ? {} : { claimedWaitMs: options.claimedWaitMs }),
    });
    if (options.sweeper !== false) this.startSweeper();
    worker.start();
    const defaultDrain = options.drainMs ?? 10_000;
    const handle: WorkerHandle = {
      id: worker.id,
      stats: worker.stats,
      stop: async (o = {}) => {
        await worker.stop({ drainMs: o.drainMs ?? defaultDrain });
        this.workers.delete(handle);
      },
      idle: () => worker.idle(),
    };
    this.workers.add(handle);
    if (options.handleSignals) this.installSignalHandlers(defaultDrain);
    return handle;
  }

  private installSignalHandlers(drainMs: number): void {
    if (this.signalCleanup) return;
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        this.logger.warn({ signal }, 'second signal: exiting now');
        process.exit(130);
      }
      stopping = true;
      this.logger.info({ signal, drainMs }, 'shutting down: draining running jobs');
      this.close({ drainMs })
        .then(() => process.exit(0))
        .catch((err) => {
          this.logger.error({ err }, 'shutdown failed');
          process.exit(1);
        });
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    this.signalCleanup = () => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    };
  }

  /** Stops workers (gracefully, handing back unfinished jobs), the sweeper, and closes the store. */
  async close(options: { drainMs?: number } = {}): Promise<void> {
    if (this.closed) return;
    await Promise.all([...this.workers].map((w) => w.stop(options.drainMs === undefined ? {} : { drainMs: options.drainMs })));
    await this.sweeper?.stop();
    this.dispatchOff?.();
    await this.dispatching?.catch(() => {});
    this.closed = true;
    this.signalCleanup?.();
    const files = this.filesPromise;
    this.filesPromise = null;
    if (files) await (await files.catch(() => null))?.close();
    // Held progress and queued events go out (through the store's pool on PostgreSQL) before it closes.
    this.bridge?.close();
    if (this.ownsChannel) await this.channel?.close();
    if (this.ownsStore) await this.store.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('this Longhaul instance is closed');
  }
}
