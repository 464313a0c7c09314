/**
 * Schedules with real processes: three built `longhaul worker` processes (dist/cli/main.js, run
 * `npm run build` first) on one database, SQLite file or PostgreSQL, each running its sweeper
 * every 5 ms (to make races likely) and so each ticking the schedule declared in test/fixtures/schedule-tasks.mjs
 * (every second). Each tick must give exactly one job, and no tick while they ran may be lost.
 * The jobs are read from the database through the library.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { Longhaul } from '../../src/index.js';
import { killAllChildren, startCliWorkers, tempDir, type WorkerChild, waitFor } from '../fixtures/process-harness.js';
import { createTestDatabase } from '../support/postgres.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const TASKS = join(ROOT, 'test/fixtures/schedule-tasks.mjs');
const ENV: Record<string, string> = { LONGHAUL_LOG_LEVEL: 'warn', LONGHAUL_SWEEP_INTERVAL_MS: '5', LONGHAUL_PG_POOL_SIZE: '4', LONGHAUL_REDIS_URL: '' };

after(() => killAllChildren());

const TARGETS = [
  {
    name: 'SQLite',
    async database() {
      const tmp = tempDir('longhaul-sched-e2e-');
      return { url: join(tmp.dir, 'jobs.db'), drop: async () => tmp.remove() };
    },
  },
  {
    name: 'PostgreSQL',
    async database() {
      const db = await createTestDatabase('lh_sched_e2e');
      return { url: db.url, drop: () => db.drop() };
    },
  },
];

for (const target of TARGETS) {
  describe(`schedules with three worker processes on ${target.name}`, () => {
    it('each tick of a per-second schedule enqueues exactly once, and none is lost', async () => {
      const db = await target.database();
      let workers: WorkerChild[] = [];
      let lh: Longhaul | null = null;
      try {
        workers = await startCliWorkers({ tasks: TASKS, database: db.url, labels: ['worker-1', 'worker-2', 'worker-3'], concurrency: 4, env: ENV });
        lh = await Longhaul.open({ database: db.url, logger: pino({ level: 'silent' }), channel: false });
        const reader = lh;
        const runs = async () => (await reader.list({ type: 'sched.noop', limit: 1000 })).items.filter((j) => j.metadata?.schedule === 'every-second');
        // All three run together for a while.
        await sleep(4_000);
        await waitFor(async () => ((await runs()).length >= 4 ? true : undefined), 'four runs', 20_000, 100);
        for (const w of workers) await w.kill();
        const ticks = (await runs()).map((j) => String(j.metadata?.tick)).sort();
        const unique = new Set(ticks);
        assert.equal(unique.size, ticks.length, `a tick ran twice: ${ticks.join(', ')}`);
        // Consecutive seconds from the first tick to the last: no tick was lost while they ran.
        const ms = ticks.map((t) => Date.parse(t));
        for (let i = 1; i < ms.length; i++) assert.equal((ms[i] as number) - (ms[i - 1] as number), 1_000, `gap between ${ticks[i - 1]} and ${ticks[i]}`);
        const view = await lh.schedules.get('every-second');
        assert.equal(view.declared, true);
        assert.equal(view.lastRun?.at, ticks.at(-1));
      } finally {
        for (const w of workers) await w.kill();
        await lh?.close();
        await db.drop();
      }
    });
  });
}
