/**
 * What watching costs at a million jobs: `GET /v1/stats` and `GET /metrics` on SQLite and
 * PostgreSQL with `--jobs` (default 1,000,000) jobs in the database, and the submit latency with
 * and without a scrape of both every second.
 *
 *   node --import tsx bench/observability.ts [--store sqlite,pg] [--jobs 1000000] [--reads 200]
 *        [--submit-seconds 20] [--pg postgres://postgres@127.0.0.1:5432/postgres]
 *
 * Per store, on a fresh database:
 *   1. fill: `jobs` rows written by SQL straight into `jobs` (so the stats triggers count them):
 *      10 task types, 3 tenants, 80 % succeeded, 10 % failed, 5 % queued, 5 % pending; the
 *      last 2 % created and ended within the last 15 minutes (so rates and run-time buckets are
 *      not empty). Then one sweeper pass (PostgreSQL folds the change log).
 *   2. reads: `reads` sequential GET /v1/stats, then GET /metrics, over HTTP to `longhaul server`
 *      (this process: Longhaul.open + buildServer, sweeper on, no worker), with the event loop's
 *      delay monitored meanwhile: latency p50/p99/max, and the event loop's max delay.
 *      For comparison, the old read (count(*) of the jobs table by state) once.
 *   3. submits: 8 concurrent clients POST /v1/jobs for `submit-seconds`, alone, then again
 *      with a scrape of /metrics and /v1/stats every second: submit p50/p99/max for each.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import pg from 'pg';
import pino from 'pino';
import { FsBlobStore } from '../src/blobs/fs-store.js';
import { defineTask, Longhaul } from '../src/index.js';
import { buildServer } from '../src/server/app.js';
import { uuidv7 } from '../src/core/ids.js';
import { withDatabase } from './lib/pg-database.js';
import { fmtMs, loadNote, numFlag, strFlag, summarise, table } from './lib/util.js';

const JOBS = numFlag('jobs', 1_000_000);
const READS = numFlag('reads', 200);
const SUBMIT_SECONDS = numFlag('submit-seconds', 20);
const STORES = (strFlag('store') ?? 'sqlite,pg').split(',');
const logger = pino({ level: 'silent' });
const TYPES = Array.from({ length: 10 }, (_, i) => `bench.t${i}`);
const TENANTS = ['default', 'acme', 'globex'];
const tasks = TYPES.map((type) => defineTask({ type, run: () => null }));
const dir = mkdtempSync(join(tmpdir(), 'longhaul-bench-obs-'));

/** The row of job i: its tenant, type, state and times (the same on both stores). */
function row(i: number, now: number) {
  const recent = i >= JOBS * 0.98;
  const created = recent ? now - 14 * 60_000 + Math.floor(((i - JOBS * 0.98) / (JOBS * 0.02)) * 14 * 60_000) : now - 86_400_000 * 7 + i * 10;
  const r = i % 20;
  const state = r < 16 ? 'succeeded' : r < 18 ? 'failed' : r < 19 ? 'queued' : 'pending';
  const ended = state === 'succeeded' || state === 'failed';
  const runMs = 20 + ((i * 7919) % 5000);
  return {
    tenant: TENANTS[i % 3] as string,
    type: TYPES[i % 10] as string,
    state,
    created,
    started: ended ? created + 100 : null,
    finished: ended ? created + 100 + runMs : null,
    runAt: state === 'pending' ? now + 86_400_000 : created,
  };
}

async function fillSqlite(path: string): Promise<void> {
  const db = new DatabaseSync(path);
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL');
  const insert = db.prepare(
    `INSERT INTO jobs (id, tenant, type, state, priority, max_attempts, run_at, created_at, updated_at, started_at, finished_at, attempts, heartbeat_timeout_ms, result_ttl_ms, log)
     VALUES (?, ?, ?, ?, 2, 3, ?, ?, ?, ?, ?, ?, 30000, 86400000, '[]')`,
  );
  const now = Date.now();
  for (let i = 0; i < JOBS; i += 50_000) {
    db.exec('BEGIN');
    for (let j = i; j < Math.min(JOBS, i + 50_000); j++) {
      const r = row(j, now);
      insert.run(uuidv7(r.created), r.tenant, r.type, r.state, r.runAt, r.created, r.created, r.started, r.finished, r.started === null ? 0 : 1);
    }
    db.exec('COMMIT');
  }
  db.close();
}

