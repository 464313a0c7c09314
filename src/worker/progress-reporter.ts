/**
 * Coalesces a handler's progress calls. Every update is merged in memory; the latest value is
 * published to in-process listeners at most every `publishMs` (live streams) and persisted to
 * the store at most every `persistMs` (a few writes a second), plus a final flush. A handler
 * may call `ctx.progress()` thousands of times a second at the cost of a few writes.
 */
import { EMPTY_PROGRESS, EtaEstimator, fractionDone, mergeProgress, type Progress, type ProgressUpdate } from '../core/progress.js';

/** Runs `action` with the latest value at most once per interval, trailing edge included. */
class Throttle {
  private last = 0;
  private timer: NodeJS.Timeout | null = null;
  private dirty = false;
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly intervalMs: number,
    private readonly action: () => Promise<void> | void,
    private readonly clock: () => number,
  ) {}

  poke(): void {
    this.dirty = true;
    if (this.timer) return;
    const wait = Math.max(0, this.last + this.intervalMs - this.clock());
    if (wait === 0) {
      void this.run();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.run();
    }, wait);
    this.timer.unref?.();
  }

  run(): Promise<void> {
    if (!this.dirty) return this.chain;
    this.dirty = false;
    this.last = this.clock();
    this.chain = this.chain.then(this.action).catch(() => undefined);
    return this.chain;
  }

  async stop(flush: boolean): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (flush) await this.run();
    this.dirty = false;
    await this.chain;
  }
}

export interface ProgressSinks {
  /** Cheap, in-process delivery (the event bus). */
  publish(progress: Progress): void;
  /** The durable write (the store). */
  persist(progress: Progress): Promise<void>;
}

export class ProgressReporter {
  private current: Progress;
  private readonly eta = new EtaEstimator();
  private readonly publisher: Throttle;
  private readonly persister: Throttle;
  private closed = false;

  constructor(
    initial: Progress | null,
    intervals: { publishMs: number; persistMs: number },
    sinks: ProgressSinks,
    private readonly clock: () => number = Date.now,
  ) {
    this.current = initial ?? EMPTY_PROGRESS;
    this.publisher = new Throttle(intervals.publishMs, () => sinks.publish(this.current), clock);
    this.persister = new Throttle(intervals.persistMs, () => sinks.persist(this.current), clock);
  }

  get value(): Progress {
    return this.current;
  }

  update(update: ProgressUpdate | number): void {
    if (this.closed) return;
    const now = this.clock();
    const merged = mergeProgress(this.current, update, now);
    const fraction = fractionDone(merged);
    this.current = { ...merged, eta: fraction === null ? null : this.eta.observe(fraction, now) };
    this.publisher.poke();
    this.persister.poke();
  }

  /** Persists the latest value now if it changed since the last write. */
  flush(): Promise<void> {
    return this.persister.run();
  }

  /** Stops scheduling; with `flush`, the latest value is published and persisted first. */
  async close(flush: boolean): Promise<void> {
    this.closed = true;
    await Promise.all([this.publisher.stop(flush), this.persister.stop(flush)]);
  }
}
