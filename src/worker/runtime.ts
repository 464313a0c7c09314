/**
 * The worker runtime: claims jobs in batches up to a concurrency limit, runs their handlers
 * with a `ctx`, keeps their leases alive, and writes each outcome as one fenced transition.
 *
 * One loop (`pump`) does all store writes for claims and completions, so completions that
 * land together are written in one transaction and the freed slots are refilled right after.
 * With a store behind a round trip (PostgreSQL) it keeps two such cycles in flight, and it
 * claims a little ahead (see `claimAhead`), so that jobs run while the next cycle is written.
 * Idle workers wake on an in-process event (a submit in this process) or on a cheap change
 * poll of the store (another process wrote), never by re-running the claim query blindly.
 */
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { ResultsHandle, UploadsHandle } from '../blobs/handles.js';
import { NO_RESULTS, NO_UPLOADS } from '../blobs/job-files.js';
import { classifyError, FatalError, type JobError, LeaseLostError } from '../core/errors.js';
import { uuidv7 } from '../core/ids.js';
import type { JobRecord } from '../core/job.js';
import { checkpointUsable, decideAfterFailure } from '../core/lifecycle.js';
import type { JobState } from '../core/states.js';
import { findUnstorableInValue, hasUnstorable, unstorableMessage } from '../core/storable.js';
import { isTransientStoreError } from '../core/store-errors.js';
import type { JobBus } from '../channel/bus.js';
import type { Store, TransitionParams } from '../store/store.js';
import type { Task, TaskContext } from '../tasks/define.js';
import { type AbortKind, AttemptAbort } from './abort.js';
import { logFailedAttempt, storedResult } from './attempt-end.js';
import { type LongTimer, longTimeout, sleepLong } from './long-timer.js';
import { writeEachAlone } from './outcome-isolation.js';
import { ProgressReporter } from './progress-reporter.js';
import { retryBudgetMs, type StoreWriteRetry, withStoreRetry } from './store-retry.js';

export interface WorkerDefaults {
  heartbeatIntervalMs: number;
  resultTtlMs: number;
}

/** Blob storage for `ctx.results` and `ctx.uploads`; without it they throw BLOBS_UNAVAILABLE. */
export interface WorkerFiles {
  /**
   * The attempt's `ctx.results`; `onLeaseLost` is called when a record is refused because the
   * lease moved on; `retry` runs each store write through a short outage (see store-retry.ts).
   */
  results(job: { id: string; lease: number }, onLeaseLost: () => void, retry: StoreWriteRetry): ResultsHandle;
  uploads(tenant: string): UploadsHandle;
}

export interface WorkerOptions {
  store: Store;
  files?: WorkerFiles;
  bus: JobBus;
  tasks: ReadonlyMap<string, Task>;
  logger: Logger;
  defaults: WorkerDefaults;
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
}

interface Active {
  job: JobRecord;
  task: Task;
  /** Its abort state (`ctx.signal` is made from it on first read). */
  abortState: AttemptAbort;
  /** Made on the first progress report: most jobs' contexts never need one. */
  reporter: ProgressReporter | null;
  nextHeartbeatAt: number;
  timeoutTimer: LongTimer | null;
  /** Set once the job's outcome is queued for writing (or it was handed back). */
  settled: boolean;
  /** Its handler was started (jobs claimed ahead wait in `ready` until a slot frees). */
  started: boolean;
  /** performance.now() when this worker got it (for how long it waits for a slot). */
  claimedAt: number;
}

interface Outcome {
  params: TransitionParams;
  active: Active;
  kind: keyof WorkerStats;
}

/** Exponential moving average (new samples weigh 1/4); the first sample starts it. */
function average(prev: number, sample: number): number {
  return Number.isNaN(prev) ? sample : prev + (sample - prev) / 4;
}

function leaseKey(job: JobRecord): string {
  return `${job.id}#${job.lease}`;
}

