/**
 * Throughput and latency of Longhaul on SQLite (targets: ≥ 20 000 jobs/s processed, p50 ≤ 2 ms).
 *
 *   npm run bench -- [--jobs 20000] [--concurrency 10,50] [--runs 3] [--chunk 1000]
 *                    [--latency 2000] [--warmup 200] [--no-sweeper] [--lib dist] [--profile /tmp/lh]
 *
 * For each run and each concurrency, on a fresh SQLite file in a temp dir:
 *   (a) bulk-enqueue `jobs` no-op jobs with submitMany in chunks of `chunk` (enqueue jobs/s);
 *   (b) start one worker at that concurrency and time it until worker.stats.succeeded reaches
 *       `jobs` (processed jobs/s), then check with countByState that all of them succeeded.
 * Both phases also report the process's CPU time per job (user + system, every thread): on a
 * shared machine it moves far less with other load than jobs/s does.
 * Then, on another fresh file, end-to-end latency with an idle worker: one job at a time,
 * submit-call start → handler start (performance.now() in this process), after a warm-up.
 *
 * Prints a table, then one JSON line (the last line of stdout) for bench/run-all.ts.
 * `--profile PREFIX` writes a CPU profile of each processing phase to PREFIX-c<c>-run<k>.cpuprofile
 * and of each enqueue phase to PREFIX-enqueue-c<c>-run<k>.cpuprofile
 * (see bench/profile-summary.ts); use it with --runs 1 and --lib (compiled JS: tsx's keepNames
 * and whitespace minification distort the profile: every function is on line 1).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { idleWorkerLatency } from './lib/latency.js';
import { boolFlag, gitState, listFlag, loadNote, numFlag, profiled, reportResult, strFlag, summarise, until } from './lib/util.js';

const JOBS = numFlag('jobs', 20_000);
const CONCURRENCY = listFlag('concurrency', [10, 50]);
const RUNS = numFlag('runs', 3);
const CHUNK = numFlag('chunk', 1000);
const LATENCY_SAMPLES = numFlag('latency', 2000);
const WARMUP = numFlag('warmup', 200);
const SWEEPER = !boolFlag('no-sweeper');
const PROFILE = strFlag('profile');
const PROFILE_INTERVAL_US = numFlag('profile-interval-us', 100);

const LIB = strFlag('lib');

// The library under test: src/ through tsx by default, or compiled JS: `--lib dist` after `npm run build`,
// or a pinned commit built by bench/snapshot.sh (`--lib /tmp/longhaul-<rev>/dist`).
// tsx compiles with esbuild's keepNames, which wraps every closure the library creates in a
// __name() call (Object.defineProperty): that costs a few % here, so profiles should use --lib.
type Lib = typeof import('../src/index.js');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask, Longhaul } = lib;
// The store classes: `longhaul/stores` (src/stores.ts) since issue 35; a build of an older commit
// (`--lib`) has no stores.js and exports them from its root entry.
type Stores = typeof import('../src/stores.js');
const { SqliteStore }: Stores =
  LIB === undefined ? await import('../src/stores.js') : await import(pathToFileURL(resolve(LIB, 'stores.js')).href).catch(() => lib as unknown as Stores);

const logger = pino({ level: 'silent' });
const noop = defineTask({ type: 'bench.noop', run: () => null });

const dir = mkdtempSync(join(tmpdir(), 'longhaul-bench-'));
const notes: string[] = [];

/** The enqueue calls' arguments, built before the clock starts. */
function chunks(): { type: string; input: { n: number } }[][] {
  const out: { type: string; input: { n: number } }[][] = [];
  for (let i = 0; i < JOBS; i += CHUNK) out.push(Array.from({ length: Math.min(CHUNK, JOBS - i) }, (_, j) => ({ type: 'bench.noop', input: { n: i + j } })));
  return out;
}

/** CPU time of this process (all threads) since `from`, µs. */
function cpuSince(from: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(from);
  return d.user + d.system;
}

