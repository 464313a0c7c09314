/**
 * A worker's claim loop: the one place that writes claims and outcomes. Outcomes that land
 * together are written in one transaction with the next claim (`store.completeAndClaim`), and
 * the freed slots are refilled right after. With a store behind a round trip (PostgreSQL) two
 * such cycles are in flight, and jobs are claimed a little ahead of free slots (claim-ahead.ts),
 * so that jobs run while the next cycle is written.
 *
 * Claimed jobs wait in a ready list until a slot frees; the worker (runtime.ts) runs them and
 * hands their outcomes back with `settle`.
 */
import { jobLogFields } from '../core/log-fields.js';
import type { Logger } from 'pino';
import type { JobBus } from '../channel/bus.js';
import type { JobRecord } from '../core/job.js';
import { isTransientStoreError } from '../core/store-errors.js';
import { Outage, type OutageLine } from '../core/outage.js';
import type { ClaimType, JobQueueStore, TenantCaps } from '../store/store.js';
import type { Active, Attempts } from './attempt.js';
import { ClaimAhead } from './claim-ahead.js';
import type { Outcome } from './outcome.js';
import { OutcomeWriter, writeOf } from './outcome-writer.js';
import type { WorkerStats } from './runtime.js';

/** What the loop asks of the worker. */
export interface ClaimLoopHost {
  /** Takes on a claimed job (registered with its lease kept); null for a type this worker does not run. */
  begin(job: JobRecord): Active | null;
  /** Runs a job's handler in a free slot; its end calls `handlerDone`, then `settle` or `discard`. */
  run(active: Active): void;
  /** Ends jobs without running them (handed back, or cancelled when a cancel was asked for). */
  settleLeftovers(list: Active[], why: 'shutdown' | 'no free slot'): Promise<void>;
}

export interface ClaimLoopOptions {
  store: JobQueueStore;
  bus: JobBus;
  log: Logger;
  clock: () => number;
  workerId: string;
  attempts: Attempts;
  stats: WorkerStats;
  host: ClaimLoopHost;
  concurrency: number;
  claimTypes: ClaimType[];
  /** Priority aging and tenant caps, passed to every claim (see ClaimParams). */
  claimRules?: { agingMs: number | null; tenantCaps?: TenantCaps | undefined };
  /** See WorkerOptions.claimAhead and claimedWaitMs. */
  claimAheadMax: number;
  claimedWaitMs: number;
}

export class ClaimLoop {
  private readonly store: JobQueueStore;
  private readonly attempts: Attempts;
  private readonly concurrency: number;
  /** Settled attempts whose outcome is to be written, in order. */
  private outcomes: Active[] = [];
  /** Claimed jobs whose handler has not started yet, oldest first (from `readyHead` on). */
  private ready: Active[] = [];
  private readyHead = 0;
  /** Handlers started and not finished: at most `concurrency`. */
  private running = 0;
  private readonly ahead: ClaimAhead;
  private readonly writer: OutcomeWriter;
  /** Store cycles being written, and the jobs they claim (not yet in `ready`). */
  private inFlight = 0;
  private claiming = 0;
  /** 1 for a store written in-process (SQLite), 2 for one behind a round trip. */
  private readonly maxInFlight: number;
  private pumpScheduled = false;
  /** Set after a failed cycle until its back-off ends. */
  private pumpHeld = false;
  private pumpFailures = 0;
  /** A database outage is logged when it starts and when it ends, not at every failed cycle. */
  private readonly outage = new Outage('worker loop');
  private wanted = true;
  private stopping = false;
  private lastClaimAt = 0;
  private idleWaiters: (() => void)[] = [];
  private rateTimer: NodeJS.Timeout | null = null;
  /** A task type with a concurrency key: its claims read a share of each key's queue. */
  private readonly keyed: boolean;
  private rateTimerAt = 0;

  constructor(private readonly o: ClaimLoopOptions) {
    this.store = o.store;
    this.attempts = o.attempts;
    this.concurrency = o.concurrency;
    this.maxInFlight = o.store.capabilities.claimDepth;
    this.ahead = new ClaimAhead(o.concurrency, o.claimAheadMax);
    this.writer = new OutcomeWriter(o);
    this.keyed = o.claimTypes.some((t) => t.keyConcurrency !== undefined);
  }

  /** Asks the loop to claim (coalesced). */
  wake(): void {
    this.wanted = true;
    this.schedulePump();
  }

  /** Claims nothing more from now on (shutdown); outcomes are still written. */
  stopClaiming(): void {
    this.stopping = true;
    if (this.rateTimer !== null) clearTimeout(this.rateTimer);
    this.rateTimer = null;
  }

