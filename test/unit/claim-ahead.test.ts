/**
 * The claim-ahead estimate (src/worker/claim-ahead.ts): about as many jobs beyond the free slots
 * as the handlers finish during one store cycle; after a store outage, none until both times
 * are measured again, from cycles after the first one that succeeds and from handlers started
 * after it; and one slow cycle does not make it claim hundreds ahead.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClaimAhead } from '../../src/worker/claim-ahead.js';

const CONCURRENCY = 10;

/** Handlers of `handlerMs` and cycles of `cycleMs`, `n` of each. */
function steady(ahead: ClaimAhead, handlerMs: number, cycleMs: number, n = 8): void {
  for (let i = 0; i < n; i++) {
    ahead.handlerRan(handlerMs);
    ahead.cycleRan(cycleMs);
  }
}

describe('claim-ahead', () => {
  it('claims about what the handlers finish during one cycle, rounded down to a power of two', () => {
    const ahead = new ClaimAhead(CONCURRENCY, 500);
    assert.equal(ahead.target(), 0, 'nothing before anything was measured');
    steady(ahead, 2, 5);
    assert.equal(ahead.target(), 16, '10 × 5 / 2 = 25');
  });

  it('after an outage: nothing ahead until measured again, and neither the handlers that ran during it nor the first cycle after it count', async () => {
    const ahead = new ClaimAhead(CONCURRENCY, 500);
    steady(ahead, 2, 5);
    assert.equal(ahead.target(), 16);
    // The outage: cycles fail; the jobs claimed ahead start and fail at once (their own writes
    // go to the same database).
    ahead.storeFailed();
    assert.equal(ahead.target(), 0, 'free slots only once the store fails');
    for (let i = 0; i < 16; i++) ahead.handlerRan(0.05);
    ahead.storeFailed();
    // The first cycle that succeeds after it: new connections to a server that just started.
    ahead.cycleRan(800);
    assert.equal(ahead.target(), 0, 'still nothing ahead: nothing measured since');
    // A handler that started during the outage and ends now (ran 400 ms) is not a sample.
    ahead.handlerRan(400);
    ahead.cycleRan(5);
    assert.equal(ahead.target(), 0, 'no handler measured since the store came back');
    // Handlers that start after the store came back (here 2 ms long, 10 ms after it) count.
    await new Promise((resolve) => setTimeout(resolve, 10));
    steady(ahead, 2, 5, 1);
    assert.equal(ahead.target(), 16, 'measured again: the same as before the outage');
  });

  it('one slow cycle moves the estimate by less than a factor of two, not by a hundred', () => {
    const ahead = new ClaimAhead(CONCURRENCY, 500);
    steady(ahead, 2, 5);
    assert.equal(ahead.target(), 16);
    ahead.cycleRan(4000);
    assert.ok(ahead.target() <= 32, `one 4-second cycle after 5 ms ones: ${ahead.target()} ahead`);
    // A store that really got slower is followed within a few cycles.
    for (let i = 0; i < 12; i++) ahead.cycleRan(40);
    assert.equal(ahead.target(), 128, '10 × 40 / 2 = 200');
  });

  it('slow handlers get none, and `max` bounds it', () => {
    const slow = new ClaimAhead(CONCURRENCY, 500);
    steady(slow, 500, 5);
    assert.equal(slow.target(), 0);
    const capped = new ClaimAhead(CONCURRENCY, 100);
    steady(capped, 0.1, 20);
    assert.equal(capped.target(), 100);
  });
});
