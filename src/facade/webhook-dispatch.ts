/**
 * Webhook dispatch of an instance: enqueueing the delivery jobs of pending webhook events
 * (webhooks/service.ts), one run at a time, and soon after a job ends in this process rather
 * than at the next sweep.
 */
import type { Logger } from 'pino';
import { isRelayed } from '../channel/bridge.js';
import type { JobBus } from '../channel/bus.js';
import type { Store } from '../store/store.js';
import { dispatchWebhookEvents, type WebhookConfig } from '../webhooks/service.js';

export interface WebhookDispatchContext {
  readonly store: Store;
  readonly bus: JobBus;
  readonly logger: Logger;
  readonly webhookConfig: WebhookConfig;
  readonly heartbeatTimeoutMs: number;
  /** True once the instance stopped writing: a run then enqueues nothing more. */
  readonly isClosed: () => boolean;
}

export class WebhookDispatch {
  private running: Promise<void> | null = null;
  private again = false;

  constructor(private readonly ctx: WebhookDispatchContext) {}

  /** Enqueues the delivery jobs of pending webhook events (coalesced: one run at a time, plus one more if asked meanwhile). */
  run(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    const { store, bus, logger, webhookConfig, heartbeatTimeoutMs } = this.ctx;
    this.running = (async () => {
      try {
        do {
          this.again = false;
          if (this.ctx.isClosed()) return;
          await dispatchWebhookEvents({
            store,
            config: webhookConfig,
            heartbeatTimeoutMs,
            logger,
            insert: async (job) => {
              const res = await store.insertJob({ job });
              if (res.kind === 'created') bus.emit('job:submitted', { job: res.job });
              return res;
            },
          });
        } while (this.again);
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  /**
   * A job that ends in this process has its webhook enqueued at once, not at the next sweep.
   * Debounced: a busy worker ends thousands of jobs a second, and most have no webhook. Returns
   * the removal of the listener (and of a run it has planned).
   */
  onEnds(): () => void {
    const { bus, logger } = this.ctx;
    let soon: NodeJS.Timeout | null = null;
    const off = bus.on('job:changed', (e) => {
      // Relayed ends are dispatched by the process where they happened (the outbox makes a double dispatch harmless, not free).
      // A job deleted by the write that ended it (retention 0) had no webhook: the stores delete
      // only jobs that own none.
      if (soon || (e.to !== 'succeeded' && e.to !== 'failed' && e.to !== 'cancelled') || e.deleted || isRelayed(e)) return;
      soon = setTimeout(() => {
        soon = null;
        this.run().catch((err) => logger.error({ err }, 'webhook dispatch failed'));
      }, 10);
      soon.unref?.();
    });
    return () => {
      off();
      if (soon) clearTimeout(soon);
    };
  }

  /** Resolves when the run in progress, if any, has ended (its error is not this caller's). */
  async settled(): Promise<void> {
    await this.running?.catch(() => {});
  }
}
