/**
 * Throughput and latency of Longhaul on PostgreSQL: the workload of bench/sqlite-throughput.ts
 * (targets: throughput ≥ Graphile Worker's in the same run, latency p50 ≤ 3 ms, p99 ≤ 10 ms).
 *
 *   node --import tsx bench/pg-throughput.ts [--jobs 10000] [--concurrency 10,50] [--runs 3]
 *        [--chunk 1000] [--latency 2000] [--warmup 200] [--no-sweeper] [--no-channel] [--peer] [--lib dist] [--cpu] [--timeline]
 *        [--pg postgres://postgres@127.0.0.1:5432/postgres]
 *
 * For each run and each concurrency, on a fresh database (CREATE DATABASE, dropped after):
 *   (a) bulk-enqueue `jobs` no-op jobs with submitMany in chunks of `chunk` (enqueue jobs/s);
 *   (b) start one worker at that concurrency and time it until worker.stats.succeeded reaches
 *       `jobs` (processed jobs/s), then check with countByState that all of them succeeded.
 * Then, on another fresh database, end-to-end latency with an idle worker: one job at a time,
 * submit-call start → handler start (performance.now() in this process), after a warm-up.
 * Longhaul keeps every finished job (full history), as on SQLite; `--retention 0` deletes each
 * job on completion instead (`retention: { succeeded: 0 }`: the worker's write that ends it deletes it), and
 * then (b) is timed, like Graphile Worker's (bench/peers/graphile.ts), until every job finished
 * and was deleted (the jobs table empty); stderr also gives the time until the last one finished.
 *
 * `--timeline` also prints (stderr) when the 1st, 500th, 1,000th, 2,000th, 4,000th... job of (b)
 * had succeeded, in ms from the worker's start (read at the 2 ms checks of the wait): how long the
 * start costs (new connections, first plans, code not yet optimised) against the steady pace.
 *
 * Prints a table, then one JSON line (the last line of stdout) for bench/run-pg-all.ts.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { costLine, packageVersion, serverCost, serverNote, withDatabase } from './lib/pg-database.js';
import { idleWorkerLatency } from './lib/latency.js';
import { boolFlag, gitState, listFlag, loadNote, Milestones, numFlag, profiled, reportResult, strFlag, summarise, until } from './lib/util.js';

const JOBS = numFlag('jobs', 10_000);
const CONCURRENCY = listFlag('concurrency', [10, 50]);
const RUNS = numFlag('runs', 3);
const CHUNK = numFlag('chunk', 1000);
const LATENCY_SAMPLES = numFlag('latency', 2000);
const WARMUP = numFlag('warmup', 200);
const SWEEPER = !boolFlag('no-sweeper');
/** `--retention 0` (or a duration): succeeded jobs' retention; unset keeps the full history. */
const RETENTION = strFlag('retention');
// The NOTIFY event relay (on by default on PostgreSQL, what a multi-process deployment needs); --no-channel: off.
const CHANNEL = !boolFlag('no-channel');
// A lone process relays nothing (it counts no other process listening); `--peer` runs one: a
// child process LISTENing on the relay's channel, as an API server would, so every event is relayed.
const PEER = boolFlag('peer');
const LIB = strFlag('lib');
/** Also print the CPU time per job of this process and of the database's server processes (same machine only). */
const CPU = boolFlag('cpu');
/** Print when the 1st, 500th, 1,000th, 2,000th... job had succeeded (see the header). */
const TIMELINE = boolFlag('timeline');
/** `--profile PREFIX`: a CPU profile of each processing phase, PREFIX-c<c>.cpuprofile (use with --runs 1 and --lib). */
const PROFILE = strFlag('profile');

// The library under test: src/ through tsx by default, or compiled JS (`--lib dist` after
// `npm run build`, or a commit built by bench/snapshot.sh), as in bench/sqlite-throughput.ts.
type Lib = typeof import('../src/index.js');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask, Longhaul } = lib;

const logger = pino({ level: 'silent' });
const noop = defineTask({ type: 'bench.noop', run: () => null });

/** The enqueue calls' arguments, built before the clock starts. */
function chunks(): { type: string; input: { n: number } }[][] {
  const out: { type: string; input: { n: number } }[][] = [];
  for (let i = 0; i < JOBS; i += CHUNK) out.push(Array.from({ length: Math.min(CHUNK, JOBS - i) }, (_, j) => ({ type: 'bench.noop', input: { n: i + j } })));
  return out;
}

/**
 * Another process listening on the relay's channel (`--peer`), named like a Longhaul process's
 * LISTEN connection: the relay then publishes every event. It drops what it hears.
 */
