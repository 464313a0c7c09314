/**
 * Cancel cascade: `lh.cancel(parent)` on a waiting parent with N queued children (default
 * 10 000), on SQLite and on PostgreSQL. The parent is made with `store.suspend` (as ctx.spawn
 * does), its children inserted in that transaction; the time measured is the cancel alone
 * (the parent, then every child in pages of 500, each page one store write, each write announced).
 *
 *   node --import tsx bench/cancel-cascade.ts [--children 10000] [--runs 3] [--pg postgres://...]
 *
 * PostgreSQL: a fresh database is created on the server of --pg (default the test server,
 * postgres://postgres@127.0.0.1:5432/test) and dropped afterwards.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { uuidv7 } from '../src/core/ids.js';
import { suspend } from '../src/core/transitions.js';
import { emptyWorkflow, NEVER } from '../src/core/workflow.js';
import { Longhaul } from '../src/longhaul.js';
import type { NewJob } from '../src/store/store.js';
import { defineTask } from '../src/task-api/define.js';
import { numFlag, strFlag } from './lib/util.js';

const CHILDREN = numFlag('children', 10_000);
const RUNS = numFlag('runs', 3);
const PG_URL = strFlag('pg') ?? 'postgres://postgres@127.0.0.1:5432/test';

function job(type: string, parentId: string | null, now: number): NewJob {
  return {
    id: uuidv7(now),
    tenant: 'default',
    type,
    state: 'queued',
    priority: 'normal',
    input: null,
    metadata: null,
    maxAttempts: 3,
    runAt: now,
    createdAt: now,
    timeoutMs: null,
    heartbeatTimeoutMs: 30_000,
    stallTimeoutMs: null,
    resultTtlMs: 60_000,
    parentId,
    idempotencyKey: null,
    requestHash: null,
  };
}

/** One run: a parent waiting on CHILDREN queued children, then the timed cancel. */
async function run(lh: Longhaul): Promise<{ setupMs: number; cancelMs: number; cancelled: number }> {
  const t0 = performance.now();
  const now = Date.now();
  const type = `bench-${uuidv7().slice(-8)}`;
  await lh.store.insertJob({ job: job(type, null, now) });
  const [parent] = await lh.store.claimJobs({ workerId: 'bench', types: [{ type }], limit: 1, now });
  if (!parent) throw new Error('the parent was not claimed');
  const children = Array.from({ length: CHILDREN }, () => job(`${type}-child`, parent.id, now));
  const res = await lh.store.suspend({
    write: suspend(parent, 'bench', now, NEVER, 'waiting for children'),
    wait: { kind: 'children', failFast: false },
    workflow: emptyWorkflow(),
    children,
  });
  if (res.kind !== 'suspended') throw new Error(`suspend: ${res.kind}`);
  const t1 = performance.now();
  const snap = await lh.cancel(parent.id);
  const t2 = performance.now();
  return { setupMs: t1 - t0, cancelMs: t2 - t1, cancelled: snap.children?.byState.cancelled ?? 0 };
}

async function bench(name: string, database: string): Promise<void> {
  const lh = await Longhaul.open({ database, tasks: [defineTask({ type: 'bench.noop', run: async () => null })], logger: pino({ level: 'silent' }), channel: false });
  try {
    for (let r = 1; r <= RUNS; r++) {
      const { setupMs, cancelMs, cancelled } = await run(lh);
      if (cancelled !== CHILDREN) throw new Error(`${name}: ${cancelled} of ${CHILDREN} children cancelled`);
      console.log(`${name.padEnd(10)} run ${r}: ${CHILDREN} children cancelled in ${Math.round(cancelMs)} ms (${Math.round((CHILDREN / cancelMs) * 1000)} jobs/s); setup ${Math.round(setupMs)} ms`);
    }
  } finally {
    await lh.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'lh-cascade-'));
try {
  await bench('SQLite', join(dir, 'bench.db'));
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const dbName = `lh_cascade_${process.pid}`;
const admin = new pg.Client({ connectionString: PG_URL });
await admin.connect();
await admin.query(`CREATE DATABASE ${dbName}`);
try {
  const u = new URL(PG_URL);
  u.pathname = `/${dbName}`;
  await bench('PostgreSQL', u.toString());
} finally {
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
}
