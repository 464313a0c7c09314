/**
 * Fairness between tenants: how long one tenant's single job waits while another tenant's
 * burst of jobs is queued ahead of it.
 *
 *   node --import tsx bench/fairness.ts [--store sqlite|postgres] [--burst 100000] [--duration-ms 50]
 *        [--concurrency 20] [--samples 20] [--every-ms 250] [--lib dist]
 *
 * Tenant `bulk` bulk-enqueues `burst` jobs of `duration-ms` each (a sleep); one worker with
 * `concurrency` slots starts on them. Then, `samples` times, `every-ms` apart, tenant `small`
 * submits one job of the same task and the time from its submit call to its handler's start is
 * recorded. Printed: the waits (p50, p95, max) in ms and in job durations; without fairness
 * the first one would wait about burst × duration / concurrency.
 * The last line is one JSON object.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { createDatabase } from './lib/pg-database.js';
import { gitState, numFlag, percentile, strFlag } from './lib/util.js';

const STORE = strFlag('store') ?? 'sqlite';
const BURST = numFlag('burst', 100_000);
const DURATION_MS = numFlag('duration-ms', 50);
const CONCURRENCY = numFlag('concurrency', 20);
const SAMPLES = numFlag('samples', 20);
const EVERY_MS = numFlag('every-ms', 250);
const LIB = strFlag('lib');

type Lib = typeof import('../src/index.js');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask, Longhaul } = lib;

const started = new Map<string, number>();
const work = defineTask({
  type: 'bench.work',
  async run(input: unknown) {
    const probe = (input as { probe?: string }).probe;
    if (probe) started.set(probe, performance.now());
    await new Promise((r) => setTimeout(r, DURATION_MS));
    return null;
  },
});

const dir = mkdtempSync(join(tmpdir(), 'longhaul-fair-'));
const pgDb = STORE === 'postgres' ? await createDatabase('lh_fair') : null;
const database = pgDb ? pgDb.url : join(dir, 'jobs.db');
const lh = await Longhaul.open({ database, tasks: [work], logger: pino({ level: 'silent' }), channel: false });
try {
  const t0 = performance.now();
  for (let i = 0; i < BURST; i += 1000) {
    await lh.enqueueMany(Array.from({ length: Math.min(1000, BURST - i) }, () => ({ type: 'bench.work', input: {}, options: { tenant: 'bulk' } })));
  }
  const enqueueMs = performance.now() - t0;
  const worker = await lh.startWorker({ concurrency: CONCURRENCY });
  await new Promise((r) => setTimeout(r, 1000)); // the burst is running
  const waits: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const probe = `p${i}`;
    const at = performance.now();
    await lh.submit('bench.work', { probe }, { tenant: 'small' });
    while (!started.has(probe)) await new Promise((r) => setTimeout(r, 1));
    waits.push((started.get(probe) as number) - at);
    await new Promise((r) => setTimeout(r, EVERY_MS));
  }
  const bulkDone = worker.stats.succeeded;
  await worker.stop({ drainMs: 0 });
  waits.sort((a, b) => a - b);
  const fig = (q: number) => percentile(waits, q);
  const out = {
    store: STORE,
    burst: BURST,
    durationMs: DURATION_MS,
    concurrency: CONCURRENCY,
    samples: SAMPLES,
    enqueueMs: Math.round(enqueueMs),
    waitMs: { p50: fig(0.5), p95: fig(0.95), max: waits.at(-1) },
    waitInDurations: { p50: fig(0.5) / DURATION_MS, p95: fig(0.95) / DURATION_MS, max: (waits.at(-1) as number) / DURATION_MS },
    withoutFairnessMs: (BURST * DURATION_MS) / CONCURRENCY,
    bulkJobsRunMeanwhile: bulkDone,
    lib: LIB ?? 'src',
    git: gitState(['src']),
  };
  console.log(
    `${STORE}: tenant small's job waited p50 ${out.waitMs.p50.toFixed(1)} ms, p95 ${out.waitMs.p95.toFixed(1)} ms, max ${(out.waitMs.max as number).toFixed(1)} ms ` +
      `(${out.waitInDurations.p50.toFixed(2)} / ${out.waitInDurations.p95.toFixed(2)} / ${out.waitInDurations.max.toFixed(2)} job durations) behind ${BURST} queued jobs of tenant bulk; ` +
      `behind the whole burst it would be ${(out.withoutFairnessMs / 1000).toFixed(0)} s`,
  );
  console.log(JSON.stringify(out));
} finally {
  await lh.close();
  await pgDb?.drop();
  rmSync(dir, { recursive: true, force: true });
}