  /** An idle worker's poll: claims when another process may have queued work, or when idle too long (delayed jobs coming due). */
  async pollForWork(maxIdleMs: number): Promise<void> {
    if (this.running + this.readyCount >= this.concurrency) return;
    if ((await this.store.pollChanges()) || this.o.clock() - this.lastClaimAt >= maxIdleMs) this.wake();
  }

  schedulePump(): void {
    if (this.pumpScheduled || this.pumpHeld) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** True while a cycle is being written or about to start. */
  get pumping(): boolean {
    return this.inFlight > 0 || this.pumpScheduled;
  }

  /** Something is running, or waiting to be written. */
  get busy(): boolean {
    return this.attempts.size > 0 || this.outcomes.length > 0 || this.pumping;
  }

  /** Queues an ended attempt's outcome for the next cycle. */
  queue(active: Active, outcome: Outcome): void {
    active.settled = true;
    active.outcome = outcome;
    this.outcomes.push(active);
  }

  /** The same, and wakes the loop to write it. */
  settle(active: Active, outcome: Outcome): void {
    this.queue(active, outcome);
    this.schedulePump();
  }

  /** An attempt that has nothing to write (its lease is gone). */
  discard(active: Active): void {
    active.settled = true;
    this.attempts.forget(active.job);
    this.o.stats.refused++;
    this.o.log.warn(jobLogFields(active.job), 'lease lost while running; outcome discarded');
    this.schedulePump();
  }

  /** An attempt that has nothing more to write: its job is waiting (suspended by its handler). */
  release(active: Active): void {
    active.settled = true;
    this.attempts.forget(active.job);
    this.schedulePump();
  }

  /** A handler finished after `ms`: its slot goes to the next waiting job. */
  handlerDone(ms: number): void {
    this.ahead.handlerRan(ms);
    this.running--;
    this.startReady();
  }

  /**
   * Starts store cycles (completions + claim) while there is something to write or room to
   * claim, up to `maxInFlight` at once: with a store behind a round trip, the next cycle is
   * written while this process runs the jobs of the last one.
   */
  private pump(): void {
    while (!this.pumpHeld && this.inFlight < this.maxInFlight && this.startCycle());
    if (!this.pumping && this.attempts.size === 0 && this.outcomes.length === 0) for (const w of this.idleWaiters.splice(0)) w();
  }

  private startCycle(): boolean {
    const batch = this.outcomes;
    const ahead = this.ahead.target();
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
      this.lastClaimAt = this.o.clock();
    }
    this.inFlight++;
    this.claiming += limit;
    void this.cycle(batch, limit);
    return true;
  }

