/**
 * The library API (DESIGN §3): `Longhaul.open({ database, tasks })`, then submit, get, list,
 * cancel, retry, transitions, watch, startWorker, close. The HTTP server and the CLI are thin
 * layers over this class. This file is the composition root: it opens the store and channel and
 * hands each part of the facade (facade/) the context it needs; the work is done there.
 */
import pino, { type Logger } from 'pino';
import type { JobFiles, JobFilesOptions } from './blobs/job-files.js';
import type { StoredResultFile } from './blobs/results.js';
import { JobBus } from './channel/bus.js';
import { LonghaulMetrics } from './metrics/metrics.js';
import { inSubmitSpan, tracingEnabled } from './telemetry/trace.js';
import { jobLogFields, LOG_REDACT } from './core/log-fields.js';
import type { Channel } from './channel/channel.js';
import { type ConfigOptions, checkHeartbeat, type LonghaulConfig, logLevelFromEnv, resolveConfig } from './config.js';
import { BatchItemError, InvalidOptionsError } from './core/errors.js';
import type { JobSnapshot } from './core/job.js';
import { isTerminal, type JobState } from './core/states.js';
import { cancelJob, type ControlContext, retryJob } from './facade/control.js';
import { LazyFiles } from './facade/files.js';
import { prepare } from './facade/prepare.js';
import * as reads from './facade/reads.js';
import { Schedules } from './facade/schedules.js';
import { channelReady, defaultChannel, Runtime, type StartWorkerOptions, storeFor, type WorkerHandle } from './facade/runtime.js';
import { type DatabaseWait, whenDatabaseAnswers } from './facade/database-wait.js';
import type { WorkerHealth } from './worker/stuck-handlers.js';
import { type PurgeFilter, type PurgeOutcome, purgeJobs } from './facade/purge.js';
import * as deadLetters from './facade/dead-letters.js';
import { taskTypes } from './facade/task-types.js';
import type { AttemptPage, DeadLetterGroupView, DeadLetterOutcome, TaskTypeView } from './core/api-types.js';
import { type BatchItem, type BatchOptions, type SubmitOptions, Submission } from './facade/submission.js';
import { type WatchContext, type WatchOptions, watchJob } from './facade/watch.js';
import type { MigrationResult, SnapshotJson, Store } from './store/store.js';
import type { Sweeper } from './sweeper/sweeper.js';
import { collectSchedules, collectTasks, isTask, type ScheduleDeclaration, type Task } from './task-api/define.js';
import { type SignalOutcome, sendSignal } from './workflow/signals.js';
import { resolveWebhookConfig, type WebhookConfig, type WebhookConfigOptions, WEBHOOK_TASK_TYPE, webhookTask } from './webhooks/service.js';

export type { JobStats, ListOptions, PublicTransition, TenantScope, WebhookDelivery } from './facade/reads.js';
export type { StartWorkerOptions, WorkerHandle } from './facade/runtime.js';
export type { DatabaseWait } from './facade/database-wait.js';
export type { WorkerHealth } from './worker/stuck-handlers.js';
export type { BatchItem, BatchOptions, SubmitOptions } from './facade/submission.js';
export type { PurgeFilter, PurgeOutcome } from './facade/purge.js';
export type { DeadLetterJobPage, DeadLetterPageOptions, DeadLetterSelection } from './facade/dead-letters.js';
export type { SignalOutcome } from './workflow/signals.js';

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

export class Longhaul {
  readonly bus = new JobBus();
  private readonly taskMap = new Map<string, Task>();
  private readonly lazyFiles: LazyFiles;
  private readonly submission: Submission;
  private readonly runtime: Runtime;
  /** What reads, watches and control act on; built once, as the hot reads take it on every call. */
  private readonly readCtx: WatchContext;
  private readonly controlCtx: ControlContext;
  /** Prometheus metrics of this instance (`GET /metrics`; see src/metrics/metrics.ts and docs/observability.md). */
  readonly metrics: LonghaulMetrics;
  /** Cron schedules: create, list, get, update, pause, resume, delete, trigger, and the tick pass (facade/schedules.ts). */
  readonly schedules: Schedules;

