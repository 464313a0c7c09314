/**
 * The cost of dead letters on SQLite and PostgreSQL.
 *
 *   node --import tsx bench/dead-letters.ts [--store sqlite,postgres] [--jobs 10000] [--runs 3]
 *        [--concurrency 50] [--failed 50000] [--lib dist] [--pg postgres://...] [--skip-failures] [--skip-reads] [--source-maps]
 *
 * (a) Failure throughput (public API only, so that `--lib` can point at a build from before the
 *     attempt history, for a before/after): `jobs` jobs of a task that throws a FatalError
 *     (failed at once: one attempt recorded each), and `jobs` of one that throws a retryable
 *     error with maxAttempts 3 and no backoff (three attempts recorded each); processed jobs/s.
 * (b) Reads and bulk operations (this tree's src/, or --lib with dead letters): `failed` failed
 *     jobs (5 types x 4 codes, half in each of 2 tenants) beside as many succeeded ones, written through the
 *     store; then the time of the grouped listing of one tenant and of all tenants, the first page
 *     of one group and a page deep inside it, a bulk replay of one group and a bulk discard of
 *     another (batches of 500), each median of `runs` (the bulk ones once). PostgreSQL: the plans.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { uuidv7 } from '../src/core/ids.js';
import { createDatabase } from './lib/pg-database.js';
import { boolFlag, listFlag, median, numFlag, strFlag, until } from './lib/util.js';

const JOBS = numFlag('jobs', 10_000);
const RUNS = numFlag('runs', 3);
const CONCURRENCY = listFlag('concurrency', [50])[0] ?? 50;
const FAILED = numFlag('failed', 50_000);
const STORES = (strFlag('store') ?? 'sqlite,postgres').split(',');
const LIB = strFlag('lib');

type Lib = typeof import('../src/index.js');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask, FatalError, Longhaul } = lib;
// The store classes: `longhaul/stores` (src/stores.ts) since issue 35; a build of an older commit
// (`--lib`) has no stores.js and exports them from its root entry.
type Stores = typeof import('../src/stores.js');
const { PostgresStore, SqliteStore }: Stores =
  LIB === undefined ? await import('../src/stores.js') : await import(pathToFileURL(resolve(LIB, 'stores.js')).href).catch(() => lib as unknown as Stores);
const logger = pino({ level: 'silent' });
// tsx turns source maps on, and with them every stack a failure formats is mapped frame by frame
// (dist/ ships .map files): several times the cost of the stack itself. Production runs
// `node dist/...` without them; `--source-maps` keeps them on.
if (!boolFlag('source-maps')) process.setSourceMapsEnabled(false);
const dir = mkdtempSync(join(tmpdir(), 'longhaul-dl-bench-'));

const fatal = defineTask({
  type: 'bench.fatal',
  maxAttempts: 1,
  run: () => {
    throw new FatalError('bad input', { code: 'BAD_INPUT' });
  },
});
const retried = defineTask({
  type: 'bench.retried',
  maxAttempts: 3,
  backoff: { baseMs: 0, maxMs: 0 },
  run: () => {
    throw new Error('flaky');
  },
});

type Store = InstanceType<typeof SqliteStore> | InstanceType<typeof PostgresStore>;

let files = 0;
async function openStore(kind: string): Promise<{ store: Store; drop: () => Promise<void> }> {
  if (kind === 'sqlite') {
    const store = new SqliteStore({ path: join(dir, `dl-${++files}.db`) });
    return { store, drop: async () => undefined };
  }
  const db = await createDatabase('lh_dl_bench');
  return { store: new PostgresStore({ connectionString: db.url }), drop: () => db.drop() };
}

/** Processed jobs/s of `jobs` jobs of `task` until all failed, and this process's CPU µs per job (all of it on SQLite). */
async function failureRun(kind: string, task: typeof fatal): Promise<{ rate: number; cpuUs: number }> {
  const { store, drop } = await openStore(kind);
  const lh = await Longhaul.open({ store, tasks: [task], logger, channel: false });
  try {
    for (let i = 0; i < JOBS; i += 1000) await lh.submitMany(Array.from({ length: Math.min(1000, JOBS - i) }, () => ({ type: task.type, input: {} })));
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const worker = await lh.startWorker({ concurrency: CONCURRENCY, sweeper: false });
    await until(() => worker.stats.failed >= JOBS, 5);
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const counts = await lh.store.countByState({});
    if (counts.failed !== JOBS) throw new Error(`expected ${JOBS} failed, found ${JSON.stringify(counts)}`);
    return { rate: JOBS / (ms / 1000), cpuUs: (cpu.user + cpu.system) / JOBS };
  } finally {
    await lh.close();
    await store.close();
    await drop();
  }
}

function time<T>(fn: () => Promise<T>): Promise<{ ms: number; out: T }> {
  const t0 = performance.now();
  return fn().then((out) => ({ ms: performance.now() - t0, out }));
}

