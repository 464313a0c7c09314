/**
 * Runtime wiring: the store and channel a URL asks for, the relay between the bus and the
 * channel, the sweeper, webhook dispatch, workers, signal handling, and the order of shutdown.
 */
import { deleteJobResults } from '../blobs/results.js';
import type { RetentionPolicy } from '../core/retention.js';
import { runningCaps } from '../core/quotas.js';
import { Eraser } from '../retention/erase.js';
import type { Logger } from 'pino';
import { sweepExpiredUploads } from '../blobs/uploads.js';
import { type BusBridge, connectBus, isRelayed } from '../channel/bridge.js';
import type { JobBus } from '../channel/bus.js';
import type { Channel } from '../channel/channel.js';
import { createChannel } from '../channel/create.js';
import type { LonghaulConfig } from '../config.js';
import { lazyResults, lazyUploads } from '../blobs/job-files.js';
import type { Store } from '../store/store.js';
import { Sweeper } from '../sweeper/sweeper.js';
import type { Task } from '../task-api/define.js';
import { dispatchWebhookEvents, type WebhookConfig } from '../webhooks/service.js';
import { Worker, type WorkerHealth, type WorkerOptions } from '../worker/runtime.js';
import { cancelChildren } from '../workflow/cancel-children.js';
import { announceResumedParents } from '../workflow/fail-fast.js';
import { ParentTracker } from '../workflow/parents.js';
import type { WorkerWorkflows } from '../worker/context.js';
import type { LazyFiles } from './files.js';
import { prepare } from './prepare.js';

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
  /** Unhealthy past `maxAbandonedHandlers` abandoned handlers still pending (worker/stuck-handlers.ts). */
  health(): WorkerHealth;
}

/**
 * The store a database URL names: PostgreSQL for `postgres://` URLs, else a SQLite path. Each
 * store's module (and `pg`) is loaded here, when it is the one configured.
 */
export async function storeFor(config: Pick<LonghaulConfig, 'database' | 'pgPoolSize'>, logger: Logger): Promise<Store> {
  if (/^postgres(ql)?:\/\//.test(config.database)) {
    const { PostgresStore } = await import('../store/postgres/postgres-store.js');
    return new PostgresStore({ connectionString: config.database, poolSize: config.pgPoolSize, logger });
  }
  const { SqliteStore } = await import('../store/sqlite/sqlite-store.js');
  return new SqliteStore({ path: config.database });
}

/**
 * The default channel: Redis when configured, else the store's own NOTIFY where it has one
 * (sharing its pool and LISTEN connection, so a process holds one of each), else none.
 */
