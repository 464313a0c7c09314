/**
 * The dashboard with 100,000 jobs in the database, on SQLite and on PostgreSQL: how long the
 * overview and the jobs page take to show their figures in Chromium (Debian's, through
 * playwright-core), and the API reads behind them.
 *
 *   npm run build   # the dashboard is served from dist/web
 *   node --import tsx bench/dashboard.ts [--store sqlite,pg] [--jobs 100000] [--runs 5]
 *        [--pg postgres://postgres@127.0.0.1:5432/postgres]
 *
 * Per store: a fresh database; `jobs` jobs of four types bulk-enqueued with metadata (one type
 * fails), 90 % of them run by a worker (so the states, durations and failures are real), the
 * rest left queued. Then the server (no worker) and, per run, a fresh browser context (cold
 * cache, as a first visit) that opens `/#/` until the overview shows its counts, and then
 * `/#/jobs` until the first page of rows is drawn (time from navigation start, as measured by
 * the page's clock: `performance.now()` when the condition holds). Also times `GET /v1/stats`
 * and `GET /v1/jobs?limit=50` from Node. Prints medians (and max) per store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { chromium } from 'playwright-core';
import { defineTask, FatalError, Longhaul } from '../src/index.js';
import { FsBlobStore } from '../src/blobs/fs-store.js';
import { buildServer } from '../src/server/app.js';
import { withDatabase } from './lib/pg-database.js';
import { loadNote, median, numFlag, strFlag, table, until } from './lib/util.js';

const JOBS = numFlag('jobs', 100_000);
const RUNS = numFlag('runs', 5);
const STORES = (strFlag('store') ?? 'sqlite,pg').split(',');
const CHROMIUM = process.env.LONGHAUL_CHROMIUM ?? '/usr/bin/chromium';
const logger = pino({ level: 'silent' });
const TYPES = ['report.build', 'email.send', 'image.resize', 'sync.crm'] as const;
const tasks = TYPES.map((type) =>
  defineTask({
    type,
    maxAttempts: 1,
    run: (input) => {
      if (type === 'sync.crm' && (input as { n: number }).n % 3 === 0) throw new FatalError('remote answered 503', { code: 'UPSTREAM_UNAVAILABLE' });
      return { ok: true };
    },
  }),
);
const dir = mkdtempSync(join(tmpdir(), 'longhaul-bench-dashboard-'));

interface Sample {
  overviewMs: number;
  jobsMs: number;
  statsApiMs: number;
  listApiMs: number;
}

async function seed(lh: Longhaul): Promise<void> {
  const t0 = performance.now();
  for (let i = 0; i < JOBS; i += 1000) {
    await lh.submitMany(
      Array.from({ length: Math.min(1000, JOBS - i) }, (_, j) => {
        const n = i + j;
        return { type: TYPES[n % TYPES.length] as string, input: { n }, options: { metadata: { customer: `c-${n % 997}`, batch: Math.floor(n / 1000) } } };
      }),
    );
  }
  const target = Math.floor(JOBS * 0.9);
  const worker = await lh.startWorker({ concurrency: 50 });
  await until(() => worker.stats.succeeded + worker.stats.failed >= target, 5);
  await worker.stop();
  console.error(`  seeded ${JOBS} jobs (${Math.round((await lh.stats()).counts.queued ?? 0)} left queued) in ${Math.round(performance.now() - t0)} ms`);
}

async function timeFetch(url: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url);
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`${url} answered ${res.status}`);
  return performance.now() - t0;
}

async function measure(database: string): Promise<Sample[]> {
  const lh = await Longhaul.open({
    database,
    tasks,
    logger,
    // PostgreSQL has no file to keep a URL-signing secret and blobs next to.
    files: { urlSigningSecret: 'bench-dashboard-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(dir, `blobs-${Date.now()}`)) },
  });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  try {
    await seed(lh);
    const app = await buildServer({ lh, logger: false });
    const base = await app.listen({ port: 0, host: '127.0.0.1' });
    const samples: Sample[] = [];
    try {
      for (let run = 0; run <= RUNS; run++) {
        const context = await browser.newContext({ baseURL: base });
        const page = await context.newPage();
        await page.goto('/#/');
        // The overview is ready when the state counts are drawn with the seeded total.
        await page.waitForFunction(
          (total) => {
            const cells = [...document.querySelectorAll('[data-testid="state-counts"] td.num')];
            return cells.length > 0 && cells.reduce((a, c) => a + Number((c.textContent ?? '').replaceAll(',', '')), 0) === total;
          },
          JOBS,
          { timeout: 60_000, polling: 'raf' },
        );
        const overviewMs = await page.evaluate(() => performance.now());
        await page.goto('about:blank');
        await page.goto('/#/jobs');
        await page.waitForFunction(() => document.querySelectorAll('[data-testid="jobs-table"] tbody tr[data-job-id]').length === 50, undefined, {
          timeout: 60_000,
          polling: 'raf',
        });
        const jobsMs = await page.evaluate(() => performance.now());
        await context.close();
        const statsApiMs = await timeFetch(`${base}/v1/stats`);
        const listApiMs = await timeFetch(`${base}/v1/jobs?limit=50`);
        // Run 0 warms the server (statement caches, JIT): not counted.
        if (run > 0) samples.push({ overviewMs, jobsMs, statsApiMs, listApiMs });
        console.error(
          `  run ${run}${run === 0 ? ' (warm-up)' : ''}: overview ${Math.round(overviewMs)} ms, jobs ${Math.round(jobsMs)} ms, GET /v1/stats ${Math.round(statsApiMs)} ms, GET /v1/jobs ${Math.round(listApiMs)} ms`,
        );
      }
    } finally {
      await app.close();
    }
    return samples;
  } finally {
    await browser.close();
    await lh.close({ drainMs: 0 });
  }
}

console.error(loadNote('at start', true));
const rows: string[][] = [];
try {
  for (const store of STORES) {
    console.error(`${store}:`);
    const samples = store === 'sqlite' ? await measure(join(dir, 'dashboard.db')) : await withDatabase('lhbench_dashboard', (db) => measure(db.url));
    const col = (f: (s: Sample) => number) => {
      const v = samples.map(f);
      return `${Math.round(median(v))} (max ${Math.round(Math.max(...v))})`;
    };
    rows.push([store, col((s) => s.overviewMs), col((s) => s.jobsMs), col((s) => s.statsApiMs), col((s) => s.listApiMs)]);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.error(loadNote('at end', false));
console.log(table(['store', 'overview shown, ms', 'jobs page shown, ms', 'GET /v1/stats, ms', 'GET /v1/jobs?limit=50, ms'], rows));
console.log(`jobs ${JOBS}, runs ${RUNS} (medians, max), cold browser context per run`);