async function fillPostgres(url: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const now = Date.now();
    for (let i = 0; i < JOBS; i += 20_000) {
      const n = Math.min(20_000, JOBS - i);
      const rows = Array.from({ length: n }, (_, k) => row(i + k, now));
      await c.query(
        `INSERT INTO longhaul.jobs (id, tenant, type, state, priority, max_attempts, run_at, created_at, updated_at, started_at, finished_at, attempts, heartbeat_timeout_ms, result_ttl_ms, log)
         SELECT gen_random_uuid(), x.tenant, x.type, x.state, 2, 3, x.run_at, x.created, x.created, x.started, x.finished, CASE WHEN x.started IS NULL THEN 0 ELSE 1 END, 30000, 86400000, '[]'
         FROM json_to_recordset($1::json) AS x(tenant text, type text, state text, run_at bigint, created bigint, started bigint, finished bigint)`,
        [JSON.stringify(rows.map((r) => ({ tenant: r.tenant, type: r.type, state: r.state, run_at: r.runAt, created: r.created, started: r.started, finished: r.finished })))],
      );
    }
    await c.query('VACUUM ANALYZE longhaul.jobs');
  } finally {
    await c.end();
  }
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function get(url: string): Promise<void> {
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`${url}: ${res.status}`);
  await res.arrayBuffer();
}

interface StoreResult {
  store: string;
  fillS: number;
  oldCountMs: number;
  stats: ReturnType<typeof summarise>;
  metrics: ReturnType<typeof summarise>;
  loopMaxMs: number;
  /** In-process calls (no HTTP): wall time, and this process's CPU time per call (what holds the event loop). */
  directStats: ReturnType<typeof summarise>;
  directStatsCpuMs: number;
  directMetrics: ReturnType<typeof summarise>;
  directMetricsCpuMs: number;
  submitAlone: ReturnType<typeof summarise>;
  submitScraped: ReturnType<typeof summarise>;
  scrapeDuringMs: ReturnType<typeof summarise>;
}

