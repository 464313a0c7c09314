/**
 * How many jobs a worker claims beyond its free slots: as many as its handlers get through
 * during one store cycle (concurrency × cycle time / handler time), so that slots never wait for
 * a round trip while work is queued, and a job claimed ahead waits about one cycle at most.
 * Slow handlers get none. Both times are moving averages the claim loop feeds.
 *
 * A store outage breaks both. Cycles fail and are not timed; handlers that run meanwhile are not
 * what they will be (the jobs claimed ahead start and fail at once when their own writes go to
 * the same database: a few such samples take the handler average down to nothing); and the
 * first cycle after it pays for new connections to a server that just started, many times a
 * usual round trip, with a quarter of the average's weight. A chaos run saw a worker claim 218
 * jobs ahead for its 10 slots right after a 10-second outage and hand them back a second later
 * (issue 34; test/integration/claim-ahead-outage.test.ts shows the mechanism). So an outage forgets what was measured: the worker claims for its free slots only until both
 * times are measured again, from cycles after the first one that succeeds and from handlers
 * started after it. And a cycle counts for at most four times the average: a slow one now and
 * then (a lock wait, a checkpoint of the server) is not the store's round trip, while a store
 * that really got slower is followed within a few cycles.
 */

/** Exponential moving average (new samples weigh 1/4); the first sample starts it. */
function average(prev: number, sample: number): number {
  return Number.isNaN(prev) ? sample : prev + (sample - prev) / 4;
}

/** A cycle sample counts for at most this many times the average (a sudden slow one is an outlier). */
const MAX_CYCLE_JUMP = 4;

export class ClaimAhead {
  /** Moving averages (ms) of a handler's run time and of a store cycle; NaN until measured. */
  private handlerMs = Number.NaN;
  private cycleMs = Number.NaN;
  /** performance.now() until which nothing is claimed ahead (after jobs waited too long for a slot). */
  private pausedUntil = 0;
  /** A store cycle failed and none has succeeded since. */
  private failing = false;
  /** performance.now() of the first cycle that succeeded after the last failure: handlers started before it are not measured. */
  private measuredFrom = 0;

  /** `max` 0 turns it off (see WorkerOptions.claimAhead). */
  constructor(
    private readonly concurrency: number,
    private readonly max: number,
  ) {}

  handlerRan(ms: number): void {
    // Started while the store was failing, or before it came back: not a measure of what follows.
    if (this.failing || performance.now() - ms < this.measuredFrom) return;
    this.handlerMs = average(this.handlerMs, ms);
  }

  /** A claiming store cycle succeeded after `ms`. */
  cycleRan(ms: number): void {
    if (this.failing) {
      // The first after an outage: new connections, a server just started. Measuring starts now.
      this.failing = false;
      this.measuredFrom = performance.now();
      return;
    }
    this.cycleMs = average(this.cycleMs, Number.isNaN(this.cycleMs) ? ms : Math.min(ms, MAX_CYCLE_JUMP * this.cycleMs));
  }

  /** A store cycle failed: both times are measured again once the store answers (see above). */
  storeFailed(): void {
    this.failing = true;
    this.handlerMs = Number.NaN;
    this.cycleMs = Number.NaN;
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