  private constructor(
    readonly store: Store,
    readonly config: LonghaulConfig,
    tasks: Task[],
    readonly logger: Logger,
    ownsStore: boolean,
    filesOptions: JobFilesOptions,
    readonly webhookConfig: WebhookConfig,
    /** The relay between processes (null: none, changes made elsewhere are seen by polling the store). */
    readonly channel: Channel | null,
    ownsChannel: boolean,
    private readonly migrated: MigrationResult,
    clock: (() => number) | undefined,
  ) {
    for (const t of tasks) this.addTask(t);
    const { bus, taskMap } = this;
    this.lazyFiles = new LazyFiles(config.database, filesOptions);
    this.submission = new Submission({ store, bus, config, webhookConfig, tasks: taskMap });
    const internalTasks = [
      webhookTask({ store, config: webhookConfig, snapshot: async (id) => this.get(id), attempted: (outcome) => bus.emit('webhook:attempt', { outcome }) }),
    ];
    const files = this.lazyFiles;
    this.schedules = new Schedules({
      store,
      tasks: taskMap,
      check: async (type, input) => {
        await prepare({ tasks: taskMap, config }, type, input, {}, Date.now());
      },
      enqueue: (type, input, options) => this.enqueue(type, input, options),
      logger: logger.child({ component: 'schedules' }),
      ...(clock ? { clock } : {}),
    });
    this.runtime = new Runtime({
      store,
      ownsStore,
      channel,
      ownsChannel,
      bus,
      logger,
      config,
      webhookConfig,
      files,
      tasks: taskMap,
      internalTasks,
      tickSchedules: (now) => this.schedules.tick(clock ? clock() : now),
    });
    this.readCtx = { store, logger, bus, relayed: channel !== null, files: () => this.files(), isClosed: () => this.runtime.closed };
    this.controlCtx = { store, bus };
    this.metrics = new LonghaulMetrics({ bus, store });
    bus.on('job:submitted', ({ job }) => {
      if (logger.isLevelEnabled('debug')) logger.debug(jobLogFields(job), 'job submitted');
    });
  }

  static async open(options: OpenOptions = {}): Promise<Longhaul> {
    const config = resolveConfig(options);
    const logger = options.logger ?? pino({ level: logLevelFromEnv('LONGHAUL_LOG_LEVEL', 'info'), name: 'longhaul', redact: LOG_REDACT });
    const tasks = Array.isArray(options.tasks) ? collectTasks({ default: options.tasks }) : options.tasks ? collectTasks(options.tasks as Record<string, unknown>) : [];
    if (tasks.some((t) => t.type === WEBHOOK_TASK_TYPE)) throw new Error(`the task type "${WEBHOOK_TASK_TYPE}" is reserved for webhook delivery`);
    const webhookConfig = resolveWebhookConfig(options.webhooks);
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
    const ownsChannel = options.channel === undefined && channel !== null;
    const lh = new Longhaul(store, config, tasks, logger, options.store === undefined, options.files ?? {}, webhookConfig, channel, ownsChannel, migration, options.clock);
    if (channel) await channelReady(channel, logger);
    const declared = [...(options.tasks && !Array.isArray(options.tasks) ? collectSchedules(options.tasks as Record<string, unknown>) : []), ...(options.schedules ?? [])];
    if (declared.length > 0) {
      try {
        await lh.schedules.declare(declared);
      } catch (err) {
        await lh.close();
        throw err;
      }
    }
    return lh;
  }

