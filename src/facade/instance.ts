/**
 * The composition root: an open Longhaul instance's parts and how they are wired. `openInstance`
 * opens the store and the channel the configuration names (migrating, waiting for the database
 * if asked) and makes an `Instance` over them: the relay between the bus and the channel, blob
 * storage, submission, schedules, metrics, the sweeper, webhook dispatch, retention on
 * completion and workers; its `close` stops them in order. `Longhaul` (src/longhaul.ts) is the
 * public class over it; each of its operations is in the facade module named for it.
 */
import pino, { type Logger } from 'pino';
import { checkBlobStorePackages } from '../blobs/config.js';
import { type JobFiles, type JobFilesOptions, lazyResults, lazyUploads } from '../blobs/job-files.js';
import { deleteJobResults } from '../blobs/results.js';
import { sweepExpiredUploads } from '../blobs/uploads.js';
import { type BusBridge, connectBus } from '../channel/bridge.js';
import { JobBus } from '../channel/bus.js';
import type { Channel } from '../channel/channel.js';
import { createChannel } from '../channel/create.js';
import { type ConfigOptions, checkHeartbeat, type LonghaulConfig, logLevelFromEnv, resolveConfig } from '../config.js';
import { InvalidOptionsError } from '../core/errors.js';
import type { JobSnapshot } from '../core/job.js';
import { jobLogFields, LOG_REDACT } from '../core/log-fields.js';
import { loadOptional, OPTIONAL_PACKAGES } from '../core/optional-packages.js';
import { resourceQuotaFor, runningCaps } from '../core/quotas.js';
import { LonghaulMetrics } from '../metrics/metrics.js';
import { Eraser } from './erase.js';
import type { MigrationResult, Store } from '../store/store.js';
import { Sweeper } from '../sweeper/sweeper.js';
import { collectSchedules, collectTasks, isTask, type ScheduleDeclaration, type Task } from '../task-api/define.js';
import { inSubmitSpan, tracingEnabled } from '../telemetry/trace.js';
import { resolveWebhookConfig, type WebhookConfig, type WebhookConfigOptions, WEBHOOK_TASK_TYPE, webhookTask } from '../webhooks/service.js';
import { Worker } from '../worker/runtime.js';
import { cancelChildren } from '../workflow/cancel-children.js';
import { announceResumedParents } from '../workflow/fail-fast.js';
import { ParentTracker } from '../workflow/parents.js';
import type { ControlContext } from './control.js';
import { type DatabaseWait, whenDatabaseAnswers } from './database-wait.js';
import { keyDatabaseOf, SECRETS_KEY_REQUIRED, secretBoxFor, secretsKeyMissing } from './secrets-key.js';
import { LazyFiles } from './files.js';
import { prepare } from './prepare.js';
import { RetentionOnEnd, taskRetention } from './retention.js';
import { getJob } from './reads.js';
import { Schedules } from './schedules.js';
import { ApiKeys } from './api-keys.js';
import { Submission, type SubmitOptions } from './submission.js';
import { WATCH_POLL_MS, WATCH_SAFETY_POLL_MS, type WatchContext } from './watch.js';
import { WatchBackstop } from './watch-backstop.js';
import { WebhookDispatch } from './webhook-dispatch.js';
import { exitOnSignals, type StartWorkerOptions, type WorkerHandle, WorkerSet } from './workers.js';

export interface OpenOptions extends ConfigOptions {
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
  /**
   * Schedules to declare besides those of the tasks module (defineSchedule values or plain
   * declarations): upserted by name at open (docs/schedules.md).
   */
  schedules?: readonly ScheduleDeclaration[];
  /** The clock schedules read (their next ticks, the sweeper's tick passes read their own time). Tests inject one; default Date.now. */
  clock?: () => number;
  /**
   * What open does when the database does not answer (connection refused, the server starting
   * up or shutting down, too many connections; never for a refused password, a missing
   * database or a schema newer than this Longhaul, which throw at once):
   * - false (default): throws the error, so that the caller decides;
   * - true: tries again with growing, jittered delays (up to 5 s apart) for as long as it takes,
   *   logging once when it starts waiting, every 30 s while it waits and once when the database
   *   answers (`longhaul dev`, `server` and `worker` do this);
   * - `{ timeoutMs, signal, onWaiting }`: the same, giving up after `timeoutMs` or when the signal aborts.
   */
  waitForDatabase?: boolean | DatabaseWait;
}

/**
 * Opens an instance: the store (migrated), the channel, the parts over them; then waits a little
 * for the channel and declares the schedules. What it opened is closed again if a step fails.
 */
