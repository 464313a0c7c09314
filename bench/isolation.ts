/**
 * What `isolation: 'thread'` costs per job against in-process (docs/isolation.md), on SQLite.
 *
 *   node --import tsx bench/isolation.ts [--jobs 2000] [--concurrency 1,4] [--runs 3]
 *                                        [--progress 10] [--latency 200] [--cold 5]
 *
 * The same handler (bench/lib/isolation-tasks.ts) in-process and in a thread, two workloads:
 * no-op, and `progress` ctx.progress() calls before returning. For each run, mode, workload and
 * concurrency, on a fresh SQLite file: a worker is started and warmed (as many jobs as its
 * concurrency, so a thread pool holds its threads), then `jobs` jobs are submitted in one
 * submitMany and timed until the last has succeeded; per job: wall time and the process's
 * CPU time (every thread, the handler threads included). Then, one job at a time on an idle
 * worker, submit → end as `lh.wait` sees it (p50, p99), and the first job of a new worker
 * (a thread pool starting: the thread, its module loaded) against in-process.
 *
 * Prints tables, then one JSON line.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Longhaul } from '../src/index.js';
import * as tasks from './lib/isolation-tasks.js';
import { listFlag, median, numFlag, summarise, table, until } from './lib/util.js';

const JOBS = numFlag('jobs', 2000);
const CONCURRENCY = listFlag('concurrency', [1, 4]);
const RUNS = numFlag('runs', 3);
const PROGRESS = numFlag('progress', 10);
const LATENCY = numFlag('latency', 200);
const COLD = numFlag('cold', 5);

const logger = pino({ level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'longhaul-isolation-bench-'));
const MODES = [
  { name: 'in-process', type: 'bench.in-process' },
  { name: 'thread', type: 'bench.thread' },
] as const;
const WORKLOADS = [
  { name: 'no-op', input: {} },
  { name: `${PROGRESS} progress calls`, input: { progress: PROGRESS } },
] as const;
let files = 0;

async function open(): Promise<Longhaul> {
  return Longhaul.open({ database: join(dir, `b${files++}.db`), tasks, logger });
}

/** µs of wall and CPU per job, `JOBS` jobs at `concurrency`, after a warm-up. */
async function throughput(type: string, input: object, concurrency: number): Promise<{ wallUs: number; cpuUs: number }> {
  const lh = await open();
  try {
    const worker = await lh.startWorker({ concurrency });
    const warm = await lh.submitMany(Array.from({ length: concurrency }, () => ({ type, input })));
    for (const j of warm) await lh.wait(j.id);
    const batch = Array.from({ length: JOBS }, () => ({ type, input }));
    const target = worker.stats.succeeded + JOBS;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await lh.submitMany(batch);
    await until(() => worker.stats.succeeded >= target, 1);
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    if (worker.stats.failed > 0) throw new Error(`${worker.stats.failed} jobs failed`);
    return { wallUs: (wallMs * 1000) / JOBS, cpuUs: (cpu.user + cpu.system) / JOBS };
  } finally {
    await lh.close();
  }
}

/** Submit → succeeded as lh.wait sees it, one job at a time on an idle worker (ms). */
async function latency(type: string): Promise<number[]> {
  const lh = await open();
  try {
    const worker = await lh.startWorker({ concurrency: 1, pollIntervalMs: 5 });
    await lh.wait((await lh.submit(type, {})).id);
    const samples: number[] = [];
    for (let i = 0; i < LATENCY; i++) {
      const t0 = performance.now();
      const job = await lh.submit(type, {});
      await lh.wait(job.id, { pollMs: 1 });
      samples.push(performance.now() - t0);
      await worker.idle();
    }
    return samples;
  } finally {
    await lh.close();
  }
}

/** The first job of a new worker, submit → succeeded (ms): for a thread, its pool starting. */
async function cold(type: string): Promise<number> {
  const lh = await open();
  try {
    await lh.startWorker({ concurrency: 1, pollIntervalMs: 5 });
    const t0 = performance.now();
    await lh.wait((await lh.submit(type, {})).id, { pollMs: 1 });
    return performance.now() - t0;
  } finally {
    await lh.close();
  }
}

const rows: string[][] = [];
const json: Record<string, unknown> = { jobs: JOBS, runs: RUNS, progress: PROGRESS };
try {
  for (const workload of WORKLOADS) {
    for (const c of CONCURRENCY) {
      const inProc = { wall: [] as number[], cpu: [] as number[] };
      const thread = { wall: [] as number[], cpu: [] as number[] };
      for (let run = 0; run < RUNS; run++) {
        // Alternated, so that drift on a shared machine touches both modes alike.
        for (const mode of MODES) {
          const r = await throughput(mode.type, workload.input, c);
          const m = mode.name === 'thread' ? thread : inProc;
          m.wall.push(r.wallUs);
          m.cpu.push(r.cpuUs);
        }
      }
      const w = [median(inProc.wall), median(thread.wall)] as const;
      const u = [median(inProc.cpu), median(thread.cpu)] as const;
      rows.push([workload.name, String(c), w[0].toFixed(0), w[1].toFixed(0), `+${(w[1] - w[0]).toFixed(0)}`, u[0].toFixed(0), u[1].toFixed(0), `+${(u[1] - u[0]).toFixed(0)}`]);
      json[`${workload.name} c=${c}`] = { wallUs: { inProcess: inProc.wall, thread: thread.wall }, cpuUs: { inProcess: inProc.cpu, thread: thread.cpu } };
    }
  }
  console.log(`\n${JOBS} jobs per run, median of ${RUNS} runs; µs per job (wall, then CPU of the whole process)\n`);
  console.log(table(['workload', 'c', 'wall in-process', 'wall thread', 'Δ', 'CPU in-process', 'CPU thread', 'Δ'], rows));

  const lat: string[][] = [];
  for (const mode of MODES) {
    const s = summarise(await latency(mode.type));
    const firsts: number[] = [];
    for (let i = 0; i < COLD; i++) firsts.push(await cold(mode.type));
    lat.push([mode.name, s.p50.toFixed(2), s.p99.toFixed(2), median(firsts).toFixed(0)]);
    json[`latency ${mode.name}`] = { p50: s.p50, p99: s.p99, firstJobMs: firsts };
  }
  console.log(`\none job at a time, idle worker (ms; ${LATENCY} samples; first job: median of ${COLD} new workers)\n`);
  console.log(table(['mode', 'submit → end p50', 'p99', 'first job of a new worker'], lat));
  console.log(`\nmachine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, Node ${process.version}`);
  console.log(JSON.stringify(json));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
