/**
 * The workers an instance started: their handles, their health together, stopping them all, and
 * the process signals that drain them (`startWorker({ handleSignals })`). The Worker itself is
 * made by the composition root (facade/instance.ts), which knows what it is wired to.
 */
import type { Logger } from 'pino';
import type { Worker, WorkerHealth, WorkerOptions } from '../worker/runtime.js';

export interface StartWorkerOptions
  extends Partial<Pick<WorkerOptions, 'concurrency' | 'workerId' | 'pollIntervalMs' | 'cancelPollMs' | 'progressIntervalMs' | 'claimAhead' | 'claimedWaitMs'>> {
  /** Also run the sweeper in this process. Default true. */
  sweeper?: boolean;
  /** Drain running jobs and exit on SIGTERM/SIGINT. Default false (the CLI turns it on). */
  handleSignals?: boolean;
  /** How long a graceful stop waits for running jobs before handing them back. Default 10 000 ms. */
  drainMs?: number;
}

export interface WorkerHandle {
  readonly id: string;
  readonly stats: Worker['stats'];
  stop(options?: { drainMs?: number }): Promise<void>;
  idle(): Promise<void>;
  /** Unhealthy past `maxAbandonedHandlers` abandoned handlers still pending (worker/stuck-handlers.ts). */
  health(): WorkerHealth;
}

export class WorkerSet {
  private readonly handles = new Set<WorkerHandle>();

  /** Starts a worker and keeps its handle until it stops; `drainMs` is its stop's default drain. */
  add(worker: Worker, drainMs: number): WorkerHandle {
    worker.start();
    const handle: WorkerHandle = {
      id: worker.id,
      stats: worker.stats,
      stop: async (o = {}) => {
        await worker.stop({ drainMs: o.drainMs ?? drainMs });
        this.handles.delete(handle);
      },
      idle: () => worker.idle(),
      health: () => worker.health,
    };
    this.handles.add(handle);
    return handle;
  }

  /** The health of this process's workers together: healthy when each is (and when none runs). */
  health(): WorkerHealth {
    let abandonedPending = 0;
    const reasons: string[] = [];
    for (const w of this.handles) {
      const h = w.health();
      abandonedPending += h.abandonedPending;
      if (!h.healthy && h.reason) reasons.push(h.reason);
    }
    return reasons.length === 0 ? { healthy: true, abandonedPending } : { healthy: false, abandonedPending, reason: reasons.join('; ') };
  }

  /** Stops every worker (each hands back the jobs it could not finish within the drain). */
  async stopAll(options: { drainMs?: number }): Promise<void> {
    await Promise.all([...this.handles].map((w) => w.stop(options.drainMs === undefined ? {} : { drainMs: options.drainMs })));
  }
}

/**
 * On SIGTERM or SIGINT: closes the instance (draining running jobs for `drainMs`) and exits, 0
 * or 1 if the shutdown failed; a second signal exits at once (130). Returns the removal of the
 * handlers.
 */
export function exitOnSignals(logger: Logger, drainMs: number, close: (options: { drainMs: number }) => Promise<void>): () => void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(130);
    }
    stopping = true;
    logger.info({ signal, drainMs }, 'shutting down: draining running jobs');
    close({ drainMs })
      .then(() => process.exit(0))
      .catch((err) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      });
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}
