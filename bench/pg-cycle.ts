/**
 * Diagnostic: cost of one worker cycle on PostgreSQL (complete the previous batch, claim the next)
 * by batch size, with no worker runtime: where the per-job ceiling of a serial claim loop lies.
 *
 *   node --import tsx bench/pg-cycle.ts [--jobs 10000] [--batch 10,50,200,500] [--lib dist]
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import pino from 'pino';
import { withDatabase } from './lib/pg-database.js';
import { listFlag, loadNote, numFlag, strFlag } from './lib/util.js';

const JOBS = numFlag('jobs', 10_000);
const BATCH = listFlag('batch', [10, 50, 200, 500]);
const LIB = strFlag('lib');
type Lib = typeof import('../src/index.js');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask, Longhaul } = lib;
const noop = defineTask({ type: 'bench.noop', run: () => null });
console.log(loadNote('at start', true));
for (const batch of BATCH) {
  await withDatabase('lhbench_cycle', async (db) => {
    const lh = await Longhaul.open({ database: db.url, tasks: [noop], logger: pino({ level: 'silent' }) });
    try {
      for (let i = 0; i < JOBS; i += 1000)
        await lh.submitMany(Array.from({ length: Math.min(1000, JOBS - i) }, (_, j) => ({ type: 'bench.noop', input: { n: i + j } })));
      const store = lh.store;
      let prev: { id: string; lease: number }[] = [];
      let cycles = 0;
      let done = 0;
      const t0 = performance.now();
      for (;;) {
        const now = Date.now();
        const { jobs } = await store.completeAndClaim({
          complete: prev.map((j) => ({
            id: j.id,
            from: 'running' as const,
            to: 'succeeded' as const,
            lease: j.lease,
            reason: 'completed',
            workerId: 'w',
            at: now,
            patch: { result: null, error: null, finishedAt: now, expiresAt: now + 86_400_000, clearCheckpoint: true },
          })),
          claim: { workerId: 'w', types: [{ type: 'bench.noop', concurrency: undefined }], limit: batch, now },
        });
        done += prev.length;
        cycles++;
        if (jobs.length === 0 && prev.length === 0) break;
        prev = jobs.map((j) => ({ id: j.id, lease: j.lease }));
      }
      const ms = performance.now() - t0;
      console.log(
        `batch ${batch}: ${done} jobs, ${cycles} cycles, ${(ms / cycles).toFixed(2)} ms/cycle, ${((ms * 1000) / done).toFixed(1)} µs/job, ${Math.round(done / (ms / 1000))} jobs/s`,
      );
    } finally {
      await lh.close();
    }
    // Server-side time per function, when run with PGOPTIONS='-c track_functions=pl' (superuser).
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    await new Promise((r) => setTimeout(r, 200));
    const { rows } = await c.query(
      'SELECT funcname, calls, round(total_time::numeric, 1) AS total_ms, round(self_time::numeric, 1) AS self_ms FROM pg_stat_user_functions ORDER BY total_time DESC',
    );
    for (const r of rows) console.log(`  ${r.funcname}: ${r.calls} calls, total ${r.total_ms} ms, self ${r.self_ms} ms`);
    // Row writes per table: n_tup_hot_upd of jobs says how many updates wrote no index entry.
    const tables = await c.query(
      "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = 'longhaul' AND n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname",
    );
    for (const r of tables.rows) console.log(`  ${r.relname}: ${r.n_tup_ins} inserted, ${r.n_tup_upd} updated (${r.n_tup_hot_upd} HOT), ${r.n_tup_del} deleted`);
    await c.end();
  });
}
console.log(loadNote('at end', false));
