/**
 * The library API (DESIGN §3): `Longhaul.open({ database, tasks })`, then submit, get, list,
 * cancel, retry, transitions, watch, startWorker, close. The HTTP server and the CLI are thin
 * layers over this class. Its instance is composed in one place, facade/instance.ts (the store,
 * the channel and everything wired over them, and the order they close in); each method here
 * hands one operation to the facade module that holds it.
 */
import type { Logger } from 'pino';
import type { JobFiles } from './blobs/job-files.js';
import type { StoredResultFile } from './blobs/results.js';
import type { JobBus } from './channel/bus.js';
import type { Channel } from './channel/channel.js';
import type { LonghaulConfig } from './config.js';
import type { AttemptPage, DeadLetterGroupView, DeadLetterOutcome, TaskTypeView } from './core/api-types.js';
import { BatchItemError } from './core/errors.js';
import type { JobSnapshot } from './core/job.js';
import { isTerminal, type JobState } from './core/states.js';
import { cancelJob, retryJob } from './facade/control.js';
import * as deadLetters from './facade/dead-letters.js';
import { type Instance, type OpenOptions, openInstance } from './facade/instance.js';
import { type PurgeFilter, type PurgeOutcome, purgeJobs } from './facade/purge.js';
import * as reads from './facade/reads.js';
import type { Schedules } from './facade/schedules.js';
import type { ApiKeys } from './facade/api-keys.js';
import type { BatchItem, BatchOptions, SubmitOptions } from './facade/submission.js';
import { taskTypes } from './facade/task-types.js';
import { type WatchOptions, watchJob } from './facade/watch.js';
import type { StartWorkerOptions, WorkerHandle } from './facade/workers.js';
import type { LonghaulMetrics } from './metrics/metrics.js';
import type { MigrationResult, SnapshotJson, Store } from './store/store.js';
import type { Sweeper } from './sweeper/sweeper.js';
import type { Task } from './task-api/define.js';
import type { WebhookConfig } from './webhooks/service.js';
import type { WorkerHealth } from './worker/stuck-handlers.js';
import { type SignalOutcome, sendSignal } from './workflow/signals.js';

export type { JobStats, ListOptions, PublicTransition, TenantScope, WebhookDelivery } from './facade/reads.js';
export type { OpenOptions } from './facade/instance.js';
export type { StartWorkerOptions, WorkerHandle } from './facade/workers.js';
export type { DatabaseWait } from './facade/database-wait.js';
export type { WorkerHealth } from './worker/stuck-handlers.js';
export type { BatchItem, BatchOptions, SubmitOptions } from './facade/submission.js';
export type { PurgeFilter, PurgeOutcome } from './facade/purge.js';
export type { DeadLetterJobPage, DeadLetterPageOptions, DeadLetterSelection } from './facade/dead-letters.js';
export type { SignalOutcome } from './workflow/signals.js';

export class Longhaul {
  readonly bus: JobBus;
  readonly store: Store;
  readonly config: LonghaulConfig;
  readonly logger: Logger;
  readonly webhookConfig: WebhookConfig;
  /** The relay between processes (null: none, changes made elsewhere are seen by polling the store). */
  readonly channel: Channel | null;
  /** Prometheus metrics of this instance (`GET /metrics`; see src/metrics/metrics.ts and docs/observability.md). */
  readonly metrics: LonghaulMetrics;
  /** Cron schedules: create, list, get, update, pause, resume, delete, trigger, and the tick pass (facade/schedules.ts). */
  readonly schedules: Schedules;
  /** API keys kept in the database: create, list, revoke, and the server's cached check (facade/api-keys.ts). */
  readonly apiKeys: ApiKeys;

  private constructor(private readonly instance: Instance) {
    this.bus = instance.bus;
    this.store = instance.store;
    this.config = instance.config;
    this.logger = instance.logger;
    this.webhookConfig = instance.webhookConfig;
    this.channel = instance.channel;
    this.metrics = instance.metrics;
    this.schedules = instance.schedules;
    this.apiKeys = instance.apiKeys;
  }

  /** Opens the store (migrating it) and the channel, and wires the instance over them (facade/instance.ts). */
  static async open(options: OpenOptions = {}): Promise<Longhaul> {
    return new Longhaul(await openInstance(options));
  }

  /** The instance's parts, once it is checked open (each operation below throws once closed). */
  private get live(): Instance {
    this.instance.assertOpen();
    return this.instance;
  }