/** Failed (and succeeded) jobs written through the store: insert, claim, end. */
async function seed(store: Store): Promise<void> {
  const now = Date.now();
  const types = ['a', 'b', 'c', 'd', 'e'];
  const codes = ['E1', 'E2', 'E3', 'E4'];
  const chunk = 1000;
  for (let i = 0; i < FAILED * 2; i += chunk) {
    const jobs = Array.from({ length: chunk }, (_, k) => {
      const n = i + k;
      return {
        id: uuidv7(),
        tenant: n % 2 === 0 ? 'acme' : 'other',
        type: `bench.${types[n % 5]}`,
        state: 'queued' as const,
        priority: 'normal' as const,
        input: { n },
        metadata: null,
        maxAttempts: 1,
        runAt: now,
        createdAt: now,
        timeoutMs: null,
        heartbeatTimeoutMs: 30_000,
        stallTimeoutMs: null,
        resultTtlMs: 86_400_000,
        parentId: null,
        idempotencyKey: null,
        requestHash: null,
      };
    });
    await store.insertJobs({ jobs });
    const order = new Map(jobs.map((j, k) => [j.id, i + k]));
    const claimed = await store.claimJobs({ workerId: 'seed', types: types.map((t) => ({ type: `bench.${t}` })), limit: chunk, now });
    await store.transition({
      items: claimed.map((j) => {
        const n = order.get(j.id) as number;
        const at = now + n;
        return n % 4 === 0 || n % 4 === 3
          ? { id: j.id, from: 'running' as const, to: 'succeeded' as const, lease: j.lease, reason: 'completed', at, patch: { result: 1, finishedAt: at, expiresAt: at + 86_400_000 } }
          : {
              id: j.id,
              from: 'running' as const,
              to: 'failed' as const,
              lease: j.lease,
              reason: 'fatal',
              at,
              patch: { error: { message: 'no', code: codes[Math.floor(n / 20) % 4] as string, retryable: false }, finishedAt: at, stack: 'Error: no\n    at seed' },
            };
      }),
    });
  }
}

async function reads(kind: string): Promise<void> {
  const { store, drop } = await openStore(kind);
  const lh = await Longhaul.open({ store, tasks: [fatal], logger, channel: false });
  try {
    const t0 = performance.now();
    await seed(store);
    console.log(`${kind}: seeded ${FAILED} failed + ${FAILED} succeeded jobs in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    if (store instanceof PostgresStore) await store.pool.query('VACUUM ANALYZE');
    const rows: Array<[string, number, string]> = [];
    const measure = async (label: string, fn: () => Promise<unknown>, describe: (out: unknown) => string) => {
      const ms: number[] = [];
      let out: unknown;
      for (let r = 0; r < RUNS; r++) {
        const t = await time(fn);
        ms.push(t.ms);
        out = t.out;
      }
      rows.push([label, median(ms), describe(out)]);
    };
    await measure('groups, one tenant', () => lh.deadLetterGroups({ tenant: 'other' }), (o) => `${(o as unknown[]).length} groups`);
    await measure('groups, every tenant', () => lh.deadLetterGroups({}), (o) => `${(o as unknown[]).length} groups`);
    await measure('first page (50) of a group', () => lh.deadLetterJobs({ tenant: 'other', type: 'bench.b', code: 'E2' }), (o) => `${(o as { items: unknown[] }).items.length} jobs`);
    let cursor: string | null = null;
    for (let p = 0; p < 20; p++) cursor = (await lh.deadLetterJobs({ tenant: 'other', type: 'bench.b', code: 'E2', cursor })).nextCursor;
    await measure('page 21 of the group (cursor)', () => lh.deadLetterJobs({ tenant: 'other', type: 'bench.b', code: 'E2', cursor }), (o) => `${(o as { items: unknown[] }).items.length} jobs`);
    const retry = await time(() => lh.retryDeadLetters({ tenant: 'other', type: 'bench.a' }));
    rows.push(['bulk replay of one type (every code)', retry.ms, `${retry.out.count} jobs, ${Math.round(retry.out.count / (retry.ms / 1000))} jobs/s`]);
    const discard = await time(() => lh.discardDeadLetters({ tenant: 'other', type: 'bench.c' }));
    rows.push(['bulk discard of one type', discard.ms, `${discard.out.count} jobs, ${Math.round(discard.out.count / (discard.ms / 1000))} jobs/s`]);
    for (const [label, ms, what] of rows) console.log(`${kind}  ${label.padEnd(38)} ${ms.toFixed(1).padStart(9)} ms  ${what}`);
    if (store instanceof PostgresStore) {
      const s = '"longhaul"';
      for (const [label, sql, values] of [
        ['groups, one tenant', `SELECT j.tenant, j.type, j.error_code, count(*), max(j.finished_at) FROM ${s}.jobs j WHERE j.state = 'failed' AND j.tenant = $1 GROUP BY j.tenant, j.type, j.error_code`, ['other']],
        ['page of a group', `SELECT j.id FROM ${s}.jobs j WHERE j.state = 'failed' AND j.tenant = $1 AND j.type = $2 AND j.error_code = $3 AND (j.finished_at, j.id) < ($4::bigint, $5::uuid) ORDER BY j.finished_at DESC, j.id DESC LIMIT 51`, ['other', 'bench.b', 'E2', Date.now() + 1e9, 'ffffffff-ffff-ffff-ffff-ffffffffffff']],
      ] as const) {
        const plan = await store.pool.query({ text: `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${sql}`, values: [...values] });
        console.log(`postgres plan, ${label}:\n  ${plan.rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n  ')}`);
      }
    }
  } finally {
    await lh.close();
    await store.close();
    await drop();
  }
}

try {
  for (const kind of STORES) {
    if (!boolFlag('skip-failures')) {
      for (const task of [fatal, retried]) {
        const runs: Array<{ rate: number; cpuUs: number }> = [];
        for (let r = 0; r < RUNS; r++) runs.push(await failureRun(kind, task));
        const rates = runs.map((x) => x.rate);
        const cpu = runs.map((x) => x.cpuUs);
        console.log(
          `${kind}  ${task.type.padEnd(14)} ${JOBS} jobs, concurrency ${CONCURRENCY}: ${rates.map((x) => Math.round(x)).join(' ')} jobs/s (median ${Math.round(median(rates))}); CPU µs/job ${cpu.map((x) => x.toFixed(0)).join(' ')} (median ${median(cpu).toFixed(0)})`,
        );
      }
    }
    if (!boolFlag('skip-reads')) await reads(kind);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
