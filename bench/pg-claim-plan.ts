/**
 * Diagnostic: PostgreSQL claims after a spawn, with and without a fresh ANALYZE (see "Where the
 * time goes" under "Workflows: spawning and fan-in" in bench/RESULTS.md).
 *
 *   node --import tsx bench/pg-claim-plan.ts [--children 100000] [--seconds 30] [--analyze]
 *        [--autovacuum-on] [--explain] [--pg postgres://postgres@127.0.0.1:5432/postgres]
 *
 * On a fresh database: one parent is submitted, one worker (concurrency 10) started; its first
 * claim sees the parent alone in `jobs`, then the parent spawns N trivial children. Prints how
 * many children the worker finished each second for --seconds. Autovacuum is off for the jobs
 * table (unless --autovacuum-on), so that the cached claim plan is only re-made by --analyze
 * (`ANALYZE longhaul.jobs` as soon as the parent waits). --explain logs the plans of statements
 * slower than 15 ms to the server's log (auto_explain, set on this database only).
 */
import pg from 'pg';
import pino from 'pino';
import { defineTask, Longhaul } from '../src/index.js';
import { createDatabase } from './lib/pg-database.js';
import { boolFlag, numFlag } from './lib/util.js';

const N = numFlag('children', 100_000);
const SECONDS = numFlag('seconds', 30);
const ANALYZE = boolFlag('analyze');
const AUTOVACUUM = boolFlag('autovacuum-on');
const EXPLAIN = boolFlag('explain');

async function sql(url: string, statements: string[]): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    for (const s of statements) await c.query(s);
  } finally {
    await c.end();
  }
}

const db = await createDatabase('lhbench_claimplan');
try {
  if (EXPLAIN) {
    await sql(
      db.url,
      [
        "session_preload_libraries = 'auto_explain'",
        "auto_explain.log_min_duration = '15ms'",
        'auto_explain.log_nested_statements = on',
        'auto_explain.log_analyze = on',
        'auto_explain.log_buffers = on',
      ].map((s) => `ALTER DATABASE "${db.name}" SET ${s}`),
    );
  }
  const specs = Array.from({ length: N }, (_, i) => ({ type: 'diag.child', input: { i } }));
  const child = defineTask({ type: 'diag.child', maxAttempts: 1, run: () => null });
  const parent = defineTask({
    type: 'diag.parent',
    maxAttempts: 1,
    async run(_input: unknown, ctx) {
      await ctx.spawn(specs, { failurePolicy: 'collect' });
      return null;
    },
  });
  const lh = await Longhaul.open({ database: db.url, tasks: [parent, child], logger: pino({ level: 'silent' }) });
  try {
    if (!AUTOVACUUM) await sql(db.url, ['ALTER TABLE longhaul.jobs SET (autovacuum_enabled = false)']);
    let waiting = false;
    lh.bus.on('job:changed', (e) => {
      if (e.type === 'diag.parent' && e.to === 'waiting') waiting = true;
    });
    await lh.submit('diag.parent', {});
    const worker = await lh.startWorker({ concurrency: 10 });
    while (!waiting) await new Promise((r) => setTimeout(r, 5));
    console.log(`${N} children spawned; autovacuum ${AUTOVACUUM ? 'on' : 'off'} for jobs`);
    if (ANALYZE) {
      const t = performance.now();
      await sql(db.url, ['ANALYZE longhaul.jobs']);
      console.log(`ANALYZE longhaul.jobs: ${(performance.now() - t).toFixed(0)} ms`);
    }
    const t0 = performance.now();
    let last = 0;
    for (let s = 1; s <= SECONDS; s++) {
      await new Promise((r) => setTimeout(r, 1000));
      const done = Math.min(N, worker.stats.succeeded); // the parent succeeds only after every child
      console.log(`${s} s: ${done} children done (+${done - last})`);
      last = done;
      if (done >= N) break;
    }
    console.log(`${last} children in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    await lh.close();
  }
} finally {
  await db.drop();
}
