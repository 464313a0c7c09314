/**
 * The `ctx` a handler gets: the job's identity, its abort signal, a logger, progress (coalesced
 * by a ProgressReporter), its checkpoint, stages, and the job's files. Every store write made on
 * the handler's behalf is fenced by the attempt's lease and rides out a short outage; one that is
 * refused because the lease moved on aborts the attempt ('lease-lost').
 *
 * Most of it is made on first use (the logger, the reporter, the file handles, the signal): a
 * short job reads little of its ctx, and the worker makes one per job.
 */
import { jobLogFields } from '../core/log-fields.js';
import type { Logger } from 'pino';
import type { ResultsHandle, UploadsHandle } from '../blobs/handles.js';
import { NO_RESULTS, NO_UPLOADS } from '../blobs/job-files.js';
import type { JobBus } from '../channel/bus.js';
import { FatalError, LeaseLostError } from '../core/errors.js';
import { checkpointUsable } from '../core/lifecycle.js';
import { findUnstorableInValue, unstorableMessage } from '../core/storable.js';
import { runningNote } from '../core/transitions.js';
import type { CheckpointHandle, ChildrenView, TaskContext, TaskJobInfo } from '../task-api/define.js';
import { applyTransition } from '../transitions/apply.js';
import { type Active, cancelKindOf } from './attempt.js';
import { childrenView, type WorkflowHost, WorkflowRun } from '../workflow/run.js';
import type { NewJob, Store } from '../store/store.js';
import type { JobRecord } from '../core/job.js';
import type { ChildSpec } from '../task-api/children.js';
import { ProgressReporter } from './progress-reporter.js';
import type { StoreWriteRetry } from '../core/store-errors.js';
import { retryBudgetMs, withStoreRetry } from './store-retry.js';
import { isDeepJson, storedResult } from '../core/json-copy.js';

/** Blob storage for `ctx.results` and `ctx.uploads`; without it they throw BLOBS_UNAVAILABLE. */
export interface WorkerFiles {
  /**
   * The attempt's `ctx.results`; `onLeaseLost` is called when a record is refused because the
   * lease moved on; `retry` runs each store write through a short outage (see store-retry.ts).
   */
  results(job: { id: string; lease: number }, onLeaseLost: () => void, retry: StoreWriteRetry): ResultsHandle;
  uploads(tenant: string): UploadsHandle;
}

/** What spawning needs from the application (facade/instance.ts); without it ctx.spawn throws. */
export interface WorkerWorkflows {
  prepareChild(parent: JobRecord, spec: ChildSpec, now: number): NewJob | Promise<NewJob>;
  cancelChildren(parentId: string, now: number, reason: string): Promise<number>;
}

export interface ContextOptions {
  store: Store;
  workflows: WorkerWorkflows | undefined;
  bus: JobBus;
  /** The worker's logger (a job's is its child). */
  log: Logger;
  clock: () => number;
  workerId: string;
  files: WorkerFiles | undefined;
  /** Minimum ms between two progress events of one job on the bus. */
  progressPublishMs: number;
  /** Minimum ms between two progress writes of one job to the store. */
  progressPersistMs: number;
}

/** Makes each attempt's `ctx`. */
export class HandlerContexts {
  constructor(private readonly o: ContextOptions) {}

  /** The attempt's ctx (see `needsCheckpointNote` first). */
  make(active: Active): TaskContext {
    return this.build(active, true);
  }

  /** The attempt's progress reporter, made on its first report. */
  reporterOf(active: Active): ProgressReporter {
    if (active.reporter) return active.reporter;
    const { job } = active;
    const { bus, store, clock } = this.o;
    active.reporter = new ProgressReporter(
      job.progress.updatedAt === null ? null : job.progress,
      { publishMs: this.o.progressPublishMs, persistMs: this.o.progressPersistMs },
      {
        publish: (progress) =>
          bus.emit('job:progress', job.parentId ? { id: job.id, tenant: job.tenant, progress, parentId: job.parentId } : { id: job.id, tenant: job.tenant, progress }),
        persist: async (progress) => {
          const ok = await this.retryWrites(active)('progress', () => store.saveProgress({ id: job.id, lease: job.lease, progress, now: clock() }));
          if (!ok) active.abortState.abort('lease-lost');
        },
      },
      clock,
    );
    return active.reporter;
  }

