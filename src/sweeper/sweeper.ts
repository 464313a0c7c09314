/**
 * Periodic maintenance. Each pass: promote due jobs, reap running jobs whose worker stopped
 * heartbeating, request cancellation of jobs past their timeout, force cancels whose drain
 * period ran out, flag stalled jobs, expire old results, delete ended jobs past their retention.
 *
 * Safe with several sweepers at once: every action is a compare-and-swap transition, so of
 * two sweepers acting on the same job exactly one wins and the other's write is a no-op.
 *
 * A database outage fails every pass, and every part of a pass, until it ends: it is logged once
 * when it starts and once when it ends (core/outage.ts), not once per pass. Other failures are
 * logged each time.
 */
import type { Logger } from 'pino';
import type { JobBus } from '../channel/bus.js';
import type { JobRecord } from '../core/job.js';
import { expireResult, flagStalled, forceCancel, reapLostWorker, requestTimeout, type TransitionParams } from '../core/transitions.js';
import { STATS_WINDOW_MS } from '../core/stats-window.js';
import { Outage, type OutageLine } from '../core/outage.js';
import { isTransientStoreError } from '../core/store-errors.js';
import type { JobQueueStore, ResumedJob, WorkflowStore } from '../store/store.js';
import { applyTransitions } from '../transitions/apply.js';

export interface SweeperOptions {
  store: JobQueueStore & Pick<WorkflowStore, 'resumeStrandedParents'>;
  bus: JobBus;
  logger: Logger;
  /** Default 1000 ms. */
  intervalMs?: number;
  /** Grace between a cancel request and the forced cancel. Default 30 000 ms. */
  cancelDrainMs?: number;
  /** Jobs handled per kind per pass. Default 500. */
  batchSize?: number;
  /**
   * Deletes the result files of succeeded jobs whose TTL elapsed, before they move to expired
   * (so a crash in between leaves a job that the next pass expires again, never orphaned files).
   */
  expireFiles?: (jobs: JobRecord[]) => Promise<void>;
  /**
   * Retention: deletes the ended jobs whose retention period is over (src/facade/erase.ts);
   * resolves to how many jobs it deleted. Runs in the elected sweeper after the other passes.
   */
  retention?: (now: number) => Promise<number>;
  /**
   * Announces the parents a pass queued again (left waiting by a crash) and what the store
   * stopped with them: a fail-fast parent's siblings, whose children it cancels in turn. The
   * runtime hands down workflow/fail-fast.ts's announceResumedParents; the sweeper sits below
   * workflow/ and does not import it.
   */
  announceResumed: (resumed: readonly ResumedJob[], now: number) => Promise<unknown>;
  /** Runs at the end of every pass of the elected sweeper (webhook events). Its failure is logged, not fatal to the pass. */
  maintenance?: (now: number) => Promise<void>;
  /** Runs at the start of every pass in every process, elected or not (upload expiry: idempotent). */
  everyPass?: (now: number) => Promise<void>;
  clock?: () => number;
}

export interface SweepReport {
  promoted: number;
  reaped: number;
  timedOut: number;
  forced: number;
  stalled: number;
  expired: number;
  /** Parents queued again whose children had ended without it (see workflow/parents.ts). */
  resumed: number;
  /** Ended jobs deleted by retention. */
  deleted: number;
}

