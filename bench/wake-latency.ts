/**
 * Submit-to-start latency across processes, as `longhaul server` + `longhaul worker` deploy: the
 * producer (this process) submits one job at a time, 20 ms apart, and an idle worker in another
 * process starts it; the handler returns the time it started (epoch ms, sub-millisecond, from
 * performance.timeOrigin), read back from the job's result. Issue 37's figure.
 *
 *   node --import tsx bench/wake-latency.ts [--store postgres|sqlite] [--jobs 300] [--gap 20] [--lib dist]
 *
 * Both processes use the library at `--lib` (compiled JS: build a commit with bench/snapshot.sh),
 * default settings (the event relay of the store, pollIntervalMs 50), worker concurrency 10.
 * Prints p50/p95/p99/max in ms, then one JSON line.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { withDatabase } from './lib/pg-database.js';
import { numFlag, percentile, strFlag } from './lib/util.js';

const STORE = strFlag('store') ?? 'postgres';
const JOBS = numFlag('jobs', 300);
const GAP_MS = numFlag('gap', 20);
const LIB = strFlag('lib');
const TYPE = 'bench.wake';

type Lib = typeof import('../src/index.js');
const libUrl = LIB === undefined ? new URL('../src/index.js', import.meta.url).href : pathToFileURL(resolve(LIB, 'index.js')).href;
const now = () => performance.timeOrigin + performance.now();

if (process.argv.includes('--child')) {
  // The worker process: runs the task, reports ready, stops on stdin's end.
  const { defineTask, Longhaul } = (await import(libUrl)) as Lib;
  const task = defineTask({ type: TYPE, run: () => ({ startedAt: performance.timeOrigin + performance.now() }) });
  const lh = await Longhaul.open({ database: strFlag('database') as string, tasks: [task], logger: pino({ level: 'warn' }) });
  await lh.startWorker({ concurrency: 10 });
  process.stdout.write('ready\n');
  process.stdin.resume();
  process.stdin.on('end', async () => {
    await lh.close({ drainMs: 1000 });
    process.exit(0);
  });
} else {
  const run = async (database: string) => {
    const { Longhaul, defineTask } = (await import(libUrl)) as Lib;
    const task = defineTask({ type: TYPE, run: () => null });
    const producer = await Longhaul.open({ database, tasks: [task], logger: pino({ level: 'warn' }) });
    const child = spawn(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, '--child', '--database', database, ...(LIB ? ['--lib', LIB] : [])], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    await new Promise<void>((ok, fail) => {
      child.stdout.on('data', (d: Buffer) => d.toString().includes('ready') && ok());
      child.on('exit', (code) => fail(new Error(`worker exited ${code}`)));
    });
    try {
      await new Promise((r) => setTimeout(r, 500));
      const submitted: Array<{ id: string; at: number }> = [];
      for (let i = 0; i < JOBS; i++) {
        const at = now();
        submitted.push({ id: (await producer.submit(TYPE, { i })).id, at });
        await new Promise((r) => setTimeout(r, GAP_MS));
      }
      const delays: number[] = [];
      for (const s of submitted) {
        const done = await producer.wait(s.id);
        delays.push((done.result as { startedAt: number }).startedAt - s.at);
      }
      return delays.sort((a, b) => a - b);
    } finally {
      child.stdin.end();
      await new Promise((r) => child.once('exit', r));
      await producer.close({ drainMs: 0 });
    }
  };
  let delays: number[];
  if (STORE === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'lh-wake-'));
    try {
      delays = await run(join(dir, 'jobs.db'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  } else {
    delays = await withDatabase('lh_wake', (db) => run(db.url));
  }
  const figures = { p50: percentile(delays, 0.5), p95: percentile(delays, 0.95), p99: percentile(delays, 0.99), max: delays.at(-1) as number };
  console.log(`${STORE}, ${JOBS} jobs ${GAP_MS} ms apart, submit-to-start ms: p50 ${figures.p50.toFixed(2)}, p95 ${figures.p95.toFixed(2)}, p99 ${figures.p99.toFixed(2)}, max ${figures.max.toFixed(2)}`);
  console.log(JSON.stringify({ store: STORE, lib: LIB ?? 'src', jobs: JOBS, gapMs: GAP_MS, ...figures }));
}
