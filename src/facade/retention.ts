/**
 * Retention of an instance: the periods of its tasks (a task's own retention overrides the
 * instance's), and retention 0 (delete on completion) applied soon after a job ends in this
 * process rather than at the next sweep. The sweeper's pass runs the rest (facade/instance.ts).
 */
import type { Logger } from 'pino';
import { isRelayed } from '../channel/bridge.js';
import type { JobBus } from '../channel/bus.js';
import type { RetentionPolicy } from '../core/retention.js';
import type { Eraser } from './erase.js';
import type { Task } from '../task-api/define.js';

/** The retention overrides of the tasks registered here (a task without one follows the instance's). */
export function taskRetention(tasks: ReadonlyMap<string, Task>): Map<string, RetentionPolicy> {
  const out = new Map<string, RetentionPolicy>();
  for (const [type, task] of tasks) if (task.retention && Object.keys(task.retention).length > 0) out.set(type, task.retention);
  return out;
}

export interface RetentionOnEndContext {
  readonly bus: JobBus;
  readonly eraser: Eraser;
  readonly logger: Logger;
  /** The instance's periods. */
  readonly retention: RetentionPolicy;
  /** The tasks registered here (registration may add more after open). */
  readonly tasks: ReadonlyMap<string, Task>;
  readonly isClosed: () => boolean;
}

export class RetentionOnEnd {
  private timer: NodeJS.Timeout | null = null;
  private retaining: Promise<void> | null = null;
  private again = false;

  constructor(private readonly ctx: RetentionOnEndContext) {}

  /**
   * Retention 0 (delete on completion): a job that ends in this process is deleted at once,
   * not at the next sweep. Most are deleted by the worker's own write that ends them; the
   * others (result files to delete, a webhook, a parent or children; ends written elsewhere:
   * cancels, timeouts) here, debounced and coalesced like webhook dispatch, in batches of many.
   * Listens only when some period is 0 now; returns the removal (and of a planned pass).
   */
  listen(): () => void {
    const off = this.hasZeroRetention()
      ? this.ctx.bus.on('job:changed', (e) => {
          if (e.to !== 'succeeded' && e.to !== 'failed' && e.to !== 'cancelled') return;
          // Deleted already by the write that ended it (a worker's outcome: TransitionParams.deleteOnEnd).
          if (e.deleted || isRelayed(e)) return;
          this.retainSoon();
        })
      : () => {};
    return () => {
      off();
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
    };
  }

  /** Resolves when the pass in progress, if any, has ended. */
  async settled(): Promise<void> {
    await this.retaining;
  }

  /** True when some end state is deleted on completion (instance-wide or for some task). */
  private hasZeroRetention(): boolean {
    const zero = (p: RetentionPolicy) => Object.values(p).some((ms) => ms === 0);
    return zero(this.ctx.retention) || [...this.ctx.tasks.values()].some((t) => zero(t.retention ?? {}));
  }

  /** A retention pass of the periods that are 0 soon (one at a time, plus one more if asked meanwhile). */
  private retainSoon(): void {
    if (this.retaining) {
      this.again = true;
      return;
    }
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      const zeroOnly = Object.fromEntries(Object.entries(this.ctx.retention).filter(([, ms]) => ms === 0)) as RetentionPolicy;
      this.retaining = (async () => {
        try {
          do {
            this.again = false;
            // Every rule retentionRules makes is correct on its own: the instance's other periods are left to the sweeper.
            await this.ctx.eraser.retain(zeroOnly, taskRetention(this.ctx.tasks), Date.now());
          } while (this.again && !this.ctx.isClosed());
        } catch (err) {
          this.ctx.logger.error({ err }, 'retention on completion failed');
        } finally {
          this.retaining = null;
        }
      })();
    }, 20);
    this.timer.unref?.();
  }
}
