/**
 * Retention on SQLite and PostgreSQL: does deletion keep up with completions, and what does it
 * cost the claims?
 *
 *   node --import tsx bench/retention.ts [--store sqlite,pg] [--jobs 20000] [--concurrency 10] [--runs 2]
 *        [--pg postgres://postgres@127.0.0.1:5432/postgres]
 *
 * Per store and run, alternating the two modes on fresh databases:
 *   off: bulk-enqueue `jobs` no-op jobs, run them with one worker (sweeper on, no retention):
 *        processed jobs/s (the finish throughput). Then erase them all with one purge
 *        (`lh.purge({ before })`: the retention batches, 500 jobs per transaction, back to back):
 *        deleted jobs/s (the raw deletion throughput).
 *   zero: the same with `retention: { succeeded: 0 }` (each job deleted by the worker's write that
 *        ends it, in the same transaction): processed jobs/s (the claim slowdown is off/zero), and
 *        the time from the start of processing until the jobs table is empty.
 * Prints one line per measurement and a summary table.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { defineTask, Longhaul } from '../src/index.js';
import { withDatabase } from './lib/pg-database.js';
import { listFlag, loadNote, median, numFlag, strFlag, table, until } from './lib/util.js';

const JOBS = numFlag('jobs', 20_000);
const [CONCURRENCY = 10] = listFlag('concurrency', [10]);
const RUNS = numFlag('runs', 2);
const STORES = (strFlag('store') ?? 'sqlite,pg').split(',');
const logger = pino({ level: 'silent' });
const noop = defineTask({ type: 'bench.noop', run: () => null });
const dir = mkdtempSync(join(tmpdir(), 'longhaul-bench-retention-'));

interface Run {
  processedPerSec: number;
  deletedPerSec: number | null;
  /** zero: processing start → table empty, and processing end → table empty. */
  emptyAfterMs: number | null;
  lagMs: number | null;
}

async function one(database: string, zero: boolean): Promise<Run> {
  const lh = await Longhaul.open({ database, tasks: [noop], logger, ...(zero ? { retention: { succeeded: 0 } } : {}) });
  try {
    for (let i = 0; i < JOBS; i += 1000) await lh.submitMany(Array.from({ length: Math.min(1000, JOBS - i) }, (_, j) => ({ type: 'bench.noop', input: { n: i + j } })));
    const total = async () => Object.values(await lh.store.countByState({})).reduce((a, b) => a + b, 0);
    const t0 = performance.now();
    const worker = await lh.startWorker({ concurrency: CONCURRENCY });
    await until(() => worker.stats.succeeded >= JOBS, 2);
    const processMs = performance.now() - t0;
    const t1 = performance.now();
    if (!zero) {
      await worker.stop();
      const out = await lh.purge({ before: Date.now() + 1 });
      const deleteMs = performance.now() - t1;
      if (out.deleted.jobs !== JOBS) throw new Error(`purged ${out.deleted.jobs} of ${JOBS}`);
      return { processedPerSec: JOBS / (processMs / 1000), deletedPerSec: JOBS / (deleteMs / 1000), emptyAfterMs: null, lagMs: null };
    }
    for (;;) {
      if ((await total()) === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const emptyMs = performance.now() - t0;
    return { processedPerSec: JOBS / (processMs / 1000), deletedPerSec: null, emptyAfterMs: emptyMs, lagMs: emptyMs - processMs };
  } finally {
    await lh.close();
  }
}

async function onStore(store: string, zero: boolean, run: number): Promise<Run> {
  if (store === 'sqlite') return one(join(dir, `r${run}-${zero ? 'zero' : 'off'}.db`), zero);
  return withDatabase('lhbench_retention', (db) => one(db.url, zero));
}

console.error(loadNote('at start', true));
const rows: string[][] = [];
try {
  for (const store of STORES) {
    const off: Run[] = [];
    const zero: Run[] = [];
    for (let run = 1; run <= RUNS; run++) {
      const a = await onStore(store, false, run);
      off.push(a);
      console.error(`${store} run ${run} off:  processed ${Math.round(a.processedPerSec)}/s, purge deleted ${Math.round(a.deletedPerSec ?? 0)}/s`);
      const b = await onStore(store, true, run);
      zero.push(b);
      console.error(
        `${store} run ${run} zero: processed ${Math.round(b.processedPerSec)}/s, table empty ${Math.round(b.emptyAfterMs ?? 0)} ms after start (${Math.round(b.lagMs ?? 0)} ms after the last job)`,
      );
    }
    const m = (xs: Run[], f: (r: Run) => number | null) => median(xs.map(f).filter((x): x is number => x !== null));
    const pOff = m(off, (r) => r.processedPerSec);
    const pZero = m(zero, (r) => r.processedPerSec);
    rows.push([
      store,
      String(Math.round(pOff)),
      String(Math.round(m(off, (r) => r.deletedPerSec))),
      String(Math.round(pZero)),
      `${((pZero / pOff - 1) * 100).toFixed(1)} %`,
      String(Math.round(m(zero, (r) => r.lagMs))),
    ]);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.error(loadNote('at end', false));
console.log(
  table(['store', 'processed/s, retention off', 'purge deleted/s', 'processed/s, retention 0', 'claims: 0 vs off', 'table empty after last job, ms'], rows),
);
console.log(`jobs ${JOBS}, concurrency ${CONCURRENCY}, runs ${RUNS} (medians)`);