export class Worker {
  readonly id: string;
  readonly stats: WorkerStats = { claimed: 0, succeeded: 0, failed: 0, retried: 0, cancelled: 0, handedBack: 0, refused: 0 };
  private readonly store: Store;
  private readonly bus: JobBus;
  private readonly tasks: ReadonlyMap<string, Task>;
  private readonly log: Logger;
  private readonly concurrency: number;
  private readonly clock: () => number;
  private readonly claimTypes: { type: string; concurrency: number | undefined }[];
  /**
   * Running attempts by `leaseKey`: after a lease is lost and the job re-claimed, this worker may
   * run a stale attempt and a new one of the same job at once; each must keep its own entry.
   */
  private readonly active = new Map<string, Active>();
  /** How many entries of `active` each job id has (more than one only after a lease was lost). */
  private readonly attemptsById = new Map<string, number>();
  /** Jobs being ended by settleLeftovers (shutdown). */
  private readonly leaving = new Set<Active>();
  /** Claimed jobs whose handler has not started yet, oldest first (from `readyHead` on). */
  private ready: Active[] = [];
  private readyHead = 0;
  /** Handlers started and not finished: at most `concurrency`. */
  private running = 0;
  private readonly claimAheadMax: number;
  /** Moving averages (ms) of a handler's run time and of a store cycle; NaN until measured. */
  private handlerMs = Number.NaN;
  private readonly claimedWaitMs: number;
  /** performance.now() until which nothing is claimed ahead (after jobs waited too long for a slot). */
  private aheadPausedUntil = 0;
  private cycleMs = Number.NaN;
  private outcomes: Outcome[] = [];
  /** Store cycles being written, and the jobs they claim (not yet in `ready`). */
  private inFlight = 0;
  private claiming = 0;
  /** 1 for a store written in-process (SQLite), 2 for one behind a round trip. */
  private readonly maxInFlight: number;
  private pumpScheduled = false;
  /** Set after a failed cycle until its back-off ends. */
  private pumpHeld = false;
  private wanted = true;
  private stopping = false;
  private started = false;
  private lastClaimAt = 0;
  private timers: NodeJS.Timeout[] = [];
  /** The one ref'd handle: a started worker keeps its process alive until stop(). */
  private keepAlive: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void)[] = [];
  private idleWaiters: (() => void)[] = [];
  private pumpFailures = 0;

  constructor(private readonly options: WorkerOptions) {
    this.store = options.store;
    this.bus = options.bus;
    this.tasks = options.tasks;
    this.concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new TypeError('concurrency must be a positive integer');
    this.clock = options.clock ?? Date.now;
    this.maxInFlight = this.store.capabilities.claimDepth;
    // Bigger batches cost less per job, but a SQLite cycle blocks this process while it runs.
    this.claimedWaitMs = options.claimedWaitMs ?? 1000;
    this.claimAheadMax = options.claimAhead ?? (this.maxInFlight > 1 ? Math.max(500, 10 * this.concurrency) : 100);
    if (!Number.isInteger(this.claimAheadMax) || this.claimAheadMax < 0) throw new TypeError('claimAhead must be a non-negative integer');
    this.id = options.workerId ?? `${hostname()}:${process.pid}:${uuidv7().slice(-8)}`;
    if (typeof this.id !== 'string' || this.id === '' || hasUnstorable(this.id)) throw new TypeError('workerId must be a non-empty string without U+0000 or lone surrogates');
    this.log = options.logger.child({ workerId: this.id });
    this.claimTypes = [...this.tasks.values()].map((t) => ({ type: t.type, concurrency: t.concurrency }));
  }

  get runningCount(): number {
    return this.active.size;
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
      this.bus.on('job:cancel-requested', ({ id, reason }) => this.abortLocal(id, reason === 'timeout' ? 'timeout' : 'cancelled')),
    );
    this.every(poll, async () => {
      if (this.running + this.readyCount >= this.concurrency) return;
      if ((await this.store.pollChanges()) || this.clock() - this.lastClaimAt >= maxIdle) this.wake();
    });
    const heartbeatTick = Math.min(1000, ...[...this.tasks.values()].map((t) => t.heartbeatIntervalMs ?? this.options.defaults.heartbeatIntervalMs));
    this.every(heartbeatTick, () => this.heartbeat());
    this.every(Math.max(10, Math.min(250, this.claimedWaitMs / 4)), () => this.returnStaleReady());
    this.every(this.options.cancelPollMs ?? 500, () => this.pollCancels());
    // Every timer above is unref'd; without this a worker-only process (`longhaul worker`, or a
    // script that just starts a worker) would exit as soon as it has nothing running.
    this.keepAlive = setInterval(() => undefined, 2 ** 30);
    this.wake();
  }

  private every(ms: number, fn: () => Promise<void> | void): void {
    let busy = false;
    const t = setInterval(() => {
      if (busy) return;
      busy = true;
      Promise.resolve()
        .then(fn)
        .catch((err) => this.log.error({ err }, 'worker background task failed'))
        .finally(() => {
          busy = false;
        });
    }, ms);
    t.unref?.();
    this.timers.push(t);
  }

  /** Asks the loop to claim (coalesced). */
  wake(): void {
    this.wanted = true;
    this.schedulePump();
  }

  private schedulePump(): void {
    if (this.pumpScheduled || this.pumpHeld) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** True while a cycle is being written or about to start. */
  private get pumping(): boolean {
    return this.inFlight > 0 || this.pumpScheduled;
  }

  /**
   * Starts store cycles (completions + claim) while there is something to write or room to
   * claim, up to `maxInFlight` at once: with a store behind a round trip, the next cycle is
   * written while this process runs the jobs of the last one.
   */
  private pump(): void {
    while (!this.pumpHeld && this.inFlight < this.maxInFlight && this.startCycle());
    if (!this.pumping && this.active.size === 0 && this.outcomes.length === 0) for (const w of this.idleWaiters.splice(0)) w();
  }

  private startCycle(): boolean {
    const batch = this.outcomes;
    const ahead = this.claimAheadTarget();
    // Slots free when a handler finishes; jobs claimed ahead wait in `ready`. Each cycle claims
    // at most a slot-full plus one cycle's worth ahead; cycles in flight count as claimed.
    const free = Math.min(this.concurrency + ahead, this.concurrency + ahead * this.maxInFlight - this.running - this.readyCount - this.claiming);
    // While another cycle is in flight, a small one would only add a commit: what is there now
    // goes with the next full one, or when the cycle in flight returns.
    if (this.inFlight > 0 && free < (this.concurrency + ahead) / 2) return false;
    const claim = !this.stopping && free > 0 && (this.wanted || batch.length > 0);
    if (batch.length === 0 && !claim) return false;
    this.outcomes = [];
    const limit = claim ? free : 0;
    if (claim) {
      this.wanted = false;
      this.lastClaimAt = this.clock();
    }
    this.inFlight++;
    this.claiming += limit;
    void this.cycle(batch, limit);
    return true;
  }

  private async cycle(batch: Outcome[], limit: number): Promise<void> {
    const clock = this.clock;
    const t0 = performance.now();
    let jobs: JobRecord[] = [];
    try {
      const res = await this.store.completeAndClaim({
        complete: batch.map((o) => o.params),
        // A getter: the store reads it inside its transaction, after any wait for the write
        // lock, so a lease never starts before the claim was actually made.
        claim: {
          workerId: this.id,
          types: this.claimTypes,
          limit,
          get now() {
            return clock();
          },
        },
      });
      jobs = res.jobs;
      if (limit > 0) this.cycleMs = average(this.cycleMs, performance.now() - t0);
      this.afterOutcomes(batch, res.applied);
      this.stats.claimed += jobs.length;
      // A full batch means more may be waiting: claim again as soon as slots free up.
      if (limit > 0 && jobs.length === limit) this.wanted = true;
      this.pumpFailures = 0;
    } catch (err) {
      // The transaction rolled back: nothing was completed or claimed.
      if (batch.length > 0 && !isTransientStoreError(err)) {
        // Refused, not unreachable: one job's data may be the cause. Each outcome is written
        // alone (a job whose own outcome is refused is failed instead), then the loop goes on.
        this.log.error({ err, outcomes: batch.length }, 'the store refused a worker cycle; writing each outcome alone');
        const again = await this.writeAlone(batch);
        if (again.length > 0) this.holdPump(again, null);
        this.wanted = true;
      } else {
        // Keep the outcomes for the next pass (dropping them would leave their jobs running
        // without heartbeats until reaped).
        this.holdPump(batch, err);
      }
    } finally {
      this.inFlight--;
      this.claiming -= limit;
    }
    for (const job of jobs) this.begin(job);
    if (this.stopping) this.handBackReady();
    // Write what finished meanwhile and claim the next batch before running this one.
    this.pump();
    if (!this.stopping) this.startReady();
  }

  /** Outcomes back on the list, and the loop paused for a growing back-off (a failed cycle). */
  private holdPump(batch: Outcome[], err: unknown): void {
    this.outcomes = batch.concat(this.outcomes);
    this.pumpFailures++;
    if (err !== null) this.log.error({ err }, 'worker loop failed; retrying');
    const delay = Math.min(5000, 50 * 2 ** Math.min(this.pumpFailures, 7));
    this.pumpHeld = true;
    setTimeout(() => {
      this.pumpHeld = false;
      this.wake();
    }, delay).unref?.();
  }

  /**
   * Writes each outcome in a store call of its own (see outcome-isolation.ts); returns those to
   * write again later (a passing store error).
   */
  private async writeAlone(batch: Outcome[]): Promise<Outcome[]> {
    const results = await writeEachAlone(
      this.store,
      batch.map((o) => o.params),
      this.log,
    );
    const done: Outcome[] = [];
    const applied: boolean[] = [];
    const again: Outcome[] = [];
    results.forEach((r, i) => {
      const o = batch[i] as Outcome;
      if (r.kind === 'dropped') {
        this.forget(o.active.job);
        return;
      }
      const written: Outcome = r.params === o.params ? o : { ...o, params: r.params, kind: 'failed' };
      if (r.kind === 'again') again.push(written);
      else {
        done.push(written);
        applied.push(r.applied);
      }
    });
    this.afterOutcomes(done, applied);
    return again;
  }

  private get readyCount(): number {
    return this.ready.length - this.readyHead;
  }

  /**
   * How many jobs to hold beyond the free slots: as many as the handlers get through during one
   * store cycle (concurrency × cycle time / handler time), so that slots never wait for a round
   * trip while work is queued, and a job claimed ahead waits about one cycle at most.
   */
  private claimAheadTarget(): number {
    if (this.claimAheadMax === 0 || !(this.handlerMs >= 0) || !(this.cycleMs >= 0)) return 0;
    if (performance.now() < this.aheadPausedUntil) return 0;
    const n = Math.floor((this.concurrency * this.cycleMs) / Math.max(this.handlerMs, 0.001));
    if (n >= this.claimAheadMax) return this.claimAheadMax;
    // Rounded down to a power of two: the averages move all the time, and a store may prepare
    // one statement per claim size (SQLite does), which an idle worker would pay on its next claim.
    return n < 1 ? 0 : 2 ** Math.floor(Math.log2(n));
  }

  /** Starts waiting jobs while slots are free. */
  private startReady(): void {
    while (this.running < this.concurrency && this.readyHead < this.ready.length) {
      const active = this.ready[this.readyHead++] as Active;
      if (active.settled) continue; // handed back while waiting (shutdown)
      active.started = true;
      this.running++;
      void this.execute(active);
    }
    if (this.readyHead === this.ready.length) {
      this.ready = [];
      this.readyHead = 0;
    }
  }

  /**
   * Jobs claimed ahead that waited longer than `claimedWaitMs` for a slot (the slots are held by
   * handlers slower than the estimate): back to the queue, where an idle worker takes them, and
   * no claiming ahead here for a while.
   */
  private async returnStaleReady(): Promise<void> {
    if (this.stopping || this.readyCount === 0) return;
    const oldest = this.ready[this.readyHead] as Active;
    if (performance.now() - oldest.claimedAt < this.claimedWaitMs) return;
    this.aheadPausedUntil = performance.now() + 10 * this.claimedWaitMs;
    const waiting = this.takeReady();
    this.log.debug({ jobs: waiting.length }, 'jobs claimed ahead waited too long for a slot; handing them back');
    try {
      await this.settleLeftovers(waiting, 'no free slot');
    } finally {
      this.schedulePump();
    }
  }

  /** Jobs a claim returned after stop() began: handed back without running. */
  private handBackReady(): void {
    const waiting = this.takeReady();
    if (waiting.length === 0) return;
    this.settleLeftovers(waiting)
      .catch((err) => this.log.error({ err }, 'could not hand back jobs claimed during shutdown'))
      .finally(() => this.schedulePump());
  }

  /** Takes every job still waiting for a slot off the ready list (shutdown). */
  private takeReady(): Active[] {
    const out = this.ready.slice(this.readyHead).filter((a) => !a.settled);
    this.ready = [];
    this.readyHead = 0;
    return out;
  }

  /** Writes pending outcomes without claiming (shutdown); a refused batch is written job by job. */
  private async flushOutcomes(): Promise<void> {
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    let applied: boolean[];
    try {
      applied = await this.store.transition({ items: batch.map((o) => o.params) });
    } catch (err) {
      if (isTransientStoreError(err)) throw err;
      this.log.error({ err, outcomes: batch.length }, 'the store refused the last outcomes; writing each alone');
      const again = await this.writeAlone(batch);
      if (again.length > 0) throw new Error(`could not write the outcomes of ${again.length} job(s) at shutdown: the store is unreachable`);
      return;
    }
    this.afterOutcomes(batch, applied);
  }

  private afterOutcomes(batch: Outcome[], applied: boolean[]): void {
    batch.forEach((o, i) => {
      this.forget(o.active.job);
      if (applied[i]) {
        this.stats[o.kind]++;
        this.emitChanged(o.active.job, 'running', o.params.to, o.params.reason);
      } else {
        this.stats.refused++;
        this.log.warn({ jobId: o.params.id, to: o.params.to }, 'completion refused: this worker no longer holds the lease');
      }
    });
  }

  private forget(job: JobRecord): void {
    if (!this.active.delete(leaseKey(job))) return;
    const n = (this.attemptsById.get(job.id) ?? 1) - 1;
    if (n > 0) this.attemptsById.set(job.id, n);
    else this.attemptsById.delete(job.id);
  }

  private emitChanged(job: JobRecord, from: JobState, to: JobState, reason: string): void {
    this.bus.emit('job:changed', { id: job.id, tenant: job.tenant, type: job.type, from, to, reason });
  }

  // ---- running one job ------------------------------------------------------------------

  private begin(job: JobRecord): void {
    const task = this.tasks.get(job.type);
    if (!task) return; // cannot happen: we only claim our own types
    const active: Active = {
      job,
      task,
      abortState: new AttemptAbort(),
      nextHeartbeatAt: this.clock() + (task.heartbeatIntervalMs ?? this.options.defaults.heartbeatIntervalMs),
      timeoutTimer: null,
      settled: false,
      started: false,
      claimedAt: performance.now(),
      reporter: null,
    };
    // Re-claimed while an older attempt of it still runs here: that attempt's lease is gone.
    // (Looked up by id only when this worker holds another attempt of the job: `active` may hold
    // hundreds of jobs claimed ahead, and a scan per claimed job would cost more than the job.)
    if (this.attemptsById.has(job.id)) {
      for (const other of this.active.values()) if (other.job.id === job.id && other.job.lease < job.lease) this.abort(other, 'lease-lost');
    }
    this.active.set(leaseKey(job), active);
    this.attemptsById.set(job.id, (this.attemptsById.get(job.id) ?? 0) + 1);
    this.emitChanged(job, 'queued', 'running', 'claimed');
    if (job.timeoutMs !== null) {
      const elapsed = this.clock() - (job.startedAt ?? this.clock());
      active.timeoutTimer = longTimeout(() => void this.requestTimeout(active), Math.max(0, job.timeoutMs - elapsed));
    }
    if (job.cancelRequested) this.abort(active, job.cancelReason === 'timeout' ? 'timeout' : 'cancelled');
    this.ready.push(active);
  }

  private async execute(active: Active): Promise<void> {
    const { job, task } = active;
    let outcome: { ok: true; value: unknown } | { ok: false; error: unknown };
    const t0 = performance.now();
    try {
      const ctx = this.needsCheckpointNote(active) ? await this.makeContextAfterNote(active) : this.makeContext(active);
      const value = await task.run(job.input, ctx);
      outcome = { ok: true, value };
    } catch (error) {
      outcome = { ok: false, error };
    }
    // The handler is done: its slot goes to the next waiting job; the outcome is written by the loop.
    this.handlerMs = average(this.handlerMs, performance.now() - t0);
    this.running--;
    this.startReady();
    active.timeoutTimer?.cancel();
    if (active.settled) return; // handed back at shutdown: the transition is already written
    const kind = active.abortState.kind;
    if (active.reporter) await active.reporter.close(kind !== 'lease-lost');
    if (kind === 'lease-lost') {
      active.settled = true;
      this.forget(job);
      this.stats.refused++;
      this.log.warn({ jobId: job.id }, 'lease lost while running; outcome discarded');
      this.schedulePump();
      return;
    }
    this.settle(active, this.decide(active, outcome, kind));
  }

  private decide(active: Active, outcome: { ok: true; value: unknown } | { ok: false; error: unknown }, kind: AbortKind | null): Outcome {
    const { job, task } = active;
    const now = this.clock();
    if (outcome.ok) {
      const result = storedResult(outcome.value);
      if (!result.ok) {
        logFailedAttempt(this.log, job, null, result.error, 'failed');
        return this.outcome(active, 'failed', 'failed', 'fatal', now, { error: result.error, finishedAt: now });
      }
      const ttl = task.resultTtlMs ?? job.resultTtlMs ?? this.options.defaults.resultTtlMs;
      // `error` stays: it is the last failed attempt's (a snapshot shows it as `lastError`).
      return this.outcome(active, 'succeeded', 'succeeded', 'completed', now, {
        result: result.value,
        finishedAt: now,
        expiresAt: now + ttl,
        clearCheckpoint: true,
      });
    }
    if (kind === 'cancelled' || kind === 'timeout') {
      const cancelled = this.cancelledOutcome(active, kind, kind, now);
      if (kind === 'timeout') logFailedAttempt(this.log, job, outcome.error, cancelled.params.patch?.error as JobError, 'cancelled');
      return cancelled;
    }
    if (kind === 'shutdown') return this.handBack(active, now);
    const decision = decideAfterFailure(classifyError(outcome.error), job.attempts, job.maxAttempts, task.backoff, now);
    logFailedAttempt(this.log, job, outcome.error, decision.error, decision.to, decision.to === 'retrying' ? decision.runAt : undefined);
    if (decision.to === 'failed') {
      return this.outcome(active, 'failed', 'failed', decision.error.retryable ? 'attempts exhausted' : 'fatal', now, {
        error: decision.error,
        finishedAt: now,
      });
    }
    return this.outcome(active, 'retried', 'retrying', 'retry scheduled', now, { error: decision.error, runAt: decision.runAt });
  }

  /** The fenced transition that ends a running attempt (an object literal: spreads cost more than a job here). */
  private outcome(active: Active, kind: keyof WorkerStats, to: JobState, reason: string, at: number, patch: TransitionParams['patch']): Outcome {
    const { job } = active;
    return { active, kind, params: { id: job.id, from: 'running', to, lease: job.lease, workerId: this.id, at, reason, patch } };
  }

  private settle(active: Active, outcome: Outcome): void {
    active.settled = true;
    this.outcomes.push(outcome);
    this.schedulePump();
  }

  private reporterOf(active: Active): ProgressReporter {
    if (active.reporter) return active.reporter;
    const { job } = active;
    active.reporter = new ProgressReporter(
      job.progress.updatedAt === null ? null : job.progress,
      { publishMs: this.options.progressPublishMs ?? 50, persistMs: this.options.progressIntervalMs ?? 250 },
      {
        publish: (progress) => this.bus.emit('job:progress', { id: job.id, tenant: job.tenant, progress }),
        persist: async (progress) => {
          const ok = await this.retryWrites(active)('progress', () => this.store.saveProgress({ id: job.id, lease: job.lease, progress, now: this.clock() }));
          if (!ok) this.abort(active, 'lease-lost');
        },
      },
      this.clock,
    );
    return active.reporter;
  }

  /** A saved checkpoint that this attempt cannot use: unreadable, or from another checkpointVersion. */
  private needsCheckpointNote(active: Active): boolean {
    const usable = checkpointUsable(active.job.checkpoint, active.task.checkpointVersion);
    return usable === 'version-mismatch' || (usable === 'usable' && active.job.checkpoint?.corrupt === true);
  }

  /** Records in the log why the checkpoint is ignored, then starts over. */
  private async makeContextAfterNote(active: Active): Promise<TaskContext> {
    const { job, task } = active;
    const why = job.checkpoint?.corrupt
      ? 'checkpoint unreadable; starting over'
      : `checkpoint version ${job.checkpoint?.version} does not match task version ${task.checkpointVersion}; starting over`;
    await this.retryWrites(active)('log note', () => this.annotate(job, why));
    return this.makeContext(active, false);
  }

  private makeContext(active: Active, useCheckpoint = true): TaskContext {
    const { job, task, abortState } = active;
    let checkpointValue: unknown =
      useCheckpoint && job.checkpoint && !job.checkpoint.corrupt && job.checkpoint.version === task.checkpointVersion ? job.checkpoint.data : undefined;
    let log: Logger | undefined;
    let results: ResultsHandle | undefined;
    let uploads: UploadsHandle | undefined;
    const parentLog = this.log;
    const files = this.options.files;
    const ctx: TaskContext = {
      job: {
        id: job.id,
        type: job.type,
        tenant: job.tenant,
        metadata: job.metadata,
        get createdAt() {
          return new Date(job.createdAt).toISOString();
        },
        maxAttempts: job.maxAttempts,
      },
      attempt: job.attempts,
      get signal() {
        return abortState.signal;
      },
      // A child logger per job costs more than a no-op job: make it on first use.
      get log() {
        log ??= parentLog.child({ jobId: job.id, type: job.type, attempt: job.attempts });
        return log;
      },
      progress: (update) => this.reporterOf(active).update(update),
      checkpoint: {
        get value() {
          return checkpointValue;
        },
        save: async (data: unknown) => {
          // The user's data: refused (the handler sees why), never changed, when no store could keep it.
          const at = findUnstorableInValue(data, 'checkpoint');
          if (at) throw new FatalError(unstorableMessage(at), { code: 'UNSTORABLE_CHECKPOINT' });
          const ok = await this.retryWrites(active)('checkpoint', () =>
            this.store.saveCheckpoint({ id: job.id, lease: job.lease, checkpoint: { version: task.checkpointVersion, data }, now: this.clock() }),
          );
          if (!ok) {
            this.abort(active, 'lease-lost');
            throw new LeaseLostError(job.id);
          }
          checkpointValue = data;
        },
      },
      stage: async (name, fn) => {
        this.reporterOf(active).update({ stage: name });
        return await fn();
      },
      // Made on first use, fenced by this attempt's lease: a refused record aborts the attempt.
      get results() {
        results ??= files ? resultsHandle(files) : NO_RESULTS;
        return results;
      },
      get uploads() {
        uploads ??= files ? files.uploads(job.tenant) : NO_UPLOADS;
        return uploads;
      },
    };
    const resultsHandle = (f: WorkerFiles) =>
      f.results(
        { id: job.id, lease: job.lease },
        () => this.abort(active, 'lease-lost'),
        this.retryWrites(active),
      );
    return ctx;
  }

  /**
   * Runs a store write made on the handler's behalf through a short outage: passing errors are
   * retried, logged, within half the job's heartbeat timeout, until the lease is known lost.
   */
  private retryWrites(active: Active): StoreWriteRetry {
    const { job, abortState } = active;
    return (what, write) =>
      withStoreRetry(write, {
        what,
        log: this.log,
        fields: { jobId: job.id, type: job.type, attempt: job.attempts, tenant: job.tenant },
        budgetMs: retryBudgetMs(job.heartbeatTimeoutMs),
        stopped: () => abortState.kind === 'lease-lost',
      });
  }

  /** A log note on a running job (self-transition), fenced by the lease. */
  private async annotate(job: JobRecord, reason: string): Promise<void> {
    await this.store.transition({ items: [{ id: job.id, from: 'running', to: 'running', lease: job.lease, reason, workerId: this.id, at: this.clock() }] });
  }

  private abort(active: Active, kind: 'cancelled' | 'timeout' | 'shutdown' | 'lease-lost'): void {
    active.abortState.abort(kind);
  }

  private abortLocal(id: string, kind: 'cancelled' | 'timeout'): void {
    for (const active of this.active.values()) if (active.job.id === id) this.abort(active, kind);
  }

  private async requestTimeout(active: Active): Promise<void> {
    if (active.settled || active.abortState.aborted) return;
    const { job } = active;
    // Record the request so the sweeper forces the cancel after the drain if the handler ignores the signal.
    try {
      const [ok] = await this.store.transition({
        items: [
          {
            id: job.id,
            from: 'running',
            to: 'running',
            lease: job.lease,
            cancelRequested: false,
            reason: 'cancel requested: timeout',
            workerId: this.id,
            at: this.clock(),
            patch: { cancelRequest: { reason: 'timeout' } },
          },
        ],
      });
      if (ok) this.emitChanged(job, 'running', 'running', 'cancel requested: timeout');
    } catch (err) {
      // Called from a timer: a rejection here would be unhandled. The sweeper records the request instead.
      this.log.error({ err, jobId: job.id }, 'could not record the timeout; aborting the handler anyway');
    }
    this.abort(active, 'timeout');
  }

  // ---- lease upkeep ----------------------------------------------------------------------

  private async heartbeat(): Promise<void> {
    const now = this.clock();
    const due = [...this.active.values()].filter((a) => !a.settled && a.nextHeartbeatAt <= now);
    if (due.length === 0) return;
    const results = await this.store.heartbeat({ items: due.map((a) => ({ id: a.job.id, lease: a.job.lease })), now });
    results.forEach((r, i) => {
      const a = due[i] as Active;
      a.nextHeartbeatAt = now + (a.task.heartbeatIntervalMs ?? this.options.defaults.heartbeatIntervalMs);
      this.applyLeaseStatus(a, r);
    });
  }

  private async pollCancels(): Promise<void> {
    const running = [...this.active.values()].filter((a) => !a.settled && !a.abortState.aborted);
    if (running.length === 0) return;
    const results = await this.store.leaseStatus({ items: running.map((a) => ({ id: a.job.id, lease: a.job.lease })) });
    results.forEach((r, i) => {
      this.applyLeaseStatus(running[i] as Active, r);
    });
  }

  private applyLeaseStatus(a: Active, r: { ok: boolean; cancelRequested: boolean; cancelReason: string | null }): void {
    if (a.settled) return;
    if (!r.ok) this.abort(a, 'lease-lost');
    else if (r.cancelRequested) this.abort(a, r.cancelReason === 'timeout' ? 'timeout' : 'cancelled');
  }

  // ---- shutdown --------------------------------------------------------------------------

  /**
   * Graceful stop: claim nothing more, let running jobs finish for up to `drainMs`, then
   * abort the rest and hand them back at once (retrying, due now, the attempt refunded),
   * so another worker picks them up without waiting for a heartbeat timeout.
   */
  async stop(options: { drainMs?: number } = {}): Promise<void> {
    if (!this.started) return;
    this.stopping = true;
    // Jobs claimed ahead and not started go back at once, without waiting for the drain.
    const waiting = this.takeReady();
    if (waiting.length > 0) {
      await this.settleLeftovers(waiting);
      this.schedulePump();
    }
    const drainMs = options.drainMs ?? 10_000;
    if (this.active.size > 0 || this.outcomes.length > 0 || this.pumping) {
      await Promise.race([new Promise<void>((r) => this.idleWaiters.push(r)), sleepLong(drainMs)]);
    }
    const leftovers = [...this.active.values()].filter((a) => !a.settled);
    if (leftovers.length > 0) await this.settleLeftovers(leftovers);
    while (this.pumping) await new Promise((r) => setTimeout(r, 5));
    try {
      await this.flushOutcomes();
    } finally {
      // Even if the last write failed: a stopped worker must not keep the process alive.
      for (const t of this.timers) clearInterval(t);
      if (this.keepAlive) clearInterval(this.keepAlive);
      this.keepAlive = null;
      for (const u of this.unsubscribe) u();
      this.timers = [];
      this.unsubscribe = [];
      this.active.clear();
      this.attemptsById.clear();
      this.leaving.clear();
    }
  }

  /**
   * Ends jobs at shutdown: a job whose cancel was requested (here, or by another process and not
   * yet seen) ends cancelled, since handing it back would run it again although its user asked it
   * to stop; the others are handed back (retrying, due now, the attempt refunded).
   */
  private async settleLeftovers(all: Active[], why: 'shutdown' | 'no free slot' = 'shutdown'): Promise<void> {
    // Jobs another call is already ending (a claim returning during stop(), then the drain's
    // end) are left to it: two hand-backs of one lease would be one too many.
    const leftovers = all.filter((a) => !a.settled && !this.leaving.has(a));
    for (const a of leftovers) this.leaving.add(a);
    const requested = await this.cancelRequests(leftovers);
    const now = this.clock();
    for (const [i, a] of leftovers.entries()) {
      this.leaving.delete(a);
      if (a.settled) continue; // finished meanwhile: its own outcome is queued
      const seen = a.abortState.kind;
      const cancel = seen === 'cancelled' || seen === 'timeout' ? seen : requested[i];
      a.settled = true;
      if (!a.started) a.timeoutTimer?.cancel();
      this.abort(a, 'shutdown');
      await a.reporter?.close(true);
      const note = why === 'shutdown' ? 'worker stopping' : 'before it started';
      this.outcomes.push(cancel ? this.cancelledOutcome(a, cancel, `${cancel} (${note})`, now) : this.handBack(a, now, why));
    }
  }

  /** For each job, the cancel kind recorded in the store, if any (null when none, or unknown). */
  private async cancelRequests(list: Active[]): Promise<('cancelled' | 'timeout' | null)[]> {
    try {
      const status = await this.store.leaseStatus({ items: list.map((a) => ({ id: a.job.id, lease: a.job.lease })) });
      return status.map((r) => (r.ok && r.cancelRequested ? (r.cancelReason === 'timeout' ? 'timeout' : 'cancelled') : null));
    } catch (err) {
      // Hand the jobs back rather than not at all: the sweeper still honours a recorded cancel.
      this.log.error({ err }, 'could not read cancel requests at shutdown');
      return list.map(() => null);
    }
  }

  private handBack(a: Active, now: number, reason: 'shutdown' | 'no free slot' = 'shutdown'): Outcome {
    return this.outcome(a, 'handedBack', 'retrying', reason, now, { runAt: now, refundAttempt: true });
  }

  private cancelledOutcome(a: Active, kind: 'cancelled' | 'timeout', reason: string, now: number): Outcome {
    const { job } = a;
    const error: JobError =
      kind === 'timeout'
        ? { message: `timed out after ${job.timeoutMs} ms`, code: 'TIMEOUT', retryable: false }
        : { message: 'cancelled', code: 'CANCELLED', retryable: false };
    return this.outcome(a, 'cancelled', 'cancelled', reason, now, { error, finishedAt: now });
  }

  /** Resolves when nothing is running or waiting to be written (tests, benchmarks). */
  idle(): Promise<void> {
    if (this.active.size === 0 && this.outcomes.length === 0 && !this.pumping) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }
}