  /** Blob storage of result files and uploads, opened on first use. */
  files(): Promise<JobFiles> {
    return this.instance.openFiles();
  }

  /** What opening did to the schema: the version found (0: none yet) and the version now (equal: nothing to do). */
  get migration(): MigrationResult {
    return this.instance.migration;
  }

  /** Registers more tasks (e.g. a tasks module loaded after open). */
  register(...tasks: Task[]): void {
    this.instance.register(tasks);
  }

  get tasks(): ReadonlyMap<string, Task> {
    return this.instance.tasks;
  }

  // ---- submit (facade/prepare.ts, facade/submission.ts) ------------------------------------

  /** Submits a job; `replayed` is true when an idempotency key returned an existing job. Not async: see Submission.enqueue. */
  enqueue(type: string, input?: unknown, options: SubmitOptions = {}): Promise<{ job: JobSnapshot; replayed: boolean }> {
    return this.instance.enqueue(type, input, options);
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
    return this.live.submission.submitMany(jobs, options);
  }

  // ---- reads (facade/reads.ts, facade/watch.ts) --------------------------------------------

  async get(id: string, scope: reads.TenantScope = {}): Promise<JobSnapshot | null> {
    return reads.getJob(this.live.readCtx, id, scope);
  }

  /** A job's snapshot as JSON text, or null; see reads.snapshotJson (not async: the hottest read). */
  snapshotJson(id: string, scope: reads.TenantScope = {}): Promise<(SnapshotJson & { json: string }) | null> {
    return reads.snapshotJson(this.live.readCtx, id, scope);
  }

  /** A job's last saved checkpoint, or null; throws JobNotFoundError (dashboard, `GET /v1/jobs/{id}/checkpoint`). */
  async checkpoint(id: string, scope: reads.TenantScope = {}): Promise<{ version: number; data: unknown; corrupt: boolean } | null> {
    return reads.checkpoint(this.live.store, id, scope);
  }

  /** The state and recorded files of a job (result routes); `tenant` null means any tenant. */
  async resultFiles(id: string, tenant: string | null): Promise<{ state: JobState; files: StoredResultFile[]; expiresAt: number | null } | null> {
    return reads.resultFiles(this.live.store, id, tenant);
  }

  /** Counts one download of a job's result file (the result routes' `onDownload`). */
  async countDownload(id: string, name: string): Promise<void> {
    await this.live.store.countDownload({ id, name });
  }

  /** The webhook delivery log of a job (oldest first). */
  async webhookDeliveries(id: string, scope: reads.TenantScope = {}): Promise<reads.WebhookDelivery[]> {
    return reads.webhookDeliveries(this.live.store, id, scope);
  }

  async list(options: reads.ListOptions = {}): Promise<{ items: JobSnapshot[]; nextCursor: string | null }> {
    return reads.listJobs(this.live.readCtx, options);
  }

  async transitions(id: string, scope: reads.TenantScope = {}): Promise<reads.PublicTransition[]> {
    return reads.transitions(this.live.store, id, scope);
  }

  /**
   * Snapshots of one job as it changes: the current one first, then one per visible change
   * (state, flags, progress), ending after the terminal snapshot. Changes made in this process
   * arrive at once; so do changes made by other processes when a channel relays them (PostgreSQL
   * NOTIFY or Redis), with a store read every 2 s as a safety net. Without a channel they are
   * picked up by polling the store (`pollMs`, default 250 ms).
   */
  async *watch(id: string, options: WatchOptions = {}): AsyncGenerator<JobSnapshot> {
    yield* watchJob(this.live.readCtx, id, options);
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
    return reads.stats(this.live.store, scope);
  }

  /** Resolves when the database answers one cheap read of Longhaul's schema (readiness probes). */
  async ping(): Promise<void> {
    await this.live.store.ping();
  }

  // ---- control (facade/control.ts) ---------------------------------------------------------

  /**
   * Cancels a job: queued work (pending, queued, retrying, waiting) is cancelled at once; a
   * running job gets a cancel request (its ctx.signal fires) and is forced to cancelled after
   * the drain period if the handler ignores it. A terminal job is a JobStateConflictError.
   */
  async cancel(id: string, scope: reads.TenantScope = {}): Promise<JobSnapshot> {
    return cancelJob(this.live.controlCtx, id, scope);
  }

