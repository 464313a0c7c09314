/**
 * Diagnostic: the database's own cost of one job on PostgreSQL, claim and completion apart, with
 * no Node in the loop. It answers "what does the server spend per job, and how far could another
 * table layout that keeps every finished job bring it down".
 *
 *   node --import tsx bench/pg-server-split.ts [--jobs 10000] [--batch 500] [--runs 3]
 *        [--variant current,fewer-indexes,delete-finished,live-queue] [--lib dist]
 *
 * For each variant and run, on a fresh database: Longhaul migrates it and enqueues `jobs` no-op
 * jobs (submitMany), the variant's setup runs, then one plpgsql DO block, on one connection,
 * claims `batch` jobs, commits, completes them as succeeded, commits, and so on until none is left.
 * It times the claim statements and the completion statements apart with clock_timestamp(),
 * and also the building of the completion's JSON, which is the harness's own cost, not the
 * server's cost per job.
 *
 * Variants:
 * - `current`: the schema and functions as they are (worker_cycle, with the JSON items
 *   the worker sends for a success).
 * - `fewer-indexes`: the same after dropping jobs_tenant, jobs_finished, jobs_expiring and
 *   jobs_running. That is five of the seven index entries a job gets from claim and completion.
 *   It is a bound, not a design: listings by tenant, activity figures, result expiry, the
 *   sweeper and concurrency limits need those indexes.
 * - `delete-finished`: today's claim, and a completion that deletes the job instead of keeping it
 *   (what Graphile Worker does): the price of keeping history, measured the same way.
 * - `live-queue`: a prototype layout. `jobs` has only its primary key and tenant index
 *   (fillfactor 50), so its updates can be HOT. A narrow `queue` table holds the live jobs,
 *   with a partial index on the ready ones. A claim marks queue rows and updates the job
 *   rows; a completion deletes the queue rows and updates the job rows. It leaves out the
 *   bookkeeping that result expiry and the sweeper would still need, so it is a floor for
 *   that family of layouts.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import pino from 'pino';
import { withDatabase } from './lib/pg-database.js';
import { loadNote, median, numFlag, strFlag, table } from './lib/util.js';

const JOBS = numFlag('jobs', 10_000);
const BATCH = numFlag('batch', 500);
const RUNS = numFlag('runs', 3);
const VARIANTS = (strFlag('variant') ?? 'current,fewer-indexes,delete-finished,live-queue').split(',');
const LIB = strFlag('lib');
type Lib = typeof import('../src/index.js');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask, Longhaul } = lib;
const noop = defineTask({ type: 'bench.noop', run: () => null });

/** The completion items a worker sends for a success (see encodeTransitions in the PostgreSQL store). */
const ITEMS = `json_agg(json_build_object('o', k, 'r', 1, 'id', id, 'f', 'running', 't', 'succeeded', 'why', 'completed',
  'w', 'w-1234567890', 'at', t, 'l', lease, 'result', NULL::json, 'error', NULL::json, 'finished_at', t,
  'expires_at', t + 86400000, 'm', 158) ORDER BY id) INTO items FROM unnest(ids, leases) WITH ORDINALITY AS u(id, lease, k)`;

const ITEM_COLUMNS = `o integer, r integer, id uuid, f text, t text, l integer, q boolean, why text, w text, at bigint, m integer,
  run_at bigint, result json, error json, finished_at bigint, expires_at bigint, cancel_reason text, stalled boolean`;

interface Variant {
  setup: string;
  claim: string;
  complete: string;
}

const CURRENT: Variant = {
  setup: '',
  claim: `SELECT array_agg(c.id), array_agg(c.lease) INTO ids, leases
    FROM longhaul.worker_cycle('{}', '{}', '{}', '{}', '{}', '{}', '[]', 0, 'w-1234567890', '{bench.noop}', '{NULL}', ${BATCH}, t,
      '{NULL}', '{NULL}', '{NULL}', NULL, '{}', '{}', NULL) c WHERE c.id IS NOT NULL`,
  complete: `PERFORM longhaul.worker_cycle('{}', '{}', '{}', '{}', '{}', '{}', items, 1, 'w-1234567890', '{bench.noop}', '{NULL}', 0, t,
      '{NULL}', '{NULL}', '{NULL}', NULL, '{}', '{}', NULL)`,
};