async function submitLoad(base: string, seconds: number, scrape: boolean): Promise<{ submits: number[]; scrapes: number[] }> {
  const submits: number[] = [];
  const scrapes: number[] = [];
  const end = performance.now() + seconds * 1000;
  const client = async () => {
    let n = 0;
    while (performance.now() < end) {
      const t0 = performance.now();
      const res = await fetch(`${base}/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ type: TYPES[n++ % 10], input: { n } }),
      });
      await res.arrayBuffer();
      if (res.status !== 202) throw new Error(`submit: ${res.status}`);
      submits.push(performance.now() - t0);
    }
  };
  const scraper = async () => {
    while (performance.now() < end) {
      scrapes.push(await timed(() => get(`${base}/metrics`)));
      scrapes.push(await timed(() => get(`${base}/v1/stats`)));
      await new Promise((r) => setTimeout(r, 1000));
    }
  };
  await Promise.all([...Array.from({ length: 8 }, client), ...(scrape ? [scraper()] : [])]);
  return { submits, scrapes };
}

async function measure(store: string, database: string, fill: () => Promise<void>, oldCount: () => Promise<unknown>): Promise<StoreResult> {
  // Migrate first (empty), then fill with the triggers in place.
  const opened = await Longhaul.open({ database, tasks, logger, ...(store === 'pg' ? { files: { urlSigningSecret: 'bench-url-signing-secret-0123456789abcdef', blobs: await FsBlobStore.open(join(dir, 'blobs')) } } : {}) });
  await opened.close();
  const t0 = performance.now();
  await fill();
  const fillS = (performance.now() - t0) / 1000;
  console.log(`${store}: filled ${JOBS.toLocaleString('en-US')} jobs in ${fillS.toFixed(1)} s`);
  const lh = await Longhaul.open({ database, tasks, logger, ...(store === 'pg' ? { files: { urlSigningSecret: 'bench-url-signing-secret-0123456789abcdef', blobs: await FsBlobStore.open(join(dir, 'blobs')) } } : {}) });
  try {
    const sweeper = lh.startSweeper();
    const tc = performance.now();
    await sweeper.sweep();
    console.log(`${store}: first sweeper pass (folds the change log on PostgreSQL) ${(performance.now() - tc).toFixed(0)} ms`);
    const counts = await lh.store.countByState({});
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    if (total !== JOBS) throw new Error(`counters say ${total} jobs, not ${JOBS}`);
    const oldCountMs = await timed(oldCount);
    const app = await buildServer({ lh, logger: false });
    const base = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      for (let i = 0; i < 10; i++) {
        await get(`${base}/v1/stats`);
        await get(`${base}/metrics`);
      }
      const loop = monitorEventLoopDelay({ resolution: 1 });
      loop.enable();
      const stats: number[] = [];
      const metrics: number[] = [];
      for (let i = 0; i < READS; i++) stats.push(await timed(() => get(`${base}/v1/stats`)));
      for (let i = 0; i < READS; i++) metrics.push(await timed(() => get(`${base}/metrics`)));
      loop.disable();
      const direct = async (fn: () => Promise<unknown>) => {
        const wall: number[] = [];
        const cpu0 = process.cpuUsage();
        for (let i = 0; i < READS; i++) wall.push(await timed(fn));
        const cpu = process.cpuUsage(cpu0);
        return { wall: summarise(wall), cpuMs: (cpu.user + cpu.system) / 1000 / READS };
      };
      const ds = await direct(() => lh.stats({ tenant: 'acme' }));
      const dm = await direct(() => lh.metrics.render());
      const alone = await submitLoad(base, SUBMIT_SECONDS, false);
      const scraped = await submitLoad(base, SUBMIT_SECONDS, true);
      return {
        store,
        fillS,
        oldCountMs,
        stats: summarise(stats),
        metrics: summarise(metrics),
        loopMaxMs: loop.max / 1e6,
        directStats: ds.wall,
        directStatsCpuMs: ds.cpuMs,
        directMetrics: dm.wall,
        directMetricsCpuMs: dm.cpuMs,
        submitAlone: summarise(alone.submits),
        submitScraped: summarise(scraped.submits),
        scrapeDuringMs: summarise(scraped.scrapes),
      };
    } finally {
      await app.close();
    }
  } finally {
    await lh.close({ drainMs: 0 });
  }
}

const results: StoreResult[] = [];
console.log(loadNote('before', true));
try {
  for (const store of STORES) {
    if (store === 'sqlite') {
      const path = join(dir, 'obs.db');
      results.push(
        await measure('sqlite', path, () => fillSqlite(path), async () => {
          const db = new DatabaseSync(path);
          db.prepare('SELECT state, count(*) FROM jobs GROUP BY state').all();
          db.close();
        }),
      );
    } else if (store === 'pg') {
      results.push(
        await withDatabase('lh_bench_obs', (db) =>
          measure('pg', db.url, () => fillPostgres(db.url), async () => {
            const c = new pg.Client({ connectionString: db.url });
            await c.connect();
            await c.query('SELECT state, count(*) FROM longhaul.jobs GROUP BY state');
            await c.end();
          }),
        ),
      );
    } else {
      throw new Error(`unknown store ${store}`);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(loadNote('after', false));
const f = (s: ReturnType<typeof summarise>) => [fmtMs(s.p50), fmtMs(s.p99), fmtMs(s.max)];
console.log(`\n${JOBS.toLocaleString('en-US')} jobs; ${READS} reads each; submits: 8 clients for ${SUBMIT_SECONDS} s\n`);
console.log(
  table(
    ['store', 'count(*) by state (old read)', 'GET /v1/stats p50', 'p99', 'max', 'GET /metrics p50', 'p99', 'max', 'event loop max delay'],
    results.map((r) => [r.store, fmtMs(r.oldCountMs), ...f(r.stats), ...f(r.metrics), fmtMs(r.loopMaxMs)]),
  ),
);
console.log('');
console.log(
  table(
    ['store', 'lh.stats() p50', 'p99', 'max', 'CPU/call', 'metrics.render() p50', 'p99', 'max', 'CPU/call'],
    results.map((r) => [r.store, ...f(r.directStats), fmtMs(r.directStatsCpuMs), ...f(r.directMetrics), fmtMs(r.directMetricsCpuMs)]),
  ),
);
console.log('');
console.log(
  table(
    ['store', 'submit alone p50', 'p99', 'max', 'n', 'with a scrape/s p50', 'p99', 'max', 'n', 'scrapes meanwhile p50', 'p99'],
    results.map((r) => [
      r.store,
      ...f(r.submitAlone),
      String(r.submitAlone.samples),
      ...f(r.submitScraped),
      String(r.submitScraped.samples),
      fmtMs(r.scrapeDuringMs.p50),
      fmtMs(r.scrapeDuringMs.p99),
    ]),
  ),
);
console.log(JSON.stringify(results));