export class Sweeper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<SweepReport> | null = null;
  private readonly clock: () => number;
  private readonly batch: number;
  private readonly outage = new Outage('sweeper');
  /** Set when a part of the pass under way met a passing store error (the outage goes on). */
  private passFailed = false;

  constructor(private readonly options: SweeperOptions) {
    this.clock = options.clock ?? Date.now;
    this.batch = options.batchSize ?? 500;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.running) return;
      this.passFailed = false;
      this.sweep()
        .then(
          () => {
            if (!this.passFailed) this.log(this.outage.succeeded(Date.now()));
          },
          (err) => this.log(this.outage.failed(err, Date.now(), 'sweep failed')),
        )
        .finally(() => {
          this.running = null;
        });
    }, this.options.intervalMs ?? 1000);
    this.timer.unref?.();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
    // Hand the role on now: the store may outlive this sweeper (a caller's own store).
    await this.options.store.releaseSweeperLock?.().catch(() => undefined);
  }

  /** A part of a pass failed (the pass goes on): an outage's lines, or the error with `what`. */
  private partFailed(err: unknown, what: string): void {
    if (isTransientStoreError(err)) this.passFailed = true;
    this.log(this.outage.failed(err, Date.now(), what));
  }

  private log(line: OutageLine | null): void {
    if (line) this.options.logger[line.level](line.fields, line.msg);
  }

  /** One full pass; also callable directly (tests, `longhaul` maintenance commands). */
  sweep(): Promise<SweepReport> {
    this.running = this.pass();
    return this.running;
  }

  /** Applies one transition per job (built from the job); the number that applied. */
  private async apply(jobs: JobRecord[], make: (job: JobRecord) => TransitionParams): Promise<number> {
    const applied = await applyTransitions(
      this.options.store,
      this.options.bus,
      jobs.map((job) => ({ job, write: make(job) })),
    );
    return applied.filter(Boolean).length;
  }

  private async pass(): Promise<SweepReport> {
    const { store } = this.options;
    const now = this.clock();
    const report: SweepReport = { promoted: 0, reaped: 0, timedOut: 0, forced: 0, stalled: 0, expired: 0, resumed: 0, deleted: 0 };
    if (this.options.everyPass) {
      try {
        await this.options.everyPass(now);
      } catch (err) {
        this.partFailed(err, 'sweeper maintenance failed');
      }
    }
    // A store shared by several nodes (PostgreSQL) elects one sweeper; the others skip their pass.
    if (store.tryAcquireSweeperLock && !(await store.tryAcquireSweeperLock())) return report;
    report.promoted = await store.promoteDue({ now, limit: this.batch });
    if (report.promoted > 0) this.options.bus.emit('jobs:promoted', { count: report.promoted });

    const stale = await store.sweepCandidates({ kind: 'stale', now, limit: this.batch });
    report.reaped = await this.apply(stale, (job) => reapLostWorker(job, now));

    const timedOut = await store.sweepCandidates({ kind: 'timed-out', now, limit: this.batch });
    report.timedOut = await this.apply(timedOut, (job) => requestTimeout(job, job.workerId, now));

    const drained = await store.sweepCandidates({ kind: 'drained', now, limit: this.batch, drainMs: this.options.cancelDrainMs ?? 30_000 });
    report.forced = await this.apply(drained, (job) => forceCancel(job, now, 'drain'));

    const stalled = await store.sweepCandidates({ kind: 'stalled', now, limit: this.batch });
    report.stalled = await this.apply(stalled, (job) => flagStalled(job, now));

    // Parents whose children ended while no process could queue them again (a crash in between).
    const stranded = await store.resumeStrandedParents({ at: now, limit: this.batch });
    // A fail-fast parent's siblings stopped with it are announced too, and their children cancelled.
    try {
      await this.options.announceResumed(stranded, now);
    } catch (err) {
      this.options.logger.warn({ err }, 'could not cancel the children of siblings stopped by a fail-fast parent');
    }
    report.resumed = stranded.length;

    const expired = await store.sweepCandidates({ kind: 'expired', now, limit: this.batch });
    if (expired.length > 0 && this.options.expireFiles) await this.options.expireFiles(expired);
    report.expired = await this.apply(expired, (job) => expireResult(job, now));
    if (this.options.retention) {
      try {
        report.deleted = await this.options.retention(now);
      } catch (err) {
        this.partFailed(err, 'retention failed');
      }
    }
    try {
      // Stats upkeep: old rate and run-time buckets go; PostgreSQL folds its change log.
      await store.compactStats({ before: now - STATS_WINDOW_MS });
    } catch (err) {
      this.partFailed(err, 'stats compaction failed');
    }
    const r = report;
    if (r.reaped + r.timedOut + r.forced + r.stalled + r.expired + r.deleted > 0) {
      this.options.bus.emit('sweeper:pass', { reaped: r.reaped, timedOut: r.timedOut, forced: r.forced, stalled: r.stalled, expired: r.expired, deleted: r.deleted });
    }
    if (this.options.maintenance) {
      try {
        await this.options.maintenance(now);
      } catch (err) {
        this.partFailed(err, 'sweeper maintenance failed');
      }
    }
    return report;
  }
}