async function listeningPeer(url: string): Promise<() => void> {
  const code = `import pg from 'pg';
    const c = new pg.Client({ connectionString: process.argv[1], application_name: 'lhbench-peer:listen' });
    await c.connect();
    await c.query('LISTEN longhaul_events');
    console.log('listening');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code, url], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => d.toString().includes('listening') && resolve());
    child.once('exit', (code) => reject(new Error(`the listening peer exited (${code})`)));
  });
  return () => child.kill();
}

async function throughputRun(url: string, concurrency: number): Promise<{ enqueuePerSec: number; processedPerSec: number }> {
  const stopPeer = PEER ? await listeningPeer(url) : () => undefined;
  const lh = await Longhaul.open({
    database: url,
    tasks: [noop],
    logger,
    ...(CHANNEL ? {} : { channel: false as const }),
    ...(RETENTION === undefined ? {} : { retention: { succeeded: RETENTION } }),
  });
  try {
    const batches = chunks();
    const t0 = performance.now();
    for (const b of batches) await lh.submitMany(b);
    const enqueueMs = performance.now() - t0;
    const before = await lh.store.countByState({});
    if (before.queued !== JOBS) throw new Error(`expected ${JOBS} queued jobs, found ${before.queued}`);

    const pool = (lh.store as unknown as { pool: Parameters<typeof serverCost>[0] }).pool;
    const cost0 = CPU ? await serverCost(pool) : null;
    const t1 = performance.now();
    const marks = TIMELINE ? new Milestones(JOBS) : null;
    await profiled(PROFILE && `${PROFILE}-c${concurrency}.cpuprofile`, 100, async () => {
      const worker = await lh.startWorker({ concurrency, sweeper: SWEEPER });
      await until(() => {
        marks?.see(worker.stats.succeeded, performance.now() - t1);
        return worker.stats.succeeded >= JOBS;
      }, 2);
    });
    const finishedMs = performance.now() - t1;
    let processMs = finishedMs;
    if (RETENTION !== undefined) {
      // Timed like Graphile Worker (bench/peers/graphile.ts): the same probe, a count of the
      // jobs table, polled until it is empty; the clock stops before anything else is read.
      // (The store's countByState sums its counters, a heavier read that would be timed too.)
      const left = async () => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM longhaul.jobs')).rows[0]?.n ?? 0;
      while ((await left()) > 0);
      processMs = performance.now() - t1;
    }
    // Printed after the clock stops: the first number formatting of a process loads its locale
    // data (about 15 ms), which would otherwise count as processing time.
    if (marks) console.error(`c=${concurrency}: jobs succeeded by ms from the worker's start: ${marks.line()}`);
    if (cost0) console.error(costLine(`c=${concurrency}`, cost0, await serverCost(pool), JOBS, processMs));
    const after = await lh.store.countByState({});
    if (RETENTION !== undefined) {
      console.error(`c=${concurrency}: last job finished after ${Math.round(finishedMs)} ms, table empty after ${Math.round(processMs)} ms`);
      const kept = Object.values(after).reduce((a, b) => a + b, 0);
      if (kept !== 0) throw new Error(`expected no jobs left, the store counts ${JSON.stringify(after)}`);
    } else if (after.succeeded !== JOBS) throw new Error(`expected ${JOBS} succeeded jobs, found ${JSON.stringify(after)}`);
    return { enqueuePerSec: JOBS / (enqueueMs / 1000), processedPerSec: JOBS / (processMs / 1000) };
  } finally {
    await lh.close();
    stopPeer();
  }
}

function latency(url: string): Promise<number[]> {
  return idleWorkerLatency({
    lib,
    open: (tasks) => Longhaul.open({ database: url, tasks, logger, ...(CHANNEL ? {} : { channel: false as const }) }),
    warmup: WARMUP,
    samples: LATENCY_SAMPLES,
    sweeper: SWEEPER,
  });
}

const notes: string[] = [];
notes.push(loadNote('at start', process.env.BENCH_RUN_ALL !== '1'));
notes.push(
  `Node ${process.version}, pg ${packageVersion(import.meta.url, 'pg')}, sweeper ${SWEEPER ? 'on' : 'off'}, event relay ${CHANNEL ? (PEER ? 'NOTIFY with a listening peer process' : 'NOTIFY (lone process: nothing published)') : 'off'}, ${RETENTION === undefined ? 'full job history kept' : `retention succeeded ${RETENTION}: processed timed until the table is empty`}`,
);
notes.push(await serverNote());
notes.push(
  LIB === undefined
    ? `library: src/ via tsx; ${gitState(['src'])}`
    : `library: ${existsSync(join(LIB, 'index.ts')) ? 'TypeScript via tsx' : 'compiled JS'} in ${LIB}`,
);
notes.push(`enqueue = submitMany in chunks of ${CHUNK}`);
const enqueue: number[] = [];
const processed: Record<string, number[]> = Object.fromEntries(CONCURRENCY.map((c) => [String(c), [] as number[]]));
for (let run = 1; run <= RUNS; run++) {
  for (const c of CONCURRENCY) {
    const r = await withDatabase('lhbench_longhaul', (db) => throughputRun(db.url, c));
    enqueue.push(r.enqueuePerSec);
    processed[String(c)]?.push(r.processedPerSec);
    console.error(`run ${run} c=${c}: enqueue ${Math.round(r.enqueuePerSec)}/s, processed ${Math.round(r.processedPerSec)}/s`);
  }
}
const lat = LATENCY_SAMPLES > 0 ? summarise(await withDatabase('lhbench_longhaul', (db) => latency(db.url))) : summarise([]);
notes.push(loadNote('at end', false));
reportResult({ system: 'Longhaul (PostgreSQL)', jobs: JOBS, runs: RUNS, enqueue: enqueue, processed: processed, latencyMs: lat, notes });