  private async cycle(batch: Active[], limit: number): Promise<void> {
    const clock = this.o.clock;
    const t0 = performance.now();
    let jobs: JobRecord[] = [];
    try {
      const res = await this.store.completeAndClaim({
        complete: batch.map(writeOf),
        // A getter: the store reads it inside its transaction, after any wait for the write
        // lock, so a lease never starts before the claim was actually made.
        claim: {
          workerId: this.o.workerId,
          types: this.o.claimTypes,
          limit,
          agingMs: this.o.claimRules?.agingMs,
          tenantCaps: this.o.claimRules?.tenantCaps,
          get now() {
            return clock();
          },
        },
      });
      jobs = res.jobs;
      if (limit > 0) this.ahead.cycleRan(performance.now() - t0);
      this.writer.written(batch, res.applied, res.deleted);
      this.o.stats.claimed += jobs.length;
      const debug = this.o.log.isLevelEnabled('debug');
      for (const job of jobs) {
        this.o.bus.emit('attempt:started', { job });
        if (debug) this.o.log.debug(jobLogFields(job), 'attempt claimed');
      }
      // More may be waiting after a full batch, and after a claim that shared its places (the
      // store reads only a share of each tenant's or key's queue): claim again as soon as slots
      // free up.
      if (limit > 0 && jobs.length > 0 && (jobs.length === limit || this.keyed || spansTenants(jobs))) this.wanted = true;
      if (res.wakeAt !== undefined) this.wakeAt(res.wakeAt);
      this.pumpFailures = 0;
      this.logOutage(this.outage.succeeded(Date.now()));
    } catch (err) {
      // The transaction rolled back: nothing was completed or claimed.
      if (batch.length > 0 && !isTransientStoreError(err)) {
        // Refused, not unreachable: one job's data may be the cause. Each outcome is written
        // alone (a job whose own outcome is refused is failed instead), then the loop goes on.
        this.o.log.error({ err, outcomes: batch.length }, 'the store refused a worker cycle; writing each outcome alone');
        const again = await this.writer.writeAlone(batch);
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
    for (const job of jobs) {
      const active = this.o.host.begin(job);
      if (active) this.ready.push(active);
    }
    if (this.stopping) this.handBackReady();
    // Write what finished meanwhile and claim the next batch before running this one.
    this.pump();
    if (!this.stopping) this.startReady();
  }

  /** A rate limit held the last claim back until `at`: one timer claims then (the earliest one asked for wins). */
  private wakeAt(at: number): void {
    if (this.rateTimer !== null && this.rateTimerAt <= at) return;
    if (this.rateTimer !== null) clearTimeout(this.rateTimer);
    this.rateTimerAt = at;
    this.rateTimer = setTimeout(
      () => {
        this.rateTimer = null;
        this.wake();
      },
      Math.max(0, at - this.o.clock()),
    );
    this.rateTimer.unref?.();
  }

  /** Outcomes back on the list, and the loop paused for a growing back-off (a failed cycle). */
  private holdPump(batch: Active[], err: unknown): void {
    this.outcomes = batch.concat(this.outcomes);
    this.pumpFailures++;
    if (err !== null) {
      this.logOutage(this.outage.failed(err, Date.now(), 'worker loop failed; retrying'));
      // What claim-ahead measured before no longer holds (claim-ahead.ts).
      this.ahead.storeFailed();
    }
    const delay = Math.min(5000, 50 * 2 ** Math.min(this.pumpFailures, 7));
    this.pumpHeld = true;
    setTimeout(() => {
      this.pumpHeld = false;
      this.wake();
    }, delay).unref?.();
  }

  private logOutage(line: OutageLine | null): void {
    if (line) this.o.log[line.level](line.fields, line.msg);
  }

  private get readyCount(): number {
    return this.ready.length - this.readyHead;
  }

  /** Starts waiting jobs while slots are free. */
  private startReady(): void {
    while (this.running < this.concurrency && this.readyHead < this.ready.length) {
      const active = this.ready[this.readyHead++] as Active;
      if (active.settled) continue; // handed back while waiting (shutdown)
      // Its job ended or is being ended while it waited for a slot (a cancel, a fail-fast
      // sibling, a lost lease): it is ended without running its handler.
      if (active.abortState.aborted) {
        this.endUnstarted(active);
        continue;
      }
      active.started = true;
      this.running++;
      this.o.host.run(active);
    }
    if (this.readyHead === this.ready.length) {
      this.ready = [];
      this.readyHead = 0;
    }
  }

  /** A job claimed ahead whose signal fired before it started: cancelled as asked (or dropped, its lease gone). */
  private endUnstarted(active: Active): void {
    active.timeoutTimer?.cancel();
    if (active.abortState.kind === 'lease-lost') {
      this.discard(active);
      return;
    }
    this.o.host
      .settleLeftovers([active], 'no free slot')
      .catch((err) => this.o.log.error({ err, ...jobLogFields(active.job) }, 'could not end a job cancelled before it started'))
      .finally(() => this.schedulePump());
  }

  /**
   * Jobs claimed ahead that waited longer than `claimedWaitMs` for a slot (the slots are held by
   * handlers slower than the estimate): back to the queue, where an idle worker takes them, and
   * no claiming ahead here for a while.
   */
  async returnStaleReady(): Promise<void> {
    if (this.stopping || this.readyCount === 0) return;
    const oldest = this.ready[this.readyHead] as Active;
    if (performance.now() - oldest.claimedAt < this.o.claimedWaitMs) return;
    this.ahead.pause(performance.now() + 10 * this.o.claimedWaitMs);
    const waiting = this.takeReady();
    this.o.log.debug({ jobs: waiting.length }, 'jobs claimed ahead waited too long for a slot; handing them back');
    try {
      await this.o.host.settleLeftovers(waiting, 'no free slot');
    } finally {
      this.schedulePump();
    }
  }

  /** Jobs a claim returned after stop() began: handed back without running. */
  private handBackReady(): void {
    const waiting = this.takeReady();
    if (waiting.length === 0) return;
    this.o.host
      .settleLeftovers(waiting, 'shutdown')
      .catch((err) => this.o.log.error({ err }, 'could not hand back jobs claimed during shutdown'))
      .finally(() => this.schedulePump());
  }

  /** Takes every job still waiting for a slot off the ready list (shutdown). */
  takeReady(): Active[] {
    const out = this.ready.slice(this.readyHead).filter((a) => !a.settled);
    this.ready = [];
    this.readyHead = 0;
    return out;
  }

  /** Writes pending outcomes without claiming (shutdown). */
  async flushOutcomes(): Promise<void> {
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    await this.writer.flush(batch);
  }

  /** Resolves when nothing is running or waiting to be written. */
  idle(): Promise<void> {
    if (!this.busy) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }
}

/** Whether jobs of more than one tenant were claimed together. */
function spansTenants(jobs: readonly JobRecord[]): boolean {
  const first = jobs[0]?.tenant;
  for (const j of jobs) if (j.tenant !== first) return true;
  return false;
}
