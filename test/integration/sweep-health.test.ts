/**
 * The stalled and zombie figures are cluster-wide: two Longhaul instances on one database (a
 * SQLite file, a PostgreSQL schema), only the first running the sweeper, the second serving
 * HTTP. A job whose worker is gone (claimed, never heartbeating) is reaped and a job making no
 * progress is flagged stalled by the first; the second's `/v1/stats`, `lh.stats()` and
 * `/metrics` (`longhaul_stalled_jobs`) show both, although its own sweeper counters stay at 0.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import type { JobStats } from '../../src/core/api-types.js';
import { uuidv7 } from '../../src/core/ids.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { NewJob, Store } from '../../src/store/store.js';
import { pollUntil } from '../support/poll.js';
import { createTestDatabase } from '../support/postgres.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const pgDb = await createTestDatabase('lh_sweep_health');
after(() => pgDb.drop());

/** Two stores on one database. */
const backends: Array<{ name: string; pair(): [Store, Store] }> = [
  {
    name: 'sqlite',
    pair() {
      const dir = mkdtempSync(join(tmpdir(), 'longhaul-sweep-health-'));
      dirs.push(dir);
      const path = join(dir, 'jobs.db');
      return [new SqliteStore({ path }), new SqliteStore({ path })];
    },
  },
  {
    name: 'postgres',
    pair: () => [new PostgresStore({ connectionString: pgDb.url, schema: 'health' }), new PostgresStore({ connectionString: pgDb.url, schema: 'health' })],
  },
];

function job(type: string, timeouts: { heartbeatTimeoutMs: number; stallTimeoutMs: number | null }): NewJob {
  const now = Date.now();
  return {
    id: uuidv7(),
    tenant: 'default',
    type,
    state: 'queued',
    priority: 'normal',
    input: null,
    metadata: null,
    maxAttempts: 5,
    runAt: now,
    createdAt: now,
    timeoutMs: null,
    resultTtlMs: 60_000,
    parentId: null,
    idempotencyKey: null,
    requestHash: null,
    ...timeouts,
  };
}

/** A sample's value in a Prometheus text exposition (no labels), or null. */
function sample(text: string, name: string): number | null {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? null : Number(line.slice(name.length + 1));
}

for (const backend of backends) {
  describe(`stalled and zombie counts across instances: ${backend.name}`, () => {
    let sweeping: Longhaul;
    let serving: Longhaul;
    let app: FastifyInstance;
    let stores: [Store, Store];

    before(async () => {
      stores = backend.pair();
      const logger = pino({ level: 'silent' });
      sweeping = await Longhaul.open({ store: stores[0], logger, sweepIntervalMs: 50 });
      serving = await Longhaul.open({ store: stores[1], logger, sweepIntervalMs: 50 });
      sweeping.startSweeper();
      // `serving` never starts a sweeper (nor a worker): it only answers HTTP.
      app = await buildServer({ lh: serving, logger: false });
    });
    after(async () => {
      await app.close();
      await serving.close();
      await sweeping.close();
      for (const s of stores) await s.close();
    });

    it("the serving instance shows the sweeping instance's reaps and stalls, read from the database", async () => {
      const before = await serving.stats();
      assert.deepEqual(before.sweeper, { stalled: 0, zombiesReaped: 0 });

      // Claimed by a "worker" that never heartbeats (a zombie once 100 ms pass), and by one that
      // heartbeats for a minute but never reports progress (stalled after 100 ms).
      const zombie = job('health.zombie', { heartbeatTimeoutMs: 100, stallTimeoutMs: null });
      const slow = job('health.slow', { heartbeatTimeoutMs: 60_000, stallTimeoutMs: 100 });
      await stores[1].insertJobs({ jobs: [zombie, slow] });
      const claimed = await stores[1].claimJobs({ workerId: 'gone', types: [{ type: 'health.zombie' }, { type: 'health.slow' }], limit: 10, now: Date.now() });
      assert.equal(claimed.length, 2);

      const stats = await pollUntil(
        async () => {
          const res = await app.inject({ method: 'GET', url: '/v1/stats' });
          assert.equal(res.statusCode, 200, res.body);
          const body = res.json() as JobStats;
          return body.sweeper.stalled === 1 && body.sweeper.zombiesReaped === 1 ? body : undefined;
        },
        'the reap and the stall in /v1/stats of the instance that does not sweep',
        20_000,
      );
      assert.equal(stats.counts.running, 1, 'the stalled job still runs');
      assert.equal((await serving.get(slow.id))?.stalled, true);
      const reaped = await serving.attempts(zombie.id);
      assert.deepEqual(
        reaped.items.map((a) => [a.outcome, a.reason]),
        [['retrying', 'heartbeat lost; requeued']],
      );
      assert.deepEqual((await serving.stats()).sweeper, { stalled: 1, zombiesReaped: 1 });
      assert.deepEqual((await sweeping.stats()).sweeper, { stalled: 1, zombiesReaped: 1 }, 'the same figures on both');

      const metrics = await app.inject({ method: 'GET', url: '/metrics' });
      assert.equal(metrics.statusCode, 200);
      assert.equal(sample(metrics.body, 'longhaul_stalled_jobs'), 1, 'the gauge is read from the database');
      assert.equal(sample(metrics.body, 'longhaul_zombies_reaped_total'), 0, "this process's own sweeper counter: it did not sweep");
      assert.equal(sample(metrics.body, 'longhaul_jobs_stalled_total'), 0);

      // Progress resumes: the job is stalled no longer, on every instance; the reap stays counted.
      const [lease] = claimed.filter((j) => j.id === slow.id);
      assert.ok(lease);
      assert.ok(
        await stores[1].saveProgress({
          id: slow.id,
          lease: lease.lease,
          progress: { percent: 50, stage: null, itemsDone: null, itemsTotal: null, message: null, eta: null, updatedAt: new Date().toISOString() },
          now: Date.now(),
        }),
      );
      await pollUntil(async () => ((await serving.stats()).sweeper.stalled === 0 ? true : undefined), 'the stall to clear', 10_000);
      assert.equal((await serving.stats()).sweeper.zombiesReaped, 1);
    });
  });
}