  /** A saved checkpoint this attempt cannot use: unreadable, or from another checkpointVersion. */
  needsCheckpointNote(active: Active): boolean {
    const usable = checkpointUsable(active.job.checkpoint, active.task.checkpointVersion);
    return usable === 'version-mismatch' || (usable === 'usable' && active.job.checkpoint?.corrupt === true);
  }

  /** Writes a note in the running job's transition log (a saga's compensation steps); the lease lost aborts the attempt. */
  async note(active: Active, reason: string): Promise<void> {
    const { job } = active;
    const ok = await this.retryWrites(active)('log note', () => applyTransition(this.o.store, this.o.bus, job, runningNote(job, this.o.workerId, this.o.clock(), reason)));
    if (!ok) {
      active.abortState.abort('lease-lost');
      throw new LeaseLostError(job.id);
    }
  }

  /** Notes in the job's log why its checkpoint is ignored, then makes a ctx that starts over. */
  async makeAfterNote(active: Active): Promise<TaskContext> {
    const { job, task } = active;
    const why = job.checkpoint?.corrupt
      ? 'checkpoint unreadable; starting over'
      : `checkpoint version ${job.checkpoint?.version} does not match task version ${task.checkpointVersion}; starting over`;
    await this.retryWrites(active)('log note', () => applyTransition(this.o.store, this.o.bus, job, runningNote(job, this.o.workerId, this.o.clock(), why)));
    return this.build(active, false);
  }

  /** The attempt's workflow (journal and waits), made on first use. */
  workflowOf(active: Active): WorkflowRun {
    if (active.workflow) return active.workflow;
    const { store, bus, clock, workerId, workflows } = this.o;
    const { abortState } = active;
    const retry = this.retryWrites(active);
    const host: WorkflowHost = {
      store,
      bus,
      clock,
      workerId,
      prepareChild: (parent, spec, now) => {
        if (!workflows) throw new Error('ctx.spawn needs a worker started by Longhaul (lh.startWorker)');
        return workflows.prepareChild(parent, spec, now);
      },
      cancelChildren: async (parentId, now, reason) => (workflows ? await workflows.cancelChildren(parentId, now, reason) : 0),
      retry: (what, write) => retry(what, write),
      onSuspended: () => abortState.abort('suspended'),
      onCancelRequested: (reason) => abortState.abort(cancelKindOf(reason)),
      get signal() {
        return abortState.signal;
      },
      onLeaseLost: () => abortState.abort('lease-lost'),
    };
    active.workflow = new WorkflowRun(active.job, host);
    return active.workflow;
  }

  private build(active: Active, useCheckpoint: boolean): TaskContext {
    const { job, task } = active;
    const saved = useCheckpoint && job.checkpoint && !job.checkpoint.corrupt && job.checkpoint.version === task.checkpointVersion ? job.checkpoint.data : undefined;
    return new AttemptContext(active, saved, this.parts);
  }

