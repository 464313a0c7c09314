/**
 * Claiming ahead after a store outage (src/worker/claim-ahead.ts). A worker with quick handlers
 * claims a few jobs beyond its free slots; then the database goes away for a second. The jobs
 * claimed ahead start meanwhile and fail at once (their handlers write to the same database),
 * and the worker's cycles fail; the first cycle after the outage is slow (new connections to a
 * server that just started). Before the fix, that one cycle (weighing a quarter of the moving
 * average) and the instant failures made the worker's first claims after the outage ask for
 * over a hundred jobs for its 10 slots (the issue saw 218, handed back a second later). Now an
 * outage forgets what was measured: the worker claims for its free slots until it has measured
 * again, and the first cycle after it is not taken for a round trip.
 *
 * The store is SQLite behind a wrapper that adds a round trip's latency (5 ms) to every worker
 * cycle and declares two cycles in flight, as PostgreSQL does, fails every call with
 * ECONNREFUSED while "down", and takes 250 ms more for the first cycle after. The handlers fail
 * the same way while it is down.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { defineTask, Longhaul } from '../../src/index.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { tempDir, waitFor } from '../fixtures/process-harness.js';

const CONCURRENCY = 10;

function refused(): Error {
  return Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
}

interface Claim {
  at: number;
  limit: number;
  got: number;
}

/** The store as a worker across a network sees it, with a switch that takes it away. */
function flakyStore(inner: SqliteStore, state: { down: boolean; cold: boolean }, claims: Claim[]): Store {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'capabilities') return { ...target.capabilities, claimDepth: 2 };
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || prop === 'close') return value;
      if (prop === 'completeAndClaim') {
        return async (params: Parameters<Store['completeAndClaim']>[0]) => {
          await sleep(5);
          if (state.down) throw refused();
          if (state.cold) {
            state.cold = false;
            await sleep(250);
          }
          const out = await target.completeAndClaim(params);
          claims.push({ at: performance.now(), limit: params.claim.limit, got: out.jobs.length });
          return out;
        };
      }
      return (...args: unknown[]) => {
        if (state.down) return Promise.reject(refused());
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as unknown as Store;
}

describe('claiming ahead after a store outage', () => {
  it('claims for its free slots, not hundreds ahead, once the store answers again; nothing is handed back', async () => {
    const tmp = tempDir('lh-ca-outage-');
    const state = { down: false, cold: false };
    const claims: Claim[] = [];
    const inner = new SqliteStore({ path: join(tmp.dir, 'longhaul.db') });
    const quick = defineTask({
      type: 'cao.quick',
      maxAttempts: 5,
      async run() {
        // A handler whose own writes go to the database: quick while it answers, failing at once while it does not.
        if (state.down) throw refused();
        await sleep(3);
        if (state.down) throw refused();
        return null;
      },
    });
    const lh = await Longhaul.open({ store: flakyStore(inner, state, claims), tasks: [quick], logger: pino({ level: 'silent' }), heartbeatTimeoutMs: 60_000 });
    try {
      await lh.submitMany(Array.from({ length: 4000 }, () => ({ type: 'cao.quick', input: null })));
      const worker = await lh.startWorker({ concurrency: CONCURRENCY, sweeper: false });
      await waitFor(() => worker.stats.succeeded >= 600, 'a steady run before the outage', 30_000);
      const before = claims.filter((c) => c.limit > 0).slice(-50);
      const steadyMax = Math.max(...before.map((c) => c.limit));
      assert.ok(steadyMax > CONCURRENCY, `the worker claims ahead before the outage (largest of its last claims: ${steadyMax})`);

      state.down = true;
      await sleep(1_000);
      state.cold = true;
      state.down = false;
      const back = performance.now();
      await sleep(1_500);

      const after = claims.filter((c) => c.at > back && c.limit > 0);
      assert.ok(after.length > 10, `the worker claims again after the outage (${after.length} claims)`);
      const largest = Math.max(...after.map((c) => c.limit));
      assert.ok(
        largest <= Math.max(2 * steadyMax, CONCURRENCY + 32),
        `after the outage the largest claim asked for ${largest} jobs for ${CONCURRENCY} slots (before it: at most ${steadyMax}); claims: ${after
          .slice(0, 12)
          .map((c) => c.limit)
          .join(', ')}`,
      );
      assert.equal(worker.stats.handedBack, 0, 'no job claimed ahead was handed back for want of a free slot');
    } finally {
      await lh.close({ drainMs: 0 });
      await inner.close();
      tmp.remove();
    }
  });
});
