/**
 * The worker: claims jobs in batches up to a concurrency limit, runs their handlers with a
 * `ctx`, keeps their leases alive, and writes each outcome as one fenced transition.
 *
 * It is made of parts that each hold one concern: the claim loop (claim-loop.ts) writes claims
 * and outcomes, lease upkeep (lease-upkeep.ts) heartbeats, polls for cancel requests and keeps
 * timeouts, the handler context (context.ts) is what a handler sees, and the outcome of an
 * attempt is decided by pure functions (outcome.ts). This class ties them together: it starts
 * and stops them, and runs each job from its claim to its outcome.
 *
 * Idle workers wake on an in-process event (a submit in this process) or on a cheap change
 * poll of the store (another process wrote), never by re-running the claim query blindly.
 */
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { JobBus } from '../channel/bus.js';
import { uuidv7 } from '../core/ids.js';
import { Outage, type OutageLine } from '../core/outage.js';
import type { JobRecord } from '../core/job.js';
import { hasUnstorable } from '../core/storable.js';
import type { Store, TenantCaps } from '../store/store.js';
import type { Task } from '../task-api/define.js';
import { type Active, Attempts, cancelKindOf, newActive } from './attempt.js';
import { logFailedAttempt } from './attempt-end.js';
import { ClaimLoop, type ClaimLoopHost } from './claim-loop.js';
import { HandlerContexts, type WorkerFiles, type WorkerWorkflows } from './context.js';
import { LeaseUpkeep } from './lease-upkeep.js';
import { AttemptSpans } from '../telemetry/attempt-spans.js';
import { sleepLong } from './long-timer.js';
import { closeIsolated, runIsolated } from './isolation/index.js';
import type { TaskContext } from '../task-api/define.js';
import { runSaga } from '../workflow/saga.js';
import { runStages } from '../workflow/stages.js';
import { deletedOnEnd, type RetentionPolicy } from '../core/retention.js';
import { abandonedOutcome, decideOutcome, type HandlerResult, leftoverOutcome, type OutcomeWorker, sagaOutcome } from './outcome.js';
import { StuckHandlers, type WorkerHealth } from './stuck-handlers.js';
import { jobLogFields } from '../core/log-fields.js';

export type { WorkerFiles, WorkerWorkflows } from './context.js';
export type { WorkerHealth } from './stuck-handlers.js';

export interface WorkerDefaults {
  heartbeatIntervalMs: number;
  resultTtlMs: number;
}

export interface WorkerOptions {
  store: Store;
  files?: WorkerFiles;
  /** What ctx.spawn needs (building child rows, cancelling children); without it ctx.spawn throws. */
  workflows?: WorkerWorkflows;
  bus: JobBus;
  tasks: ReadonlyMap<string, Task>;
  logger: Logger;
  defaults: WorkerDefaults;
  /** Priority aging (ms per level; null: strict) and tenant running caps, applied by every claim. Default: 5 min aging, no caps. */
  claimRules?: { agingMs: number | null; tenantCaps?: TenantCaps | undefined };
  /** Jobs run at once by this worker. Default 10. */
  concurrency?: number;
  /**
   * Most jobs claimed ahead of free slots, held until a slot frees (they are `running` in the
   * store, leased and heartbeated, from their claim). How many are claimed ahead adapts: about
   * as many as the handlers finish during one store round trip, so a job waits locally for
   * about one round trip at most, and slow handlers get none. 0 turns it off. Default
   * 100 on SQLite (a longer cycle would hold up this process), max(500, 10 × concurrency) on
   * PostgreSQL.
   */
  claimAhead?: number;
  /**
   * How long a job claimed ahead may wait for a slot. The estimate behind claiming ahead can be
   * wrong (slow handlers taking the slots after a run of quick ones): jobs still waiting after
   * this long go back to the queue for any worker, and this worker claims only for its free
   * slots for a while. Default 1000 ms.
   */
  claimedWaitMs?: number;
  workerId?: string;
  /** How often an idle worker asks the store whether anything changed. Default 50 ms. */
  pollIntervalMs?: number;
  /** Even without a change signal, try a claim this often (delayed jobs coming due). Default 1000 ms. */
  maxIdleMs?: number;
  /** How often running jobs are checked for cancel requests made by other processes. Default 500 ms. */
  cancelPollMs?: number;
  /** Minimum ms between two progress writes of one job to the store. Default 250. */
  progressIntervalMs?: number;
  /** Minimum ms between two progress events of one job on the in-process bus (live streams). Default 50. */
  progressPublishMs?: number;
  clock?: () => number;
  /**
   * How long a handler may go on after its signal fired for a cancel, a timeout or a lost lease
   * before the worker abandons it and frees its slot (stuck-handlers.ts). The instance passes
   * its cancel drain period plus one sweep interval. Default 31 000 ms.
   */
  abandonAfterMs?: number;
  /** Abandoned handlers still pending past which the worker reports itself unhealthy. Default 10. */
  maxAbandonedHandlers?: number;
  /**
   * The instance's retention. A job whose period for the state it ends in is 0 (its task's own,
   * else this) is deleted by the write that ends it, in the same transaction, when it owns no
   * result files, webhook, parent or children (TransitionParams.deleteOnEnd); others are left to
   * the eraser. Absent: no job is deleted so.
   */
  retention?: RetentionPolicy;
}

