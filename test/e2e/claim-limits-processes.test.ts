/**
 * Limits held across processes: three built `longhaul worker` processes (dist/cli/main.js, run
 * `npm run build` first) on one database, SQLite file or PostgreSQL, running the tasks of
 * test/fixtures/limit-tasks.mjs.
 * - The rate limiter's accuracy: 20 starts per second for 10 s. Every window of 1 s from any
 *   start holds at most 20 starts, and each of the 10 consecutive seconds from the first start
 *   holds 19 or 20 (within 5 % of the limit).
 * - A per-key limit under contention: at most 2 jobs of one customer run at once, while the
 *   others' jobs run beside them.
 * Start times are the jobs' `startedAt` (the claim, which is what the limiter counts); handler
 * intervals come from the jobs' results.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import type { JobState } from '../../src/core/states.js';
import { type JobSnapshot, Longhaul } from '../../src/index.js';
import { killAllChildren, startCliWorkers, tempDir, type WorkerChild, waitFor } from '../fixtures/process-harness.js';
import { createTestDatabase } from '../support/postgres.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const TASKS = join(ROOT, 'test/fixtures/limit-tasks.mjs');
const ENV: Record<string, string> = { LONGHAUL_LOG_LEVEL: 'warn', LONGHAUL_PG_POOL_SIZE: '4', LONGHAUL_REDIS_URL: '' };

after(() => killAllChildren());

function startWorkers(database: string): Promise<WorkerChild[]> {
  return startCliWorkers({ tasks: TASKS, database, labels: ['worker-1', 'worker-2', 'worker-3'], concurrency: 8, env: ENV });
}

/** Every job of a type in the given states, page by page. */
async function listAll(lh: Longhaul, type: string, status: JobState[]): Promise<JobSnapshot[]> {
  const out: JobSnapshot[] = [];
  let cursor: string | null = null;
  do {
    const page = await lh.list({ type, status, limit: 100, cursor });
    out.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

/** The most intervals open at once (an end at the same ms as a start closes first). */
function maxOverlap(intervals: Array<{ start: number; end: number }>): number {
  const points = intervals.flatMap((i) => [
    [i.start, 1],
    [i.end, -1],
  ]) as [number, number][];
  points.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let most = 0;
  for (const [, d] of points) {
    open += d;
    most = Math.max(most, open);
  }
  return most;
}

const TARGETS = [
  {
    name: 'SQLite',
    async database() {
      const tmp = tempDir('longhaul-limits-e2e-');
      return { url: join(tmp.dir, 'jobs.db'), drop: async () => tmp.remove() };
    },
  },
  {
    name: 'PostgreSQL',
    async database() {
      const db = await createTestDatabase('lh_limits_e2e');
      return { url: db.url, drop: () => db.drop() };
    },
  },
];

for (const target of TARGETS) {
  describe(`limits with three worker processes on ${target.name}`, () => {
    it('a rate limit of 20 per second holds across the workers for 10 s, each second within 5 % of it', async (t) => {
      const db = await target.database();
      const tasks = await import(TASKS);
      const lh = await Longhaul.open({ database: db.url, tasks, logger: pino({ level: 'silent' }), channel: false });
      let workers: WorkerChild[] = [];
      try {
        await lh.enqueueMany(Array.from({ length: 260 }, () => ({ type: 'lim.rated', input: {} })));
        workers = await startWorkers(db.url);
        const started = () => listAll(lh, 'lim.rated', ['running', 'succeeded']);
        await waitFor(async () => ((await started()).length >= 221 ? true : undefined), '221 starts', 60_000, 200);
        const starts = (await started()).map((j) => Date.parse(j.startedAt as string)).sort((a, b) => a - b);
        const t0 = starts[0] as number;
        const perSecond = Array.from({ length: 10 }, (_, k) => starts.filter((t) => t >= t0 + k * 1000 && t < t0 + (k + 1) * 1000).length);
        t.diagnostic(`starts per second: ${perSecond.join(', ')}`);
        for (const [k, n] of perSecond.entries()) assert.ok(n >= 19 && n <= 20, `second ${k}: ${n} starts (${perSecond.join(', ')})`);
        for (let i = 0; i < starts.length; i++) {
          const inWindow = starts.filter((t) => t >= (starts[i] as number) && t < (starts[i] as number) + 1000).length;
          assert.ok(inWindow <= 20, `${inWindow} starts in the second from start ${i}`);
        }
      } finally {
        for (const w of workers) await w.kill();
        await lh.close();
        await db.drop();
      }
    });

    it('a per-key limit of 2 holds across the workers while other keys run beside it', async () => {
      const db = await target.database();
      const tasks = await import(TASKS);
      const lh = await Longhaul.open({ database: db.url, tasks, logger: pino({ level: 'silent' }), channel: false });
      let workers: WorkerChild[] = [];
      try {
        const customers = ['big', 'big', 'big', 'big', 'big', 'big', 'big', 'big', 'big', 'big', 'big', 'big', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6'];
        const jobs = [...customers, ...customers].map((customer) => ({ type: 'lim.keyed', input: { customer } }));
        await lh.enqueueMany(jobs);
        workers = await startWorkers(db.url);
        const done = () => listAll(lh, 'lim.keyed', ['succeeded']);
        await waitFor(async () => ((await done()).length === jobs.length ? true : undefined), 'every job done', 120_000, 200);
        const runs = (await done()).map((j) => j.result as { customer: string; start: number; end: number });
        const byCustomer = new Map<string, typeof runs>();
        for (const r of runs) byCustomer.set(r.customer, [...(byCustomer.get(r.customer) ?? []), r]);
        for (const [customer, list] of byCustomer) assert.ok(maxOverlap(list) <= 2, `${customer}: ${maxOverlap(list)} at once`);
        assert.equal(maxOverlap(byCustomer.get('big') ?? []), 2, 'the big customer used its two places');
        assert.ok(maxOverlap(runs) >= 6, `the other customers ran beside it (${maxOverlap(runs)} at most at once)`);
      } finally {
        for (const w of workers) await w.kill();
        await lh.close();
        await db.drop();
      }
    });
  });
}