export function defaultChannel(store: Store, config: Pick<LonghaulConfig, 'database' | 'redisUrl' | 'redisPrefix'>, logger: Logger): Promise<Channel | null> {
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
export async function channelReady(channel: Channel, logger: Logger, timeoutMs = 5000): Promise<void> {
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

export interface RuntimeContext {
  readonly store: Store;
  /** Closed with the instance (false: the caller's, left open). */
  readonly ownsStore: boolean;
  /** The relay between processes (null: none, changes made elsewhere are seen by polling the store). */
  readonly channel: Channel | null;
  readonly ownsChannel: boolean;
  readonly bus: JobBus;
  readonly logger: Logger;
  readonly config: Pick<
    LonghaulConfig,
    | 'sweepIntervalMs'
    | 'cancelDrainMs'
    | 'maxAbandonedHandlers'
    | 'heartbeatIntervalMs'
    | 'heartbeatTimeoutMs'
    | 'resultTtlMs'
    | 'concurrency'
    | 'defaultMaxAttempts'
    | 'stallTimeoutMs'
    | 'retention'
    | 'priorityAgingMs'
    | 'tenantQuotas'
  >;
  readonly webhookConfig: WebhookConfig;
  readonly files: LazyFiles;
  /** The user's tasks (registration may add more after open). */
  readonly tasks: ReadonlyMap<string, Task>;
  /** Tasks every worker of this instance runs besides the user's (webhook delivery). */
  readonly internalTasks: readonly Task[];
  /** Submits the runs of due schedules (facade/schedules.ts); every sweeper pass calls it, in every process. */
  readonly tickSchedules?: (now: number) => Promise<unknown>;
}

export class Runtime {
  private readonly workers = new Set<WorkerHandle>();
  private sweeper: Sweeper | null = null;
  private dispatchOff: (() => void) | null = null;
  private dispatching: Promise<void> | null = null;
  private dispatchAgain = false;
  private signalCleanup: (() => void) | null = null;
  /** Relays this process's bus to and from the channel. */
  private readonly bridge: BusBridge | null;
  private isClosed = false;
  /** Fan-in and parents' progress for the children this process ends or runs. */
  private readonly parents: ParentTracker;
  /** What ctx.spawn needs of this instance: children are checked like submissions, with the parent's tenant. */
  private readonly workflows: WorkerWorkflows;

  /** Deletes ended jobs with their rows and files: retention passes and purges. */
  readonly eraser: Eraser;

  constructor(private readonly ctx: RuntimeContext) {
    const { channel, store } = ctx;
    this.eraser = new Eraser({
      store,
      deleteFiles: async (id) => deleteJobResults((await ctx.files.open()).blobs, id),
    });
    this.parents = new ParentTracker({ store, bus: ctx.bus, log: ctx.logger.child({ component: 'workflows' }) });
    this.parents.start();
    this.workflows = {
      prepareChild: (parent, spec, now) => {
        if (typeof spec !== 'object' || spec === null) throw new TypeError('each child must be an object { type, input, ...options }');
        const { type, input, ...options } = spec;
        return prepare({ tasks: ctx.tasks, config: ctx.config }, type, input, { ...options, tenant: parent.tenant, parentId: parent.id }, now);
      },
      cancelChildren: (parentId, now, reason) => cancelChildren(store, ctx.bus, parentId, now, reason),
    };
    this.bridge = channel
      ? connectBus(ctx.bus, channel, {
          // A progress too large for a NOTIFY arrives without its value: read it from the store.
          getProgress: async (id) => (await store.getJob({ id }))?.progress ?? null,
          logger: ctx.logger.child({ component: 'channel', transport: channel.transport }),
        })
      : null;
  }

  /** Set once close() has stopped the work that still writes (workers, sweeper, dispatch). */
  get closed(): boolean {
    return this.isClosed;
  }

  startSweeper(): Sweeper {
    if (this.sweeper) return this.sweeper;
    const { store, bus, logger, config, files } = this.ctx;
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
      retention: async (now) => (await this.eraser.retain(config.retention, this.taskRetention(), now)).jobs,
      announceResumed: (resumed, now) => announceResumedParents(store, bus, resumed, now),
      maintenance: () => this.dispatchWebhooks(),
      everyPass: async (now) => {
        // Schedules tick in every process, not only in the elected sweeper: each tick is keyed,
        // so several tickers submit one run, and a tick does not wait for an election.
        if (this.ctx.tickSchedules) await this.ctx.tickSchedules(now);
        // Uploads expire where blob storage is open (API servers open it to accept uploads).
        const opened = files.opened;
        if (opened) await sweepExpiredUploads((await opened).blobs, now);
      },
    });
    this.sweeper.start();
    // A job that ends in this process has its webhook enqueued at once, not at the next sweep.
    // Debounced: a busy worker ends thousands of jobs a second, and most have no webhook.
    let soon: NodeJS.Timeout | null = null;
    const off = bus.on('job:changed', (e) => {
      // Relayed ends are dispatched by the process where they happened (the outbox makes a double dispatch harmless, not free).
      // A job deleted by the write that ended it (retention 0) had no webhook: the stores delete
      // only jobs that own none.
      if (soon || (e.to !== 'succeeded' && e.to !== 'failed' && e.to !== 'cancelled') || e.deleted || isRelayed(e)) return;
      soon = setTimeout(() => {
        soon = null;
        this.dispatchWebhooks().catch((err) => logger.error({ err }, 'webhook dispatch failed'));
      }, 10);
      soon.unref?.();
    });
    // Retention 0 (delete on completion): a job that ends in this process is deleted at once,
    // not at the next sweep. Most are deleted by the worker's own write that ends them; the
    // others (result files to delete, a webhook, a parent or children; ends written elsewhere:
    // cancels, timeouts) here, debounced and coalesced like webhook dispatch, in batches of many.
    const offRetain = this.hasZeroRetention()
      ? bus.on('job:changed', (e) => {
          if (e.to !== 'succeeded' && e.to !== 'failed' && e.to !== 'cancelled') return;
          // Deleted already by the write that ended it (a worker's outcome: TransitionParams.deleteOnEnd).
          if (e.deleted || isRelayed(e)) return;
          this.retainSoon();
        })
      : () => {};
    this.dispatchOff = () => {
      off();
      offRetain();
      if (soon) clearTimeout(soon);
      if (this.retainTimer) clearTimeout(this.retainTimer);
      this.retainTimer = null;
    };
    return this.sweeper;
  }

  private retainTimer: NodeJS.Timeout | null = null;
  private retaining: Promise<void> | null = null;
  private retainAgain = false;

  /** True when some end state is deleted on completion (instance-wide or for some task). */
  private hasZeroRetention(): boolean {
    const zero = (p: RetentionPolicy) => Object.values(p).some((ms) => ms === 0);
    return zero(this.ctx.config.retention) || [...this.ctx.tasks.values()].some((t) => zero(t.retention ?? {}));
  }

  /** A retention pass of the periods that are 0 soon (one at a time, plus one more if asked meanwhile). */
  private retainSoon(): void {
    if (this.retaining) {
      this.retainAgain = true;
      return;
    }
    if (this.retainTimer) return;
    this.retainTimer = setTimeout(() => {
      this.retainTimer = null;
      const zeroOnly = Object.fromEntries(Object.entries(this.ctx.config.retention).filter(([, ms]) => ms === 0)) as RetentionPolicy;
      this.retaining = (async () => {
        try {
          do {
            this.retainAgain = false;
            // Every rule retentionRules makes is correct on its own: the instance's other periods are left to the sweeper.
            await this.eraser.retain(zeroOnly, this.taskRetention(), Date.now());
          } while (this.retainAgain && !this.isClosed);
        } catch (err) {
          this.ctx.logger.error({ err }, 'retention on completion failed');
        } finally {
          this.retaining = null;
        }
      })();
    }, 20);
    this.retainTimer.unref?.();
  }

  /** The retention overrides of the tasks registered here (a task without one follows the instance's). */
  private taskRetention(): Map<string, RetentionPolicy> {
    const out = new Map<string, RetentionPolicy>();
    for (const [type, task] of this.ctx.tasks) if (task.retention && Object.keys(task.retention).length > 0) out.set(type, task.retention);
    return out;
  }

  /** Enqueues the delivery jobs of pending webhook events (coalesced: one run at a time, plus one more if asked meanwhile). */
  dispatchWebhooks(): Promise<void> {
    if (this.dispatching) {
      this.dispatchAgain = true;
      return this.dispatching;
    }
    const { store, bus, logger, config, webhookConfig } = this.ctx;
    this.dispatching = (async () => {
      try {
        do {
          this.dispatchAgain = false;
          if (this.isClosed) return;
          await dispatchWebhookEvents({
            store,
            config: webhookConfig,
            heartbeatTimeoutMs: config.heartbeatTimeoutMs,
            logger,
            insert: async (job) => {
              const res = await store.insertJob({ job });
              if (res.kind === 'created') bus.emit('job:submitted', { job: res.job });
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

  startWorker(options: StartWorkerOptions): WorkerHandle {
    const { store, bus, logger, config, files, tasks, internalTasks } = this.ctx;
    const worker = new Worker({
      store,
      bus,
      workflows: this.workflows,
      tasks: new Map([...tasks, ...internalTasks.map((t) => [t.type, t] as const)]),
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
      health: () => worker.health,
    };
    this.workers.add(handle);
    if (options.handleSignals) this.installSignalHandlers(defaultDrain);
    return handle;
  }

  /** The health of this process's workers together: healthy when each is (and when none runs). */
  workerHealth(): WorkerHealth {
    let abandonedPending = 0;
    const reasons: string[] = [];
    for (const w of this.workers) {
      const h = w.health();
      abandonedPending += h.abandonedPending;
      if (!h.healthy && h.reason) reasons.push(h.reason);
    }
    return reasons.length === 0 ? { healthy: true, abandonedPending } : { healthy: false, abandonedPending, reason: reasons.join('; ') };
  }

  private installSignalHandlers(drainMs: number): void {
    if (this.signalCleanup) return;
    const { logger } = this.ctx;
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        logger.warn({ signal }, 'second signal: exiting now');
        process.exit(130);
      }
      stopping = true;
      logger.info({ signal, drainMs }, 'shutting down: draining running jobs');
      this.close({ drainMs })
        .then(() => process.exit(0))
        .catch((err) => {
          logger.error({ err }, 'shutdown failed');
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

  /**
   * Stops what writes first (workers hand back unfinished jobs, then the sweeper and webhook
   * dispatch), then what carries writes out: blob storage, the relay (held progress and queued
   * events go out, through the store's pool on PostgreSQL), the channel, and last the store.
   */
  async close(options: { drainMs?: number }): Promise<void> {
    if (this.isClosed) return;
    await Promise.all([...this.workers].map((w) => w.stop(options.drainMs === undefined ? {} : { drainMs: options.drainMs })));
    await this.sweeper?.stop();
    await this.parents.close();
    this.dispatchOff?.();
    await this.dispatching?.catch(() => {});
    await this.retaining;
    this.isClosed = true;
    this.signalCleanup?.();
    await this.ctx.files.close();
    this.bridge?.close();
    if (this.ctx.ownsChannel) await this.ctx.channel?.close();
    if (this.ctx.ownsStore) await this.ctx.store.close();
  }
}