async function throughputRun(
  concurrency: number,
  run: number,
): Promise<{ enqueuePerSec: number; processedPerSec: number; enqueueCpuUs: number; processedCpuUs: number }> {
  const lh = await Longhaul.open({ database: join(dir, `c${concurrency}-run${run}.db`), tasks: [noop], logger });
  try {
    const batches = chunks();
    let cpu0 = process.cpuUsage();
    let enqueueCpuUs = 0;
    let processedCpuUs = 0;
    const enqueueMs = await profiled(PROFILE && `${PROFILE}-enqueue-c${concurrency}-run${run}.cpuprofile`, PROFILE_INTERVAL_US, async () => {
      cpu0 = process.cpuUsage();
      const t0 = performance.now();
      for (const b of batches) await lh.submitMany(b);
      const ms = performance.now() - t0;
      enqueueCpuUs = cpuSince(cpu0);
      return ms;
    });
    const before = await lh.store.countByState({});
    if (before.queued !== JOBS) throw new Error(`expected ${JOBS} queued jobs, found ${before.queued}`);

    const processMs = await profiled(PROFILE && `${PROFILE}-c${concurrency}-run${run}.cpuprofile`, PROFILE_INTERVAL_US, async () => {
      cpu0 = process.cpuUsage();
      const t1 = performance.now();
      const worker = await lh.startWorker({ concurrency, sweeper: SWEEPER });
      await until(() => worker.stats.succeeded >= JOBS, 2);
      const ms = performance.now() - t1;
      processedCpuUs = cpuSince(cpu0);
      return ms;
    });
    const after = await lh.store.countByState({});
    if (after.succeeded !== JOBS) throw new Error(`expected ${JOBS} succeeded jobs, found ${JSON.stringify(after)}`);
    return {
      enqueuePerSec: JOBS / (enqueueMs / 1000),
      processedPerSec: JOBS / (processMs / 1000),
      enqueueCpuUs: enqueueCpuUs / JOBS,
      processedCpuUs: processedCpuUs / JOBS,
    };
  } finally {
    await lh.close();
  }
}

function latency(): Promise<number[]> {
  return idleWorkerLatency({
    lib,
    open: (tasks) => Longhaul.open({ database: join(dir, 'latency.db'), tasks, logger }),
    warmup: WARMUP,
    samples: LATENCY_SAMPLES,
    sweeper: SWEEPER,
  });
}

/** The commit a bench/snapshot.sh build was made from (its REVISION file). */
function libRevision(dir: string): string {
  const file = [join(dir, 'REVISION'), join(dir, '..', 'dist', 'REVISION')].find((f) => existsSync(f));
  if (!file) return '';
  return ` (commit ${readFileSync(file, 'utf8').trim().slice(0, 12)}, built by bench/snapshot.sh)`;
}

/** Which SQLite binding the library under test opens, and the SQLite it carries. */
function versions(): { binding: string; sqlite: string } {
  const store = new SqliteStore({ path: ':memory:' });
  const db = store.db as unknown as { prepare(sql: string): { get(): unknown } };
  const sqlite = (db.prepare('SELECT sqlite_version() AS v').get() as { v: string }).v;
  // A library built before the move to node:sqlite still opens better-sqlite3 (its `db` has `pragma`).
  const binding =
    'pragma' in store.db
      ? `better-sqlite3 ${(createRequire(pathToFileURL(resolve(LIB ?? 'src', 'index.js')).href)('better-sqlite3/package.json') as { version: string }).version}`
      : 'node:sqlite';
  (store.db as unknown as { close(): void }).close();
  return { binding, sqlite };
}

try {
  notes.push(loadNote('at start', process.env.BENCH_RUN_ALL !== '1'));
  const v = versions();
  notes.push(`Node ${process.version}, ${v.binding}, SQLite ${v.sqlite}, WAL + synchronous=NORMAL, sweeper ${SWEEPER ? 'on' : 'off'}`);
  notes.push(
    LIB === undefined
      ? `library: src/ via tsx; ${gitState(['src'])}`
      : `library: ${existsSync(join(LIB, 'index.ts')) ? 'TypeScript via tsx' : 'compiled JS'} in ${LIB}${libRevision(LIB)}`,
  );
  notes.push(`fresh DB file per run and concurrency in ${tmpdir()}; enqueue = submitMany in chunks of ${CHUNK}`);
  const enqueue: number[] = [];
  const processed: Record<string, number[]> = Object.fromEntries(CONCURRENCY.map((c) => [String(c), [] as number[]]));
  const cpu: Record<string, number[]> = { enqueue: [], ...Object.fromEntries(CONCURRENCY.map((c) => [`c${c}`, [] as number[]])) };
  for (let run = 1; run <= RUNS; run++) {
    for (const c of CONCURRENCY) {
      const r = await throughputRun(c, run);
      enqueue.push(r.enqueuePerSec);
      processed[String(c)]?.push(r.processedPerSec);
      cpu.enqueue?.push(r.enqueueCpuUs);
      cpu[`c${c}`]?.push(r.processedCpuUs);
      console.error(`run ${run} c=${c}: enqueue ${Math.round(r.enqueuePerSec)}/s, processed ${Math.round(r.processedPerSec)}/s`);
    }
  }
  const lat = LATENCY_SAMPLES > 0 ? summarise(await latency()) : summarise([]);
  notes.push(loadNote('at end', false));
  reportResult({ system: 'Longhaul (SQLite)', jobs: JOBS, runs: RUNS, enqueue: enqueue, processed: processed, latencyMs: lat, cpuUsPerJob: cpu, notes });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
