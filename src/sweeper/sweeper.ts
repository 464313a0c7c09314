/**
 * Periodic maintenance. Each pass: promote due jobs, reap running jobs whose worker stopped
 * heartbeating, request cancellation of jobs past their timeout, force cancels whose drain
 * period ran out, flag stalled jobs, expire old results.
 *
 * Safe with several sweepers at once: every action is a compare-and-swap transition, so of
 * two sweepers acting on the same job exactly one wins and the other's write is a no-op.
 */
import type { Logger } from 'pino';
import type { JobError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';
import { decideAfterLostWorker } from '../core/lifecycle.js';
import type { JobBus } from '../channel/bus.js';
import type { Store, TransitionParams } from '../store/store.js';

export interface SweeperOptions {
  store: Store;
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
}

export class Sweeper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<SweepReport> | null = null;
  private readonly clock: () => number;
  private readonly batch: number;

  constructor(private readonly options: SweeperOptions) {
    this.clock = options.clock ?? Date.now;
    this.batch = options.batchSize ?? 500;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.running) return;
      this.sweep()
        .catch((err) => this.options.logger.error({ err }, 'sweep failed'))
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
  }

  /** One full pass; also callable directly (tests, `longhaul` maintenance commands). */
  sweep(): Promise<SweepReport> {
    this.running = this.pass();
    return this.running;
  }

  private async apply(jobs: JobRecord[], make: (job: JobRecord) => TransitionParams): Promise<number> {
    if (jobs.length === 0) return 0;
    const items = jobs.map(make);
    const applied = await this.options.store.transition({ items });
    let n = 0;
    applied.forEach((ok, i) => {
      const p = items[i] as TransitionParams;
      const job = jobs[i] as JobRecord;
      if (!ok) return;
      n++;
      this.options.bus.emit('job:changed', { id: job.id, tenant: job.tenant, type: job.type, from: p.from, to: p.to, reason: p.reason });
      if (p.patch?.cancelRequest) this.options.bus.emit('job:cancel-requested', { id: job.id, reason: p.patch.cancelRequest.reason });
    });
    return n;
  }

  /** running → cancelled for a job whose cancel request its handler cannot (or did not) honour. */
  private forcedCancel(job: JobRecord, now: number, why: 'drain' | 'heartbeat lost'): TransitionParams {
    const timeout = job.cancelReason === 'timeout';
    const cause = why === 'drain' ? 'the handler ignored cancellation' : 'the worker stopped heartbeating';
    const error: JobError = timeout
      ? { message: `timed out after ${job.timeoutMs} ms; ${cause}`, code: 'TIMEOUT', retryable: false }
      : { message: `cancelled; ${cause}`, code: 'CANCELLED', retryable: false };
    const what = timeout ? 'timeout' : 'cancelled';
    return {
      id: job.id,
      from: 'running',
      to: 'cancelled',
      lease: job.lease,
      reason: why === 'drain' ? `${what} (forced after drain)` : `${what} (heartbeat lost)`,
      at: now,
      workerId: job.workerId,
      patch: { error, finishedAt: now },
    };
  }

  private async pass(): Promise<SweepReport> {
    const { store } = this.options;
    const now = this.clock();
    const report: SweepReport = { promoted: 0, reaped: 0, timedOut: 0, forced: 0, stalled: 0, expired: 0 };
    if (this.options.everyPass) {
      try {
        await this.options.everyPass(now);
      } catch (err) {
        this.options.logger.error({ err }, 'sweeper maintenance failed');
      }
    }
    // A store shared by several nodes (PostgreSQL) elects one sweeper; the others skip their pass.
    if (store.tryAcquireSweeperLock && !(await store.tryAcquireSweeperLock())) return report;
    report.promoted = await store.promoteDue({ now, limit: this.batch });
    if (report.promoted > 0) this.options.bus.emit('jobs:promoted', { count: report.promoted });

    const stale = await store.sweepCandidates({ kind: 'stale', now, limit: this.batch });
    report.reaped = await this.apply(stale, (job) => {
      // Cancellation was asked for and no worker is left to honour it: it takes effect now
      // (requeueing would run the job again; failing would report a crash instead of the cancel).
      if (job.cancelRequested) return this.forcedCancel(job, now, 'heartbeat lost');
      const d = decideAfterLostWorker(job.attempts, job.maxAttempts, now);
      return {
        id: job.id,
        from: 'running',
        to: d.to,
        lease: job.lease,
        reason: d.to === 'failed' ? 'heartbeat lost; attempts exhausted' : 'heartbeat lost; requeued',
        at: now,
        workerId: job.workerId,
        patch: d.to === 'failed' ? { error: d.error, finishedAt: now } : { error: d.error, runAt: d.runAt },
      };
    });

    const timedOut = await store.sweepCandidates({ kind: 'timed-out', now, limit: this.batch });
    report.timedOut = await this.apply(timedOut, (job) => ({
      id: job.id,
      from: 'running',
      to: 'running',
      lease: job.lease,
      cancelRequested: false,
      reason: 'cancel requested: timeout',
      at: now,
      workerId: job.workerId,
      patch: { cancelRequest: { reason: 'timeout' } },
    }));

    const drained = await store.sweepCandidates({ kind: 'drained', now, limit: this.batch, drainMs: this.options.cancelDrainMs ?? 30_000 });
    report.forced = await this.apply(drained, (job) => this.forcedCancel(job, now, 'drain'));

    const stalled = await store.sweepCandidates({ kind: 'stalled', now, limit: this.batch });
    report.stalled = await this.apply(stalled, (job) => ({
      id: job.id,
      from: 'running',
      to: 'running',
      lease: job.lease,
      reason: 'stalled: no progress',
      at: now,
      workerId: job.workerId,
      patch: { stalled: true },
    }));

    const expired = await store.sweepCandidates({ kind: 'expired', now, limit: this.batch });
    if (expired.length > 0 && this.options.expireFiles) await this.options.expireFiles(expired);
    report.expired = await this.apply(expired, (job) => ({
      id: job.id,
      from: 'succeeded',
      to: 'expired',
      reason: 'result TTL elapsed',
      at: now,
      patch: { result: null },
    }));
    if (this.options.maintenance) {
      try {
        await this.options.maintenance(now);
      } catch (err) {
        this.options.logger.error({ err }, 'sweeper maintenance failed');
      }
    }
    return report;
  }
}