export interface WorkerStats {
  claimed: number;
  succeeded: number;
  failed: number;
  retried: number;
  cancelled: number;
  handedBack: number;
  /** Completions refused because the lease had moved on. */
  refused: number;
  /** Attempts that ended with their job waiting (ctx.spawn, sleep, waitFor). */
  suspended: number;
  /** Handlers abandoned: they ignored their signal past the drain period after their job ended (stuck-handlers.ts). */
  abandoned: number;
}

export class Worker {
  readonly id: string;
  readonly stats: WorkerStats = { claimed: 0, succeeded: 0, failed: 0, retried: 0, cancelled: 0, handedBack: 0, refused: 0, suspended: 0, abandoned: 0 };
  private readonly bus: JobBus;
  private readonly tasks: ReadonlyMap<string, Task>;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly attempts = new Attempts();
  private readonly loop: ClaimLoop;
  private readonly upkeep: LeaseUpkeep;
  private readonly contexts: HandlerContexts;
  /** Attempt spans, when the application registered an OpenTelemetry SDK (src/telemetry). */
  private readonly spans: AttemptSpans;
  /** What outcomes read of this worker (one object, not one per job). */
  private readonly self: OutcomeWorker;
  /** Handlers that ignore their signal after their job ended, abandoned after the drain period. */
  private readonly stuck: StuckHandlers;
  /** Jobs being ended by settleLeftovers (shutdown). */
  private readonly leaving = new Set<Active>();
  private readonly claimedWaitMs: number;
  private started = false;
  private timers: NodeJS.Timeout[] = [];
  /** The one ref'd handle: a started worker keeps its process alive until stop(). */
  private keepAlive: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void)[] = [];

  constructor(private readonly options: WorkerOptions) {
    const store: Store = options.store;
    this.bus = options.bus;
    this.tasks = options.tasks;
    const concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new TypeError('concurrency must be a positive integer');
    this.clock = options.clock ?? Date.now;
    this.claimedWaitMs = options.claimedWaitMs ?? 1000;
    // Bigger batches cost less per job, but a SQLite cycle blocks this process while it runs.
    const claimTypes = [...this.tasks.values()].map((t) => ({ type: t.type, concurrency: t.concurrency, keyConcurrency: t.keyConcurrency, rateLimit: t.rateLimit }));
    // A job claimed ahead counts against its key's and its type's rate limit while it waits
    // for a slot: a worker running such tasks claims for its free slots only.
    const gated = claimTypes.some((t) => t.keyConcurrency !== undefined || t.rateLimit !== undefined);
    const claimAheadMax = gated ? 0 : (options.claimAhead ?? (store.capabilities.claimDepth > 1 ? Math.max(500, 10 * concurrency) : 100));
    if (!Number.isInteger(claimAheadMax) || claimAheadMax < 0) throw new TypeError('claimAhead must be a non-negative integer');
    this.id = options.workerId ?? `${hostname()}:${process.pid}:${uuidv7().slice(-8)}`;
    if (typeof this.id !== 'string' || this.id === '' || hasUnstorable(this.id)) throw new TypeError('workerId must be a non-empty string without U+0000 or lone surrogates');
    this.log = options.logger.child({ workerId: this.id });
    this.self = { id: this.id, resultTtlMs: options.defaults.resultTtlMs };
    // Methods the loop calls back (private: they are no part of the Worker's API).
    const host: ClaimLoopHost = {
      begin: (job) => this.begin(job),
      run: (active) => void this.execute(active),
      settleLeftovers: (list, why) => this.settleLeftovers(list, why),
    };
    const shared = { store, bus: this.bus, log: this.log, clock: this.clock, workerId: this.id, attempts: this.attempts };
    this.loop = new ClaimLoop({
      ...shared,
      stats: this.stats,
      host,
      concurrency,
      claimTypes,
      claimRules: options.claimRules,
      claimAheadMax,
      claimedWaitMs: this.claimedWaitMs,
    });
    this.stuck = new StuckHandlers({ log: this.log, bus: this.bus, abandonAfterMs: options.abandonAfterMs ?? 31_000, maxPending: options.maxAbandonedHandlers ?? 10 });
    this.upkeep = new LeaseUpkeep({ ...shared, heartbeatIntervalMs: options.defaults.heartbeatIntervalMs });
    this.spans = new AttemptSpans(store);
    this.contexts = new HandlerContexts({
      store,
      workflows: options.workflows,
      bus: this.bus,
      log: this.log,
      clock: this.clock,
      workerId: this.id,
      files: options.files,
      progressPublishMs: options.progressPublishMs ?? 50,
      progressPersistMs: options.progressIntervalMs ?? 250,
    });
  }

  get runningCount(): number {
    return this.attempts.size;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    const poll = this.options.pollIntervalMs ?? 50;
    const maxIdle = this.options.maxIdleMs ?? 1000;
    this.unsubscribe.push(
      this.bus.on('job:submitted', ({ job }) => {
        if (this.tasks.has(job.type)) this.wake();
      }),
      this.bus.on('job:changed', ({ type, to }) => {
        if (to === 'queued' && this.tasks.has(type)) this.wake();
      }),
      this.bus.on('jobs:promoted', () => this.wake()),
      // Another process's submission, retry, promotion or child end (PostgreSQL NOTIFY): claim
      // now, not at the next poll. The poll stays as the safety net (and is all SQLite has).
      this.options.store.onChanges?.(() => void this.loop.pollForWork(maxIdle).catch(() => undefined)) ?? (() => undefined),
      // Also this worker's own timeout requests (lease-upkeep.ts): the first abort wins.
      this.bus.on('job:cancel-requested', ({ id, reason }) => this.attempts.abortJob(id, cancelKindOf(reason))),
    );
    this.every('work poll', poll, () => this.loop.pollForWork(maxIdle));
    const heartbeatTick = Math.min(1000, ...[...this.tasks.values()].map((t) => t.heartbeatIntervalMs ?? this.options.defaults.heartbeatIntervalMs));
    this.every('heartbeat', heartbeatTick, () => this.upkeep.heartbeat());
    this.every('claimed-ahead check', Math.max(10, Math.min(250, this.claimedWaitMs / 4)), () => this.loop.returnStaleReady());
    this.every('cancel poll', this.options.cancelPollMs ?? 500, () => this.upkeep.pollCancels());
    this.every('stuck-handler check', this.stuck.checkEveryMs, () => this.abandonStuck());
    // Every timer above is unref'd; without this a worker-only process (`longhaul worker`, or a
    // script that just starts a worker) would exit as soon as it has nothing running.
    this.keepAlive = setInterval(() => undefined, 2 ** 30);
    this.wake();
  }

  /**
   * Runs `fn` every `ms` (never two at once). A database outage fails most of these at every
   * tick: it is logged when it starts and when it ends, per task (core/outage.ts).
   */
  private every(task: string, ms: number, fn: () => Promise<void> | void): void {
    let busy = false;
    const outage = new Outage(`worker ${task}`);
    const log = (line: OutageLine | null) => {
      if (line) this.log[line.level](line.fields, line.msg);
    };
    const t = setInterval(() => {
      if (busy) return;
      busy = true;
      Promise.resolve()
        .then(fn)
        .then(
          () => log(outage.succeeded(Date.now())),
          (err) => log(outage.failed(err, Date.now(), 'worker background task failed')),
        )
        .finally(() => {
          busy = false;
        });
    }, ms);
    t.unref?.();
    this.timers.push(t);
  }

  /** Asks the loop to claim (coalesced). */
  wake(): void {
    this.loop.wake();
  }

  // ---- one job, from its claim to its outcome ----------------------------------------------

  /** Takes on a job the claim loop claimed: its lease is kept, its timeout armed. */
  private begin(job: JobRecord): Active | null {
    const task = this.tasks.get(job.type);
    if (!task) return null; // cannot happen: we only claim our own types
    const active = newActive(job, task, this.upkeep.nextHeartbeat({ task }, this.clock()));
    this.attempts.add(active);
    // A claim, written by the store in bulk (not a built transition): announced here.
    this.bus.emit('job:changed', { id: job.id, tenant: job.tenant, type: job.type, from: 'queued', to: 'running', reason: 'claimed' });
    this.upkeep.armTimeout(active);
    if (job.cancelRequested) active.abortState.abort(cancelKindOf(job.cancelReason));
    this.spans.claimed(job);
    return active;
  }

  private async execute(active: Active): Promise<void> {
    const { job } = active;
    let result: HandlerResult;
    const t0 = performance.now();
    active.startedAt = t0;
    // No await on the hot path when tracing is off (nothing was read for the job).
    const span = this.spans.reading(job.id) ? await this.spans.start(job) : null;
    active.span = span;
    try {
      const ctx = this.contexts.needsCheckpointNote(active) ? await this.contexts.makeAfterNote(active) : this.contexts.make(active);
      const value = await this.spans.run(span, () => this.runHandler(active, ctx));
      result = { ok: true, value };
    } catch (error) {
      result = { ok: false, error };
    }
    active.returned = true;
    // Returned after the worker gave up on it: its attempt was ended without it.
    if (active.abandoned) return this.stuck.returned(active);
    await this.endAttempt(active, result, performance.now() - t0);
  }

  /** The handler returned, threw, or was abandoned (`result` then is its signal's error): frees its slot and writes the outcome. */
  private async endAttempt(active: Active, result: HandlerResult, ms: number): Promise<void> {
    const { job, task, span } = active;
    // The handler is done: its slot goes to the next waiting job; the outcome is written by the loop.
    this.loop.handlerDone(ms);
    active.timeoutTimer?.cancel();
    if (active.settled) {
      this.spans.end(span, 'retrying');
      return; // handed back at shutdown: the transition is already written
    }
    const kind = active.abortState.kind;
    if (active.reporter) await active.reporter.close(kind !== 'lease-lost' && kind !== 'suspended');
    if (kind === 'lease-lost' || kind === 'suspended') this.spans.end(span, kind);
    if (kind === 'lease-lost') return this.loop.discard(active);
    if (kind === 'suspended') {
      // The job is waiting: store.suspend wrote (and announced) it; nothing more to write.
      this.stats.suspended++;
      return this.loop.release(active);
    }
    const now = this.clock();
    let outcome =
      active.abandoned && (kind === 'cancelled' || kind === 'timeout') ? abandonedOutcome(job, this.self, kind, now) : decideOutcome(job, task, this.self, result, kind, now);
    if (task.steps && active.workflow) outcome = sagaOutcome(outcome, job, active.workflow.journal, now);
    if (this.options.retention && deletedOnEnd(this.options.retention, task.retention, outcome.write.to)) outcome.write = { ...outcome.write, deleteOnEnd: true };
    const f = outcome.failure;
    if (f !== null) logFailedAttempt(this.log, job, f.thrown, f.error, f.next, f.runAt);
    this.spans.end(span, outcome.write.to, f === null ? undefined : f.thrown);
    this.loop.settle(active, outcome);
  }

  /** Ends the attempts whose handlers ignored their signal past the drain period (stuck-handlers.ts). */
  private abandonStuck(): void {
    const now = performance.now();
    for (const active of this.stuck.due(this.attempts.values(), now)) {
      this.stuck.abandon(active, now);
      this.stats.abandoned++;
      void this.endAttempt(active, { ok: false, error: active.abortState.reason }, now - active.startedAt).catch((err) =>
        this.log.error({ err, ...jobLogFields(active.job) }, 'could not end an abandoned attempt'),
      );
    }
  }

  /** This worker's health: unhealthy past `maxAbandonedHandlers` abandoned handlers still pending. */
  get health(): WorkerHealth {
    return this.stuck.health;
  }

  /** The task's handler (in a thread of its own when the task asks for isolation), its pipeline (stages) or its saga (steps). */
  private runHandler(active: Active, ctx: TaskContext): Promise<unknown> | unknown {
    const { job, task } = active;
    if (task.isolation) return runIsolated(this, active, ctx, { log: this.log, concurrency: this.options.concurrency ?? 10 });
    if (task.run) return task.run(job.input, ctx);
    const wf = this.contexts.workflowOf(active);
    if (task.stages) return runStages(task, job.input, ctx, wf);
    return runSaga(task, job, job.input, ctx, wf, { note: (reason) => this.contexts.note(active, reason) });
  }

  // ---- shutdown --------------------------------------------------------------------------

  /**
   * Graceful stop: claim nothing more, let running jobs finish for up to `drainMs`, then
   * abort the rest and hand them back at once (retrying, due now, the attempt refunded),
   * so another worker picks them up without waiting for a heartbeat timeout.
   */
  async stop(options: { drainMs?: number } = {}): Promise<void> {
    if (!this.started) return;
    const loop = this.loop;
    loop.stopClaiming();
    // Jobs claimed ahead and not started go back at once, without waiting for the drain.
    const waiting = loop.takeReady();
    if (waiting.length > 0) {
      await this.settleLeftovers(waiting);
      loop.schedulePump();
    }
    if (loop.busy) await Promise.race([loop.idle(), sleepLong(options.drainMs ?? 10_000)]);
    const leftovers = [...this.attempts.values()].filter((a) => !a.settled);
    if (leftovers.length > 0) await this.settleLeftovers(leftovers);
    while (loop.pumping) await new Promise((r) => setTimeout(r, 5));
    try {
      await loop.flushOutcomes();
    } finally {
      // Even if the last write failed: a stopped worker must not keep the process alive.
      for (const t of this.timers) clearInterval(t);
      if (this.keepAlive) clearInterval(this.keepAlive);
      this.keepAlive = null;
      for (const u of this.unsubscribe) u();
      this.timers = [];
      this.unsubscribe = [];
      this.attempts.clear();
      this.leaving.clear();
      closeIsolated(this);
    }
  }

  /**
   * Ends jobs without their handler, at shutdown or when claimed ahead and not started
   * in time: a job whose cancel was requested (here, or by another process and not yet seen)
   * ends cancelled, the others are handed back (see `leftoverOutcome`).
   */
  private async settleLeftovers(all: Active[], why: 'shutdown' | 'no free slot' = 'shutdown'): Promise<void> {
    for (const a of all) this.spans.forget(a.job.id);
    // Jobs another call is already ending (a claim returning during stop(), then the drain's
    // end) are left to it: two hand-backs of one lease would be one too many.
    const leftovers = all.filter((a) => !a.settled && !this.leaving.has(a));
    for (const a of leftovers) this.leaving.add(a);
    const requested = await this.upkeep.cancelRequests(leftovers);
    const now = this.clock();
    for (const [i, a] of leftovers.entries()) {
      this.leaving.delete(a);
      if (a.settled) continue; // finished meanwhile: its own outcome is queued
      const seen = a.abortState.kind;
      const cancel = seen === 'cancelled' || seen === 'timeout' ? seen : (requested[i] ?? null);
      a.settled = true;
      if (!a.started) a.timeoutTimer?.cancel();
      a.abortState.abort('shutdown');
      await a.reporter?.close(true);
      this.loop.queue(a, leftoverOutcome(a.job, this.self, now, cancel, why));
    }
  }

  /** Resolves when nothing is running or waiting to be written (tests, benchmarks). */
  idle(): Promise<void> {
    return this.loop.idle();
  }
}