const VARIANT_SQL: Record<string, Variant> = {
  current: CURRENT,
  'fewer-indexes': {
    ...CURRENT,
    setup: 'DROP INDEX longhaul.jobs_tenant, longhaul.jobs_finished, longhaul.jobs_expiring, longhaul.jobs_running',
  },
  'delete-finished': {
    ...CURRENT,
    complete: `DELETE FROM longhaul.jobs j USING json_to_recordset(items) AS i(${ITEM_COLUMNS})
      WHERE j.id = i.id AND j.state = 'running' AND j.lease = i.l`,
  },
  'live-queue': {
    setup: `
      DROP INDEX longhaul.jobs_tenant, longhaul.jobs_finished, longhaul.jobs_expiring, longhaul.jobs_running, longhaul.jobs_queued, longhaul.jobs_due;
      CREATE TEMP TABLE keep AS SELECT * FROM longhaul.jobs;
      TRUNCATE longhaul.jobs;
      ALTER TABLE longhaul.jobs SET (fillfactor = 50);
      CREATE INDEX jobs_tenant ON longhaul.jobs (tenant, id);
      INSERT INTO longhaul.jobs SELECT * FROM keep ORDER BY created_at;
      CREATE TABLE longhaul.queue (id uuid PRIMARY KEY, type text COLLATE "C" NOT NULL, priority smallint NOT NULL,
        run_at bigint NOT NULL, lease integer NOT NULL DEFAULT 0, worker text, heartbeat_at bigint) WITH (fillfactor = 70);
      CREATE INDEX queue_ready ON longhaul.queue (type, priority, run_at, id) WHERE worker IS NULL;
      INSERT INTO longhaul.queue (id, type, priority, run_at) SELECT id, type, priority, run_at FROM keep ORDER BY created_at;
      ANALYZE longhaul.jobs;
      ANALYZE longhaul.queue;`,
    // Row estimates are right here, so the planner would hash-join against a scan of the whole
    // table; the real functions get nested loops over the primary key (generic plans).
    claim: `SET LOCAL enable_hashjoin = off;
    SET LOCAL enable_mergejoin = off;
    WITH c AS (
      SELECT q.id FROM longhaul.queue q WHERE q.worker IS NULL AND q.type = 'bench.noop'
      ORDER BY q.priority, q.run_at, q.id LIMIT ${BATCH} FOR UPDATE SKIP LOCKED
    ), l AS (
      UPDATE longhaul.queue q SET worker = 'w-1234567890', lease = q.lease + 1, heartbeat_at = t FROM c WHERE q.id = c.id RETURNING q.id, q.lease
    ), m AS (
      UPDATE longhaul.jobs j SET state = 'running', lease = l.lease, attempts = j.attempts + 1, worker_id = 'w-1234567890',
        started_at = t, heartbeat_at = t, stalled = false, updated_at = greatest(t, j.updated_at + 1),
        log = j.log || ',["queued","running",' || t::text || ',"claimed",' || (j.attempts + 1)::text || ',"w-1234567890"]'
      FROM l WHERE j.id = l.id RETURNING j.*
    )
    SELECT array_agg(m.id), array_agg(m.lease) INTO ids, leases FROM (SELECT m.id, m.lease, m.input::text, m.metadata::text FROM m) m`,
    complete: `WITH i AS (
      SELECT * FROM json_to_recordset(items) AS x(${ITEM_COLUMNS})
    ), d AS (
      DELETE FROM longhaul.queue q USING i WHERE q.id = i.id AND q.lease = i.l RETURNING q.id
    )
    UPDATE longhaul.jobs j SET state = i.t, result = i.result, error = i.error, finished_at = i.finished_at, expires_at = i.expires_at,
      checkpoint = NULL, updated_at = greatest(i.at, j.updated_at + 1),
      log = j.log || ',' || json_build_array(i.f, i.t, i.at, i.why, j.attempts, i.w)::text
    FROM i, d WHERE j.id = i.id AND d.id = i.id AND j.state = 'running' AND j.lease = i.l`,
  },
};