export async function openInstance(options: OpenOptions): Promise<Instance> {
  const config = resolveConfig(options);
  const logger = options.logger ?? pino({ level: logLevelFromEnv('LONGHAUL_LOG_LEVEL', 'info'), name: 'longhaul', redact: LOG_REDACT });
  const tasks = Array.isArray(options.tasks) ? collectTasks({ default: options.tasks }) : options.tasks ? collectTasks(options.tasks as Record<string, unknown>) : [];
  if (tasks.some((t) => t.type === WEBHOOK_TASK_TYPE)) throw new Error(`the task type "${WEBHOOK_TASK_TYPE}" is reserved for webhook delivery`);
  const keyConfig = { secretsKey: config.secretsKey, database: keyDatabaseOf(config, options.store) };
  const webhookConfig = resolveWebhookConfig(secretBoxFor(keyConfig), options.webhooks);
  // Said once at start, not only in the error of the first submission that needs it.
  if (secretsKeyMissing(keyConfig)) logger.warn(`${SECRETS_KEY_REQUIRED}; until it is, a job submitted with its own webhook secret is refused`);
  // Blob storage opens on first use; a missing S3 SDK is reported now, not at the first upload.
  if (options.files?.blobs === undefined) checkBlobStorePackages();
  const store = options.store ?? (await storeFor(config, logger));
  let migration: MigrationResult;
  try {
    migration = await whenDatabaseAnswers(() => store.migrate(), options.waitForDatabase, logger);
  } catch (err) {
    if (options.store === undefined) await store.close().catch(() => undefined);
    throw err;
  }
  let channel: Channel | null = null;
  if (options.channel !== undefined) {
    channel = options.channel === false ? null : options.channel;
  } else {
    try {
      channel = await defaultChannel(store, config, logger);
    } catch (err) {
      if (options.store === undefined) await store.close();
      throw err;
    }
  }
  const instance = new Instance({
    store,
    ownsStore: options.store === undefined,
    channel,
    ownsChannel: options.channel === undefined && channel !== null,
    config,
    logger,
    tasks,
    filesOptions: options.files ?? {},
    webhookConfig,
    migration,
    clock: options.clock,
  });
  if (channel) await channelReady(channel, logger);
  const declared = [...(options.tasks && !Array.isArray(options.tasks) ? collectSchedules(options.tasks as Record<string, unknown>) : []), ...(options.schedules ?? [])];
  if (declared.length > 0) {
    try {
      await instance.schedules.declare(declared);
    } catch (err) {
      await instance.close();
      throw err;
    }
  }
  return instance;
}

/**
 * The store a database URL names: PostgreSQL for `postgres://` URLs, else a SQLite path. Each
 * store's module (and `pg`, an optional package: MissingPackageError without it) is loaded
 * here, when it is the one configured.
 */
async function storeFor(config: Pick<LonghaulConfig, 'database' | 'pgPoolSize'>, logger: Logger): Promise<Store> {
  if (/^postgres(ql)?:\/\//.test(config.database)) {
    const { PostgresStore } = await loadOptional(OPTIONAL_PACKAGES.postgres, () => import('../store/postgres/postgres-store.js'));
    return new PostgresStore({ connectionString: config.database, poolSize: config.pgPoolSize, logger });
  }
  const { SqliteStore } = await import('../store/sqlite/sqlite-store.js');
  return new SqliteStore({ path: config.database });
}

/**
 * The default channel: Redis when configured, else the store's own NOTIFY where it has one
 * (sharing its pool and LISTEN connection, so a process holds one of each), else none.
 */
function defaultChannel(store: Store, config: Pick<LonghaulConfig, 'database' | 'redisUrl' | 'redisPrefix'>, logger: Logger): Promise<Channel | null> {
  const notify = store.capabilities.notify;
  return createChannel({
    databaseUrl: notify ? notify.connectionString : config.database,
    redisUrl: config.redisUrl ?? '',
    redisPrefix: config.redisPrefix,
    ...(notify ? { storeNotify: notify, notifyChannel: notify.channel } : {}),
    logger: logger.child({ component: 'channel' }),
  });
}

/**
 * Waits (a few seconds at most) for the channel to receive, so that a process that reports
 * ready also relays. A channel that is down does not stop the process: it reconnects by itself
 * and, meanwhile, watchers catch up by reading the store.
 */
