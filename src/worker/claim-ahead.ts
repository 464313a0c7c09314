/**
 * How many jobs a worker claims beyond its free slots: as many as its handlers get through
 * during one store cycle (concurrency × cycle time / handler time), so that slots never wait for
 * a round trip while work is queued, and a job claimed ahead waits about one cycle at most.
 * Slow handlers get none. Both times are moving averages the claim loop feeds.
 */

/** Exponential moving average (new samples weigh 1/4); the first sample starts it. */
function average(prev: number, sample: number): number {
  return Number.isNaN(prev) ? sample : prev + (sample - prev) / 4;
}

export class ClaimAhead {
  /** Moving averages (ms) of a handler's run time and of a store cycle; NaN until measured. */
  private handlerMs = Number.NaN;
  private cycleMs = Number.NaN;
  /** performance.now() until which nothing is claimed ahead (after jobs waited too long for a slot). */
  private pausedUntil = 0;

  /** `max` 0 turns it off (see WorkerOptions.claimAhead). */
  constructor(
    private readonly concurrency: number,
    private readonly max: number,
  ) {}

  handlerRan(ms: number): void {
    this.handlerMs = average(this.handlerMs, ms);
  }

  cycleRan(ms: number): void {
    this.cycleMs = average(this.cycleMs, ms);
  }

  /** The estimate was wrong (jobs claimed ahead waited too long): claim for free slots only until `until`. */
  pause(until: number): void {
    this.pausedUntil = until;
  }

  /** How many jobs to hold beyond the free slots now. */
  target(): number {
    if (this.max === 0 || !(this.handlerMs >= 0) || !(this.cycleMs >= 0)) return 0;
    if (performance.now() < this.pausedUntil) return 0;
    const n = Math.floor((this.concurrency * this.cycleMs) / Math.max(this.handlerMs, 0.001));
    if (n >= this.max) return this.max;
    // Rounded down to a power of two: the averages move all the time, and a store may prepare
    // one statement per claim size (SQLite does), which an idle worker would pay on its next claim.
    return n < 1 ? 0 : 2 ** Math.floor(Math.log2(n));
  }
}