  /**
   * Sends the signal `name` (letters, digits, `._:-`, 1 to 128) with a JSON payload to a job: a
   * job waiting for it (ctx.waitFor) is queued again (`resumed`), otherwise the signal is kept for
   * the job's next wait for that name. An ended job is a JobEndedError.
   */
  async signal(id: string, name: string, payload?: unknown, scope: reads.TenantScope = {}): Promise<SignalOutcome> {
    return sendSignal(this.live.controlCtx, id, name, payload, scope);
  }

  /** Manual retry of a failed or cancelled job: a fresh attempt budget; it resumes from its checkpoint. */
  async retry(id: string, scope: reads.TenantScope = {}): Promise<JobSnapshot> {
    return retryJob(this.live.controlCtx, id, scope);
  }

  /**
   * Erases ended jobs of a tenant or a filter, with their transitions, progress, webhook targets
   * and delivery logs, signals and result files (data-protection requests). Jobs not ended are
   * left alone and counted as `skipped`. An unfiltered purge is an InvalidOptionsError.
   */
  async purge(filter: PurgeFilter): Promise<PurgeOutcome> {
    return purgeJobs(this.live, filter);
  }

  // ---- dead letters (facade/dead-letters.ts) and task types (facade/task-types.ts) ----------

  /**
   * A job's attempts, oldest first: each that ended without succeeding (its error, stack, worker
   * and times, kept as it ended), then the one running now or the one that succeeded. Paged:
   * `limit` (default 100, at most 1000) and the `nextCursor` of the previous page.
   */
  async attempts(id: string, options: reads.TenantScope & { limit?: number; cursor?: string | null } = {}): Promise<AttemptPage> {
    const { limit, cursor, ...scope } = options;
    return deadLetters.listAttempts(this.live.store, id, scope, { ...(limit === undefined ? {} : { limit }), ...(cursor === undefined ? {} : { cursor }) });
  }

  /** Failed jobs grouped by task type and error code, with counts and the newest failure; `tenant` absent: every tenant's. */
  async deadLetterGroups(selection: deadLetters.DeadLetterSelection & { limit?: number } = {}): Promise<DeadLetterGroupView[]> {
    return deadLetters.deadLetterGroups(this.live.store, selection);
  }

  /** Failed jobs of a selection (e.g. one group's type and code), newest failure first, in pages. */
  async deadLetterJobs(options: deadLetters.DeadLetterPageOptions = {}): Promise<deadLetters.DeadLetterJobPage> {
    return deadLetters.deadLetterJobs(this.live.readCtx, options);
  }

  /** Replays the selected failed jobs (each a manual retry, as `retry`), in batches; resolves to how many were queued again. */
  async retryDeadLetters(selection: deadLetters.DeadLetterSelection = {}): Promise<DeadLetterOutcome> {
    return deadLetters.retryDeadLetters(this.live, selection);
  }

  /** Deletes the selected failed jobs with their rows and files, in batches; resolves to how many were deleted. */
  async discardDeadLetters(selection: deadLetters.DeadLetterSelection = {}): Promise<DeadLetterOutcome> {
    return deadLetters.discardDeadLetters(this.live, selection);
  }

  /** The task types this instance accepts submissions of, with their input's JSON Schema (null when none is known). */
  taskTypes(): TaskTypeView[] {
    return taskTypes(this.instance.tasks);
  }

  // ---- sweeper, webhooks, workers, close (facade/instance.ts, facade/workers.ts) --------------

  startSweeper(): Sweeper {
    return this.live.startSweeper();
  }

  /** Enqueues the delivery jobs of pending webhook events (coalesced: one run at a time, plus one more if asked meanwhile). */
  dispatchWebhooks(): Promise<void> {
    return this.instance.dispatchWebhooks();
  }

  async startWorker(options: StartWorkerOptions = {}): Promise<WorkerHandle> {
    return this.live.startWorker(options);
  }

  /**
   * The health of this instance's workers: unhealthy while more than `maxAbandonedHandlers`
   * handlers that ignored their signal after their job ended are still pending (`/healthz` and
   * `/readyz` answer 503 then, so that a supervisor restarts the process). Healthy without workers.
   */
  workerHealth(): WorkerHealth {
    return this.instance.workerHealth();
  }

  /** Stops workers (gracefully, handing back unfinished jobs), the sweeper, and closes the store. */
  close(options: { drainMs?: number } = {}): Promise<void> {
    return this.instance.close(options);
  }
}