  /** Blob storage of result files and uploads, opened on first use. */
  files(): Promise<JobFiles> {
    this.assertOpen();
    return this.lazyFiles.open();
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

  // ---- submit (facade/prepare.ts, facade/submission.ts) ------------------------------------

  /** Submits a job; `replayed` is true when an idempotency key returned an existing job. Not async: see Submission.enqueue. */
  enqueue(type: string, input?: unknown, options: SubmitOptions = {}): Promise<{ job: JobSnapshot; replayed: boolean }> {
    if (this.runtime.closed) return Promise.reject(closedError());
    if (tracingEnabled()) return inSubmitSpan(type, () => this.submission.enqueue(type, input, options), (out) => out.job.id);
    return this.submission.enqueue(type, input, options);
  }

  async submit(type: string, input?: unknown, options: SubmitOptions = {}): Promise<JobSnapshot> {
    return (await this.enqueue(type, input, options)).job;
  }

  /**
   * Bulk enqueue in one transaction: all the jobs or none (see Submission.submitMany). A refused
   * job rejects the batch with the error its own submission would have got, before anything is
   * written; `idempotencyKey` covers the whole batch.
   */
  async submitMany(jobs: ReadonlyArray<BatchItem>, options: BatchOptions = {}): Promise<JobSnapshot[]> {
    try {
      return (await this.enqueueMany(jobs, options)).jobs;
    } catch (err) {
      throw err instanceof BatchItemError ? err.cause : err;
    }
  }

  /** The same, with `replayed` (the batch's key found every job) and a refused job's index (BatchItemError). */
  async enqueueMany(jobs: ReadonlyArray<BatchItem>, options: BatchOptions = {}): Promise<{ jobs: JobSnapshot[]; replayed: boolean }> {
    this.assertOpen();
    return this.submission.submitMany(jobs, options);
  }

  // ---- reads (facade/reads.ts, facade/watch.ts) --------------------------------------------

  async get(id: string, scope: reads.TenantScope = {}): Promise<JobSnapshot | null> {
    this.assertOpen();
    return reads.getJob(this.readCtx, id, scope);
  }

  /** A job's snapshot as JSON text, or null; see reads.snapshotJson (not async: the hottest read). */
  snapshotJson(id: string, scope: reads.TenantScope = {}): Promise<(SnapshotJson & { json: string }) | null> {
    this.assertOpen();
    return reads.snapshotJson(this.readCtx, id, scope);
  }

  /** A job's last saved checkpoint, or null; throws JobNotFoundError (dashboard, `GET /v1/jobs/{id}/checkpoint`). */
  async checkpoint(id: string, scope: reads.TenantScope = {}): Promise<{ version: number; data: unknown; corrupt: boolean } | null> {
    this.assertOpen();
    return reads.checkpoint(this.store, id, scope);
  }

  /** The state and recorded files of a job (result routes); `tenant` null means any tenant. */
  async resultFiles(id: string, tenant: string | null): Promise<{ state: JobState; files: StoredResultFile[]; expiresAt: number | null } | null> {
    this.assertOpen();
    return reads.resultFiles(this.store, id, tenant);
  }

  /** Counts one download of a job's result file (the result routes' `onDownload`). */
  async countDownload(id: string, name: string): Promise<void> {
    this.assertOpen();
    await this.store.countDownload({ id, name });
  }

  /** The webhook delivery log of a job (oldest first). */
  async webhookDeliveries(id: string, scope: reads.TenantScope = {}): Promise<reads.WebhookDelivery[]> {
    this.assertOpen();
    return reads.webhookDeliveries(this.store, id, scope);
  }

  async list(options: reads.ListOptions = {}): Promise<{ items: JobSnapshot[]; nextCursor: string | null }> {
    this.assertOpen();
    return reads.listJobs(this.readCtx, options);
  }

  async transitions(id: string, scope: reads.TenantScope = {}): Promise<reads.PublicTransition[]> {
    this.assertOpen();
    return reads.transitions(this.store, id, scope);
  }

  /**
   * Snapshots of one job as it changes: the current one first, then one per visible change
   * (state, flags, progress), ending after the terminal snapshot. Changes made in this process
   * arrive at once; so do changes made by other processes when a channel relays them (PostgreSQL
   * NOTIFY or Redis), with a store read every 2 s as a safety net. Without a channel they are
   * picked up by polling the store (`pollMs`, default 250 ms).
   */
  async *watch(id: string, options: WatchOptions = {}): AsyncGenerator<JobSnapshot> {
    this.assertOpen();
    yield* watchJob(this.readCtx, id, options);
  }

  /** Resolves with the terminal snapshot. */
  async wait(id: string, options: WatchOptions = {}): Promise<JobSnapshot> {
    let last: JobSnapshot | undefined;
    for await (const s of this.watch(id, options)) last = s;
    if (!last || !isTerminal(last.status)) throw new Error(`stopped watching job ${id} before it finished`);
    return last;
  }

  /** Counts by state, submission/completion rates over the last minute, run-time percentiles per type over 15 minutes. */
  async stats(scope: reads.TenantScope = {}): Promise<reads.JobStats> {
    this.assertOpen();
    return reads.stats(this.store, scope);
  }

  /** Resolves when the database answers one cheap read of Longhaul's schema (readiness probes). */
  async ping(): Promise<void> {
    this.assertOpen();
    await this.store.ping();
  }

  // ---- control (facade/control.ts) ---------------------------------------------------------

  /**
   * Cancels a job: queued work (pending, queued, retrying, waiting) is cancelled at once; a
   * running job gets a cancel request (its ctx.signal fires) and is forced to cancelled after
   * the drain period if the handler ignores it. A terminal job is a JobStateConflictError.
   */
  async cancel(id: string, scope: reads.TenantScope = {}): Promise<JobSnapshot> {
    this.assertOpen();
    return cancelJob(this.controlCtx, id, scope);
  }

  /**
   * Sends the signal `name` (letters, digits, `._:-`, 1 to 128) with a JSON payload to a job: a
   * job waiting for it (ctx.waitFor) is queued again (`resumed`), otherwise the signal is kept for
   * the job's next wait for that name. An ended job is a JobEndedError.
   */
  async signal(id: string, name: string, payload?: unknown, scope: reads.TenantScope = {}): Promise<SignalOutcome> {
    this.assertOpen();
    return sendSignal(this.controlCtx, id, name, payload, scope);
  }

  /** Manual retry of a failed or cancelled job: a fresh attempt budget; it resumes from its checkpoint. */
  async retry(id: string, scope: reads.TenantScope = {}): Promise<JobSnapshot> {
    this.assertOpen();
    return retryJob(this.controlCtx, id, scope);
  }

  /**
   * Erases ended jobs of a tenant or a filter, with their transitions, progress, webhook targets
   * and delivery logs, signals and result files (data-protection requests). Jobs not ended are
   * left alone and counted as `skipped`. An unfiltered purge is an InvalidOptionsError.
   */
  async purge(filter: PurgeFilter): Promise<PurgeOutcome> {
    this.assertOpen();
    return purgeJobs({ store: this.store, eraser: this.runtime.eraser }, filter);
  }

  // ---- dead letters (facade/dead-letters.ts) and task types (facade/task-types.ts) ----------

  /**
   * A job's attempts, oldest first: each that ended without succeeding (its error, stack, worker
   * and times, kept as it ended), then the one running now or the one that succeeded. Paged:
   * `limit` (default 100, at most 1000) and the `nextCursor` of the previous page.
   */
  async attempts(id: string, options: reads.TenantScope & { limit?: number; cursor?: string | null } = {}): Promise<AttemptPage> {
    this.assertOpen();
    const { limit, cursor, ...scope } = options;
    return deadLetters.listAttempts(this.store, id, scope, { ...(limit === undefined ? {} : { limit }), ...(cursor === undefined ? {} : { cursor }) });
  }

  /** Failed jobs grouped by task type and error code, with counts and the newest failure; `tenant` absent: every tenant's. */
  async deadLetterGroups(selection: deadLetters.DeadLetterSelection & { limit?: number } = {}): Promise<DeadLetterGroupView[]> {
    this.assertOpen();
    return deadLetters.deadLetterGroups(this.store, selection);
  }

  /** Failed jobs of a selection (e.g. one group's type and code), newest failure first, in pages. */
  async deadLetterJobs(options: deadLetters.DeadLetterPageOptions = {}): Promise<deadLetters.DeadLetterJobPage> {
    this.assertOpen();
    return deadLetters.deadLetterJobs({ ...this.readCtx, store: this.store }, options);
  }

  /** Replays the selected failed jobs (each a manual retry, as `retry`), in batches; resolves to how many were queued again. */
  async retryDeadLetters(selection: deadLetters.DeadLetterSelection = {}): Promise<DeadLetterOutcome> {
    this.assertOpen();
    return deadLetters.retryDeadLetters({ store: this.store, bus: this.bus, eraser: this.runtime.eraser }, selection);
  }

  /** Deletes the selected failed jobs with their rows and files, in batches; resolves to how many were deleted. */
  async discardDeadLetters(selection: deadLetters.DeadLetterSelection = {}): Promise<DeadLetterOutcome> {
    this.assertOpen();
    return deadLetters.discardDeadLetters({ store: this.store, bus: this.bus, eraser: this.runtime.eraser }, selection);
  }

  /** The task types this instance accepts submissions of, with their input's JSON Schema (null when none is known). */
  taskTypes(): TaskTypeView[] {
    return taskTypes(this.taskMap);
  }

  // ---- runtime (facade/runtime.ts) ---------------------------------------------------------

  startSweeper(): Sweeper {
    this.assertOpen();
    return this.runtime.startSweeper();
  }

  /** Enqueues the delivery jobs of pending webhook events (coalesced: one run at a time, plus one more if asked meanwhile). */
  dispatchWebhooks(): Promise<void> {
    return this.runtime.dispatchWebhooks();
  }

  async startWorker(options: StartWorkerOptions = {}): Promise<WorkerHandle> {
    this.assertOpen();
    if (this.taskMap.size === 0) throw new InvalidOptionsError('startWorker needs at least one task (pass tasks to Longhaul.open or register them)');
    return this.runtime.startWorker(options);
  }

  /**
   * The health of this instance's workers: unhealthy while more than `maxAbandonedHandlers`
   * handlers that ignored their signal after their job ended are still pending (`/healthz` and
   * `/readyz` answer 503 then, so that a supervisor restarts the process). Healthy without workers.
   */
  workerHealth(): WorkerHealth {
    return this.runtime.workerHealth();
  }

  /** Stops workers (gracefully, handing back unfinished jobs), the sweeper, and closes the store. */
  close(options: { drainMs?: number } = {}): Promise<void> {
    return this.runtime.close(options).finally(() => this.metrics.close());
  }

  private assertOpen(): void {
    if (this.runtime.closed) throw closedError();
  }
}

function closedError(): Error {
  return new Error('this Longhaul instance is closed');
}