async function channelReady(channel: Channel, logger: Logger, timeoutMs = 5000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const up = await Promise.race([
    channel.ready().then(
      () => true,
      () => false,
    ),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  if (!up) logger.warn({ transport: channel.transport }, 'the events channel is not up yet; continuing (it reconnects by itself, streams fall back to reading the store)');
}

/** What openInstance opened and resolved, for the Instance to wire. */
interface Opened {
  readonly store: Store;
  /** Closed with the instance (false: the caller's, left open). */
  readonly ownsStore: boolean;
  readonly channel: Channel | null;
  readonly ownsChannel: boolean;
  readonly config: LonghaulConfig;
  readonly logger: Logger;
  /** The tasks given to open (the instance's map of tasks starts with them). */
  readonly tasks: readonly Task[];
  readonly filesOptions: JobFilesOptions;
  readonly webhookConfig: WebhookConfig;
  readonly migration: MigrationResult;
  readonly clock: (() => number) | undefined;
}

export class Instance {
  readonly bus = new JobBus();
  readonly store: Store;
  readonly config: LonghaulConfig;
  readonly logger: Logger;
  readonly webhookConfig: WebhookConfig;
  /** The relay between processes (null: none, changes made elsewhere are seen by polling the store). */
  readonly channel: Channel | null;
  readonly migration: MigrationResult;
  /** The user's tasks (registration may add more after open). */
  readonly tasks = new Map<string, Task>();
  readonly files: LazyFiles;
  readonly submission: Submission;
  readonly schedules: Schedules;
  /** API keys kept in the database (`longhaul keys`), and their cached check for the server. */
  readonly apiKeys: ApiKeys;
  readonly metrics: LonghaulMetrics;
  /** Deletes ended jobs with their rows and files: retention passes, purges, discarded dead letters. */
  readonly eraser: Eraser;
  /** What reads, watches and dead-letter pages act on; built once, as the hot reads take it on every call. */
  readonly readCtx: WatchContext & { readonly store: Store };
  readonly controlCtx: ControlContext;
  /** Relays this process's bus to and from the channel. */
  private readonly bridge: BusBridge | null;
  /** Fan-in and parents' progress for the children this process ends or runs. */
  private readonly parents: ParentTracker;
  /** Tasks every worker of this instance runs besides the user's (webhook delivery). */
  private readonly internalTasks: readonly Task[];
  private readonly workers = new WorkerSet();
  private sweeper: Sweeper | null = null;
  private readonly dispatch: WebhookDispatch;
  private readonly retainOnEnd: RetentionOnEnd;
  /** Removes the sweeper's companions: dispatch and retention soon after a job ends here. */
  private endListenersOff: (() => void) | null = null;
  private signalCleanup: (() => void) | null = null;
  private isClosed = false;
  /** The clock schedules read (tests inject one; else the sweeper pass's time). */
  private readonly clock: (() => number) | undefined;
  private readonly ownsStore: boolean;
  private readonly ownsChannel: boolean;

  constructor(o: Opened) {
    const { store, channel, config, logger, webhookConfig, clock } = o;
    const { bus, tasks } = this;
    this.store = store;
    this.config = config;
    this.logger = logger;
    this.webhookConfig = webhookConfig;
    this.channel = channel;
    this.migration = o.migration;
    this.ownsStore = o.ownsStore;
    this.ownsChannel = o.ownsChannel;
    this.clock = clock;
    for (const t of o.tasks) this.addTask(t);
    this.files = new LazyFiles(config.database, o.filesOptions);
    this.submission = new Submission({ store, bus, config, webhookConfig, tasks });
    this.internalTasks = [
      webhookTask({
        store,
        config: webhookConfig,
        snapshot: async (id) => {
          this.assertOpen();
          return getJob(this.readCtx, id, {});
        },
        attempted: (outcome) => bus.emit('webhook:attempt', { outcome }),
      }),
    ];
    this.apiKeys = new ApiKeys({ store, logger: logger.child({ component: 'api-keys' }), cacheMs: config.apiKeyCacheMs });
    this.schedules = new Schedules({
      store,
      tasks,
      check: async (type, input) => {
        await prepare({ tasks, config }, type, input, {}, Date.now());
      },
      enqueue: (type, input, options) => this.enqueue(type, input, options),
      logger: logger.child({ component: 'schedules' }),
      ...(clock ? { clock } : {}),
      maxSchedules: (tenant) => resourceQuotaFor(config.tenantQuotas, tenant).maxSchedules,
      minIntervalMs: config.scheduleMinIntervalMs,
      refused: (quota) => this.metrics.quotaRefused(quota),
    });
    this.eraser = new Eraser({ store, deleteFiles: async (id) => deleteJobResults((await this.files.open()).blobs, id) });
    this.parents = new ParentTracker({ store, bus, log: logger.child({ component: 'workflows' }) });
    this.parents.start();
    this.bridge = channel
      ? connectBus(bus, channel, {
          // A progress too large for a NOTIFY arrives without its value: read it from the store.
          getProgress: async (id) => (await store.getJob({ id }))?.progress ?? null,
          logger: logger.child({ component: 'channel', transport: channel.transport }),
        })
      : null;
    this.readCtx = {
      store,
      logger,
      bus,
      relayed: channel !== null,
      files: () => this.openFiles(),
      isClosed: () => this.isClosed,
      backstop: new WatchBackstop(store, channel !== null ? WATCH_SAFETY_POLL_MS : WATCH_POLL_MS, logger),
    };
    this.controlCtx = { store, bus };
    const isClosed = () => this.isClosed;
    this.dispatch = new WebhookDispatch({ store, bus, logger, webhookConfig, heartbeatTimeoutMs: config.heartbeatTimeoutMs, isClosed });
    this.retainOnEnd = new RetentionOnEnd({ bus, eraser: this.eraser, logger, retention: config.retention, tasks, isClosed });
    this.metrics = new LonghaulMetrics({ bus, store });
    bus.on('job:submitted', ({ job }) => {
      if (logger.isLevelEnabled('debug')) logger.debug(jobLogFields(job), 'job submitted');
    });
  }

  /** Set once close() has stopped the work that still writes (workers, sweeper, dispatch). */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Throws once the instance is closed: what every operation of Longhaul checks first. */
  assertOpen(): void {
    if (this.isClosed) throw closedError();
  }

  /** Blob storage of result files and uploads, opened on first use. */
  openFiles(): Promise<JobFiles> {
    this.assertOpen();
    return this.files.open();
  }

  /** Registers tasks made by defineTask (not the reserved webhook type; a type once, by one task). */
  register(tasks: readonly Task[]): void {
    for (const t of tasks) {
      if (!isTask(t)) throw new TypeError('register() takes values made by defineTask()');
      if (t.type === WEBHOOK_TASK_TYPE) throw new Error(`the task type "${WEBHOOK_TASK_TYPE}" is reserved for webhook delivery`);
      const prior = this.tasks.get(t.type);
      if (prior && prior !== t) throw new Error(`a different task with type "${t.type}" is already registered`);
      this.addTask(t);
    }
  }

  /**
   * A task's own heartbeat settings are not refused (a test may make a worker look dead on
   * purpose), but a pair that reaps healthy jobs is logged once, when the task is registered.
   */
  private addTask(t: Task): void {
    if (!this.tasks.has(t.type) && (t.heartbeatIntervalMs !== undefined || t.heartbeatTimeoutMs !== undefined)) {
      try {
        checkHeartbeat(t.heartbeatIntervalMs ?? this.config.heartbeatIntervalMs, t.heartbeatTimeoutMs ?? this.config.heartbeatTimeoutMs);
      } catch (err) {
        this.logger.warn({ task: t.type }, `task "${t.type}": ${(err as Error).message}`);
      }
    }
    this.tasks.set(t.type, t);
  }

  /** Submits a job (in a trace span when tracing is on). Not async: see Submission.enqueue. */
  enqueue(type: string, input: unknown, options: SubmitOptions): Promise<{ job: JobSnapshot; replayed: boolean }> {
    if (this.isClosed) return Promise.reject(closedError());
    if (tracingEnabled()) return inSubmitSpan(type, () => this.submission.enqueue(type, input, options), (out) => out.job.id);
    return this.submission.enqueue(type, input, options);
  }

  startSweeper(): Sweeper {
    if (this.sweeper) return this.sweeper;
    const { store, bus, logger, config, files } = this;
    this.sweeper = new Sweeper({
      store,
      bus,
      logger,
      intervalMs: config.sweepIntervalMs,
      cancelDrainMs: config.cancelDrainMs,
      expireFiles: async (jobs) => {
        // Only jobs whose files were ever touched need blob storage opened.
        const found = await store.listResults({ ids: jobs.map((j) => j.id) });
        if (found.size === 0 && !files.opened) return;
        const jf = await files.open();
        for (const job of jobs) await jf.deleteJobFiles(store, job.id);
      },
      retention: async (now) => (await this.eraser.retain(config.retention, taskRetention(this.tasks), now)).jobs,
      announceResumed: (resumed, now) => announceResumedParents(store, bus, resumed, now),
      maintenance: () => this.dispatchWebhooks(),
      everyPass: async (now) => {
        // Schedules tick in every process, not only in the elected sweeper: each tick is keyed,
        // so several tickers submit one run, and a tick does not wait for an election.
        await this.schedules.tick(this.clockOr(now));
        // Uploads expire where blob storage is open (API servers open it to accept uploads).
        const opened = files.opened;
        if (opened) await sweepExpiredUploads((await opened).blobs, now);
      },
    });
    this.sweeper.start();
    const offDispatch = this.dispatch.onEnds();
    const offRetain = this.retainOnEnd.listen();
    this.endListenersOff = () => {
      offDispatch();
      offRetain();
    };
    return this.sweeper;
  }

  private clockOr(now: number): number {
    return this.clock ? this.clock() : now;
  }

  /** Enqueues the delivery jobs of pending webhook events (coalesced: one run at a time, plus one more if asked meanwhile). */
  dispatchWebhooks(): Promise<void> {
    return this.dispatch.run();
  }

  startWorker(options: StartWorkerOptions): WorkerHandle {
    if (this.tasks.size === 0) throw new InvalidOptionsError('startWorker needs at least one task (pass tasks to Longhaul.open or register them)');
    const { store, bus, logger, config, files, tasks } = this;
    const worker = new Worker({
      store,
      bus,
      // What ctx.spawn needs of this instance: children are checked like submissions, with the parent's tenant.
      workflows: {
        prepareChild: (parent, spec, now) => {
          if (typeof spec !== 'object' || spec === null) throw new TypeError('each child must be an object { type, input, ...options }');
          const { type, input, ...rest } = spec;
          return prepare({ tasks, config }, type, input, { ...rest, tenant: parent.tenant, parentId: parent.id }, now);
        },
        cancelChildren: (parentId, now, reason) => cancelChildren(store, bus, parentId, now, reason),
      },
      tasks: new Map([...tasks, ...this.internalTasks.map((t) => [t.type, t] as const)]),
      files: {
        results: (job, onLeaseLost, retry) => lazyResults(async () => (await files.open()).results(store, job, onLeaseLost, retry)),
        uploads: (tenant) => lazyUploads(async () => (await files.open()).uploads(tenant)),
      },
      logger,
      defaults: { heartbeatIntervalMs: config.heartbeatIntervalMs, resultTtlMs: config.resultTtlMs },
      retention: config.retention,
      // The sweeper forces the job's cancel after the drain; the worker gives up on the handler
      // one sweep later (and writes the same forced cancel if no sweeper did).
      abandonAfterMs: config.cancelDrainMs + config.sweepIntervalMs,
      maxAbandonedHandlers: config.maxAbandonedHandlers,
      concurrency: options.concurrency ?? config.concurrency,
      claimRules: { agingMs: config.priorityAgingMs, tenantCaps: runningCaps(config.tenantQuotas) },
      ...(options.workerId === undefined ? {} : { workerId: options.workerId }),
      ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
      ...(options.cancelPollMs === undefined ? {} : { cancelPollMs: options.cancelPollMs }),
      ...(options.progressIntervalMs === undefined ? {} : { progressIntervalMs: options.progressIntervalMs }),
      ...(options.claimAhead === undefined ? {} : { claimAhead: options.claimAhead }),
      ...(options.claimedWaitMs === undefined ? {} : { claimedWaitMs: options.claimedWaitMs }),
    });
    if (options.sweeper !== false) this.startSweeper();
    const drainMs = options.drainMs ?? 10_000;
    const handle = this.workers.add(worker, drainMs);
    if (options.handleSignals && !this.signalCleanup) this.signalCleanup = exitOnSignals(logger, drainMs, (o) => this.close(o));
    return handle;
  }

  /** The health of this process's workers together: healthy when each is (and when none runs). */
  workerHealth() {
    return this.workers.health();
  }

  /**
   * Stops what writes first (workers hand back unfinished jobs, then the sweeper and webhook
   * dispatch), then what carries writes out: blob storage, the relay (held progress and queued
   * events go out, through the store's pool on PostgreSQL), the channel, and last the store;
   * the metrics after all of it, even if a step failed.
   */
  close(options: { drainMs?: number } = {}): Promise<void> {
    return this.stop(options).finally(() => this.metrics.close());
  }

  private async stop(options: { drainMs?: number }): Promise<void> {
    if (this.isClosed) return;
    await this.workers.stopAll(options);
    await this.sweeper?.stop();
    await this.parents.close();
    this.endListenersOff?.();
    await this.dispatch.settled();
    await this.retainOnEnd.settled();
    this.isClosed = true;
    this.readCtx.backstop.close();
    this.signalCleanup?.();
    await this.files.close();
    this.bridge?.close();
    if (this.ownsChannel) await this.channel?.close();
    if (this.ownsStore) await this.store.close();
  }
}

export function closedError(): Error {
  return new Error('this Longhaul instance is closed');
}