  /** What every ctx does, for the attempt it is given: one object per worker, not closures per job. */
  private readonly parts: ContextParts = {
    saveCheckpoint: async (active, data) => {
      const { job, task, abortState } = active;
      // The user's data: refused (the handler sees why), never changed, when no store could keep it.
      const at = findUnstorableInValue(data, 'checkpoint');
      if (at) throw new FatalError(unstorableMessage(at), { code: 'UNSTORABLE_CHECKPOINT' });
      const ok = await this.retryWrites(active)('checkpoint', () =>
        this.o.store.saveCheckpoint({ id: job.id, lease: job.lease, checkpoint: { version: task.checkpointVersion, data }, now: this.o.clock() }),
      );
      if (!ok) {
        abortState.abort('lease-lost');
        throw new LeaseLostError(job.id);
      }
    },
    progress: (active, update) => this.reporterOf(active).update(update),
    stage: async (active, name, fn) => {
      this.reporterOf(active).update({ stage: name });
      const wf = this.workflowOf(active);
      const key = `ctx:${name}`;
      const saved = wf.journal.stages[key];
      if (saved) return saved.output as Awaited<ReturnType<typeof fn>>;
      const value = await wf.inScope(key, async () => await fn());
      // Saved only when the store can keep it as it is; otherwise the step runs again next time.
      const stored = storedResult(value);
      if (stored.ok && (value === undefined || isDeepJson(value, stored.value))) {
        wf.journal.stages[key] = { output: stored.value };
        await wf.save();
      }
      return value;
    },
    spawn: (active, children, options) => this.workflowOf(active).spawn(children, options?.failurePolicy ?? 'fail-fast'),
    sleep: (active, ms) => {
      if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return Promise.reject(new TypeError('sleep needs a non-negative number of ms'));
      return this.workflowOf(active).sleepUntil(this.o.clock() + ms);
    },
    sleepUntil: (active, time) => this.workflowOf(active).sleepUntil(new Date(time).getTime()),
    waitFor: (active, name, options) => this.workflowOf(active).waitFor(name, options?.timeoutMs),
    // A child logger per job costs more than a no-op job: made on first use, like the rest.
    log: (active) => this.o.log.child(jobLogFields(active.job)),
    children: (active) => childrenView(this.o.store, active.job),
    // Fenced by this attempt's lease: a refused record aborts the attempt.
    results: (active) =>
      this.o.files
        ? this.o.files.results(
            { id: active.job.id, lease: active.job.lease },
            () => active.abortState.abort('lease-lost'),
            this.retryWrites(active),
          )
        : NO_RESULTS,
    uploads: (active) => (this.o.files ? this.o.files.uploads(active.job.tenant) : NO_UPLOADS),
  };

  /**
   * Runs a store write made on the handler's behalf through a short outage: passing errors are
   * retried, logged, within half the job's heartbeat timeout, until the lease is known lost.
   */
  private retryWrites(active: Active): StoreWriteRetry {
    const { job, abortState } = active;
    return (what, write) =>
      withStoreRetry(write, {
        what,
        log: this.o.log,
        fields: { jobId: job.id, type: job.type, attempt: job.attempts, tenant: job.tenant },
        budgetMs: retryBudgetMs(job.heartbeatTimeoutMs),
        stopped: () => abortState.kind === 'lease-lost',
      });
  }
}

/** What a ctx does, for the attempt it names: HandlerContexts holds one set for all its ctxs. */
interface ContextParts {
  saveCheckpoint(active: Active, data: unknown): Promise<void>;
  progress(active: Active, update: Parameters<TaskContext['progress']>[0]): void;
  stage<T>(active: Active, name: string, fn: () => Promise<T> | T): Promise<T>;
  spawn(active: Active, ...args: Parameters<TaskContext['spawn']>): ReturnType<TaskContext['spawn']>;
  sleep(active: Active, ms: number): Promise<void>;
  sleepUntil(active: Active, time: Date | string | number): Promise<void>;
  waitFor(active: Active, name: string, options?: { timeoutMs?: number }): Promise<unknown>;
  log(active: Active): Logger;
  children(active: Active): ChildrenView;
  results(active: Active): ResultsHandle;
  uploads(active: Active): UploadsHandle;
}

/**
 * `ctx.job`. Classes, not object literals with getters: V8 makes a literal's accessors one by one
 * on every creation, which cost about 1.9 µs per ctx against 0.15 µs here (a no-op job's whole
 * cost is a few tens of µs).
 */
class JobInfoView implements TaskJobInfo {
  readonly id: string;
  readonly type: string;
  readonly tenant: string;
  readonly metadata: Record<string, unknown> | null;
  readonly maxAttempts: number;
  readonly #createdAt: number;

  constructor(job: JobRecord) {
    this.id = job.id;
    this.type = job.type;
    this.tenant = job.tenant;
    this.metadata = job.metadata;
    this.maxAttempts = job.maxAttempts;
    this.#createdAt = job.createdAt;
  }

