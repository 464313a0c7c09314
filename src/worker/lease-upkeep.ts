/**
 * Keeping a worker's leases: heartbeats for the jobs it holds, polls for cancel requests made by
 * other processes, and each job's timeout (a timer per job, and the cancel request it records).
 * What it learns ends up as an abort of the attempt (its `ctx.signal` fires); deciding the job's
 * next state from that is the outcome's business (outcome.ts).
 */
import { jobLogFields } from '../core/log-fields.js';
import type { Logger } from 'pino';
import type { JobBus } from '../channel/bus.js';
import { requestTimeout } from '../core/transitions.js';
import type { JobQueueStore } from '../store/store.js';
import { applyTransition } from '../transitions/apply.js';
import { type Active, type Attempts, cancelKindOf } from './attempt.js';
import { longTimeout } from './long-timer.js';

export interface LeaseUpkeepOptions {
  store: JobQueueStore;
  bus: JobBus;
  log: Logger;
  clock: () => number;
  workerId: string;
  attempts: Attempts;
  /** For tasks that set none. */
  heartbeatIntervalMs: number;
}

interface LeaseStatus {
  ok: boolean;
  cancelRequested: boolean;
  cancelReason: string | null;
}

export class LeaseUpkeep {
  private readonly store: JobQueueStore;
  private readonly attempts: Attempts;

  constructor(private readonly o: LeaseUpkeepOptions) {
    this.store = o.store;
    this.attempts = o.attempts;
  }

  /** When a job claimed now is next due for a heartbeat. */
  nextHeartbeat(active: Pick<Active, 'task'>, now: number): number {
    return now + (active.task.heartbeatIntervalMs ?? this.o.heartbeatIntervalMs);
  }

  /** Renews the leases that are due; an attempt whose lease is gone, or whose cancel was asked for, is aborted. */
  async heartbeat(): Promise<void> {
    const now = this.o.clock();
    // An attempt whose outcome is queued still holds its lease until the next store cycle writes
    // it: heartbeated meanwhile, or a cycle slower than the heartbeat timeout (a loaded store,
    // a big batch) gets a finished job reaped as if its worker had died.
    const due = [...this.attempts.values()].filter((a) => (!a.settled || a.outcome !== null) && a.nextHeartbeatAt <= now);
    if (due.length === 0) return;
    const results = await this.store.heartbeat({ items: due.map((a) => ({ id: a.job.id, lease: a.job.lease })), now });
    results.forEach((r, i) => {
      const a = due[i] as Active;
      a.nextHeartbeatAt = this.nextHeartbeat(a, now);
      this.applyStatus(a, r);
    });
  }

  /** Looks for cancel requests another process recorded (this one's arrive on the bus). */
  async pollCancels(): Promise<void> {
    const running = [...this.attempts.values()].filter((a) => !a.settled && !a.abortState.aborted);
    if (running.length === 0) return;
    const results = await this.store.leaseStatus({ items: running.map((a) => ({ id: a.job.id, lease: a.job.lease })) });
    results.forEach((r, i) => {
      this.applyStatus(running[i] as Active, r);
    });
  }

  private applyStatus(a: Active, r: LeaseStatus): void {
    if (a.settled) return;
    if (!r.ok) a.abortState.abort('lease-lost');
    else if (r.cancelRequested) a.abortState.abort(cancelKindOf(r.cancelReason));
  }

  /** For each job, the cancel kind recorded in the store, if any (null when none, or unknown). */
  async cancelRequests(list: readonly Active[]): Promise<('cancelled' | 'timeout' | null)[]> {
    try {
      const status = await this.store.leaseStatus({ items: list.map((a) => ({ id: a.job.id, lease: a.job.lease })) });
      return status.map((r) => (r.ok && r.cancelRequested ? cancelKindOf(r.cancelReason) : null));
    } catch (err) {
      // Hand the jobs back rather than not at all: the sweeper still honours a recorded cancel.
      this.o.log.error({ err }, 'could not read cancel requests at shutdown');
      return list.map(() => null);
    }
  }

  /** Arms the job's timeout, counted from its start (a job re-run after a lost worker keeps its clock). */
  armTimeout(active: Active): void {
    const { job } = active;
    if (job.timeoutMs === null) return;
    const now = this.o.clock();
    const elapsed = now - (job.startedAt ?? now);
    active.timeoutTimer = longTimeout(() => void this.requestTimeout(active), Math.max(0, job.timeoutMs - elapsed));
  }

  /**
   * The job ran past its timeout: records the cancel request, so the sweeper forces the cancel
   * after the drain period if the handler ignores its signal, then aborts the handler. The
   * write announces the request like any other (`job:cancel-requested`, which aborts this
   * attempt through the worker's own listener first; the abort below is for when the write
   * did not apply or failed, and a second abort changes nothing).
   */
  private async requestTimeout(active: Active): Promise<void> {
    if (active.settled || active.abortState.aborted) return;
    const { job } = active;
    try {
      await applyTransition(this.store, this.o.bus, job, requestTimeout(job, this.o.workerId, this.o.clock()));
    } catch (err) {
      // Called from a timer: a rejection here would be unhandled. The sweeper records the request instead.
      this.o.log.error({ err, ...jobLogFields(job) }, 'could not record the timeout; aborting the handler anyway');
    }
    active.abortState.abort('timeout');
  }
}
