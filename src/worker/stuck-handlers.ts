/**
 * Handlers that do not return after their job has ended. A handler is asked to stop through
 * `ctx.signal` (a cancel, a timeout, a lease taken over by the sweeper); one that ignores it (a
 * socket read without a timeout, a driver that hangs) would hold its slot for ever, and a worker
 * whose slots are all held that way claims nothing while looking healthy.
 *
 * This part finds them: a started handler whose signal fired more than `abandonAfterMs` ago
 * (the cancel drain period and one sweep: by then the sweeper has forced the job's cancel) and
 * that has not returned. The worker then ends the attempt without
 * it and frees its slot (runtime.ts); JavaScript cannot stop a promise, so the handler's code
 * may still run, but every write it makes is refused by the lease. Those still pending are
 * counted: past `maxPending` the worker reports itself unhealthy (`/healthz`, `/readyz`, a log
 * line), so that a supervisor restarts the process and whatever the handlers still hold
 * (sockets, memory) is released.
 */
import type { Logger } from 'pino';
import type { JobBus } from '../channel/bus.js';
import { jobLogFields } from '../core/log-fields.js';
import type { Active } from './attempt.js';

/** Abort kinds after which the job has ended (or is being ended) without this handler. */
const ENDED_WITHOUT_HANDLER = new Set(['cancelled', 'timeout', 'lease-lost']);

export interface StuckHandlersOptions {
  log: Logger;
  bus: JobBus;
  /** How long a handler may ignore its signal before it is abandoned (the cancel drain period). */
  abandonAfterMs: number;
  /** Abandoned handlers still pending past which the worker reports itself unhealthy. */
  maxPending: number;
}

/** A worker's health as its stuck handlers make it. */
export interface WorkerHealth {
  healthy: boolean;
  /** Abandoned handlers that have not returned yet. */
  abandonedPending: number;
  /** Why it is unhealthy (absent when healthy). */
  reason?: string;
}

export class StuckHandlers {
  private pending = 0;
  private unhealthy = false;

  constructor(private readonly o: StuckHandlersOptions) {
    if (!Number.isInteger(o.abandonAfterMs) || o.abandonAfterMs < 0) throw new TypeError('abandonAfterMs must be a non-negative integer');
    if (!Number.isInteger(o.maxPending) || o.maxPending < 0) throw new TypeError('maxAbandonedHandlers must be a non-negative integer');
  }

  /** How often the worker looks for stuck handlers: often enough to free a slot soon after the drain period. */
  get checkEveryMs(): number {
    return Math.max(50, Math.min(1000, Math.floor(this.o.abandonAfterMs / 4)));
  }

  /** The handlers to abandon now among `attempts`. */
  due(attempts: Iterable<Active>, now = performance.now()): Active[] {
    const out: Active[] = [];
    for (const a of attempts) {
      if (!a.started || a.returned || a.abandoned || a.settled) continue;
      const kind = a.abortState.kind;
      if (kind === null || !ENDED_WITHOUT_HANDLER.has(kind)) continue;
      // Aborted while it waited for a slot: the drain counts from its start.
      if (now - Math.max(a.abortState.at, a.startedAt) >= this.o.abandonAfterMs) out.push(a);
    }
    return out;
  }

  /** Marks `a` abandoned: logged, announced (metrics), counted against the worker's health. */
  abandon(a: Active, now = performance.now()): void {
    a.abandoned = true;
    this.pending++;
    this.o.log.warn(
      { ...jobLogFields(a.job), abortedBy: a.abortState.kind, ignoredSignalMs: Math.round(now - Math.max(a.abortState.at, a.startedAt)), abandonedPending: this.pending },
      'handler did not return after its job ended; abandoned it and freed its slot',
    );
    this.o.bus.emit('attempt:abandoned', { job: a.job });
    this.check();
  }

  /** An abandoned handler returned at last (whatever it returned was already refused). */
  returned(a: Active): void {
    this.pending--;
    this.o.log.info({ ...jobLogFields(a.job), abandonedPending: this.pending }, 'an abandoned handler returned');
    this.o.bus.emit('attempt:abandoned-returned', { job: a.job });
    this.check();
  }

  get health(): WorkerHealth {
    if (!this.unhealthy) return { healthy: true, abandonedPending: this.pending };
    return { healthy: false, abandonedPending: this.pending, reason: `${this.pending} abandoned handlers still pending (more than ${this.o.maxPending}): restart this worker` };
  }

  private check(): void {
    const unhealthy = this.pending > this.o.maxPending;
    if (unhealthy === this.unhealthy) return;
    this.unhealthy = unhealthy;
    if (unhealthy) {
      this.o.log.error({ abandonedPending: this.pending, maxAbandonedHandlers: this.o.maxPending }, 'too many abandoned handlers still pending; this worker reports itself unhealthy (restart it)');
    } else {
      this.o.log.info({ abandonedPending: this.pending, maxAbandonedHandlers: this.o.maxPending }, 'abandoned handlers returned; this worker is healthy again');
    }
  }
}