  get createdAt(): string {
    return new Date(this.#createdAt).toISOString();
  }
}

/** `ctx.checkpoint`: the usable saved value, replaced by each successful save. */
class CheckpointView implements CheckpointHandle {
  #value: unknown;
  readonly save: (data: unknown) => Promise<void>;

  constructor(value: unknown, write: (data: unknown) => Promise<void>) {
    this.#value = value;
    this.save = async (data: unknown) => {
      await write(data);
      this.#value = data;
    };
  }

  get value(): unknown {
    return this.#value;
  }
}

/**
 * The `ctx` a handler gets: one object per attempt. Each part is made on its first read (a no-op
 * job reads none), and a method is a function bound to this attempt, made once, so
 * `const { progress } = ctx` works and `ctx.progress === ctx.progress`.
 */
class AttemptContext implements TaskContext {
  readonly attempt: number;
  readonly #active: Active;
  readonly #saved: unknown;
  readonly #parts: ContextParts;
  #job: JobInfoView | undefined;
  #checkpoint: CheckpointView | undefined;
  #progress: TaskContext['progress'] | undefined;
  #stage: TaskContext['stage'] | undefined;
  #spawn: TaskContext['spawn'] | undefined;
  #sleep: TaskContext['sleep'] | undefined;
  #sleepUntil: TaskContext['sleepUntil'] | undefined;
  #waitFor: TaskContext['waitFor'] | undefined;
  #log: Logger | undefined;
  #children: ChildrenView | undefined;
  #results: ResultsHandle | undefined;
  #uploads: UploadsHandle | undefined;

  /** `saved`: the checkpoint this attempt starts from (undefined: none usable). */
  constructor(active: Active, saved: unknown, parts: ContextParts) {
    this.attempt = active.job.attempts;
    this.#active = active;
    this.#saved = saved;
    this.#parts = parts;
  }

  get job(): JobInfoView {
    this.#job ??= new JobInfoView(this.#active.job);
    return this.#job;
  }

  get signal(): AbortSignal {
    return this.#active.abortState.signal;
  }

  get checkpoint(): CheckpointView {
    this.#checkpoint ??= new CheckpointView(this.#saved, (data) => this.#parts.saveCheckpoint(this.#active, data));
    return this.#checkpoint;
  }

  get progress(): TaskContext['progress'] {
    this.#progress ??= (update) => this.#parts.progress(this.#active, update);
    return this.#progress;
  }

  get stage(): TaskContext['stage'] {
    this.#stage ??= (name, fn) => this.#parts.stage(this.#active, name, fn);
    return this.#stage;
  }

  get spawn(): TaskContext['spawn'] {
    this.#spawn ??= (children, options) => this.#parts.spawn(this.#active, children, options);
    return this.#spawn;
  }

  get sleep(): TaskContext['sleep'] {
    this.#sleep ??= (ms) => this.#parts.sleep(this.#active, ms);
    return this.#sleep;
  }

  get sleepUntil(): TaskContext['sleepUntil'] {
    this.#sleepUntil ??= (time) => this.#parts.sleepUntil(this.#active, time);
    return this.#sleepUntil;
  }

  get waitFor(): TaskContext['waitFor'] {
    this.#waitFor ??= (<T>(name: string, options?: { timeoutMs?: number }) => this.#parts.waitFor(this.#active, name, options) as Promise<T>) as TaskContext['waitFor'];
    return this.#waitFor;
  }

  get log(): Logger {
    this.#log ??= this.#parts.log(this.#active);
    return this.#log;
  }

  get children(): ChildrenView {
    this.#children ??= this.#parts.children(this.#active);
    return this.#children;
  }

  get results(): ResultsHandle {
    this.#results ??= this.#parts.results(this.#active);
    return this.#results;
  }

  get uploads(): UploadsHandle {
    this.#uploads ??= this.#parts.uploads(this.#active);
    return this.#uploads;
  }
}