function cycle(v: Variant): string {
  return `DO $$
  DECLARE
    ids uuid[]; leases int[]; items json; t bigint := ${Date.now()}; a timestamptz;
    tc interval := '0'; tb interval := '0'; tx interval := '0';
  BEGIN
    LOOP
      a := clock_timestamp();
      ${v.claim};
      EXIT WHEN ids IS NULL;
      COMMIT;
      tc := tc + (clock_timestamp() - a);
      a := clock_timestamp();
      SELECT ${ITEMS};
      tb := tb + (clock_timestamp() - a);
      a := clock_timestamp();
      ${v.complete};
      COMMIT;
      tx := tx + (clock_timestamp() - a);
      t := t + 1;
    END LOOP;
    RAISE NOTICE '%', json_build_object('claim', extract(epoch FROM tc), 'build', extract(epoch FROM tb), 'complete', extract(epoch FROM tx));
  END $$`;
}

interface Split {
  claim: number;
  complete: number;
  build: number;
  walPerJob: number;
  hot: string;
}

async function once(name: string, v: Variant): Promise<Split> {
  return withDatabase('lhbench_split', async (db) => {
    const lh = await Longhaul.open({ database: db.url, tasks: [noop], logger: pino({ level: 'silent' }), channel: false });
    try {
      for (let i = 0; i < JOBS; i += 1000)
        await lh.submitMany(Array.from({ length: Math.min(1000, JOBS - i) }, (_, j) => ({ type: 'bench.noop', input: { n: i + j } })));
    } finally {
      await lh.close();
    }
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      if (v.setup) await c.query(v.setup);
      let notice = '';
      c.on('notice', (n) => {
        notice = n.message ?? '';
      });
      const wal0 = (await c.query('SELECT pg_current_wal_insert_lsn() AS l')).rows[0].l as string;
      await c.query(cycle(v));
      const walBytes = Number((await c.query('SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1) AS b', [wal0])).rows[0].b);
      // Every job must have been completed once: kept as succeeded, or (delete-finished) gone.
      const left = (await c.query("SELECT count(*)::integer AS total, (count(*) FILTER (WHERE state <> 'succeeded'))::integer AS other FROM longhaul.jobs"))
        .rows[0];
      const kept = name === 'delete-finished' ? 0 : JOBS;
      if (left.total !== kept || left.other !== 0) throw new Error(`${name}: expected ${kept} jobs left, all succeeded; found ${JSON.stringify(left)}`);
      await c.query('SELECT pg_stat_force_next_flush()'); // this session's table statistics, flushed when it next goes idle
      const s = (await c.query("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = 'longhaul' AND relname = 'jobs'")).rows[0];
      const t = JSON.parse(notice) as { claim: number; build: number; complete: number };
      const us = (sec: number) => (sec * 1e6) / JOBS;
      return { claim: us(t.claim), complete: us(t.complete), build: us(t.build), walPerJob: walBytes / JOBS, hot: `${s.n_tup_hot_upd}/${s.n_tup_upd}` };
    } finally {
      await c.end();
    }
  });
}

console.log(loadNote('at start', true));
const rows: string[][] = [];
for (const name of VARIANTS) {
  const v = VARIANT_SQL[name];
  if (!v) throw new Error(`unknown --variant ${name}: use ${Object.keys(VARIANT_SQL).join(', ')}`);
  const runs: Split[] = [];
  for (let r = 0; r < RUNS; r++) {
    const s = await once(name, v);
    console.log(
      `${name} run ${r + 1}: claim ${s.claim.toFixed(1)} µs/job, completion ${s.complete.toFixed(1)} µs/job, WAL ${Math.round(s.walPerJob)} B/job, HOT updates of jobs ${s.hot} (harness JSON ${s.build.toFixed(1)} µs/job)`,
    );
    runs.push(s);
  }
  const m = (f: (s: Split) => number) => median(runs.map(f)).toFixed(1);
  rows.push([name, m((s) => s.claim), m((s) => s.complete), m((s) => s.claim + s.complete), String(Math.round(median(runs.map((s) => s.walPerJob))))]);
}
console.log(`\nserver time per job, ${JOBS.toLocaleString('en-US')} no-op jobs, batches of ${BATCH}, one connection, median of ${RUNS}\n`);
console.log(table(['variant', 'claim, µs', 'completion, µs', 'both, µs', 'WAL, B'], rows));
console.log(loadNote('at end', false));
