/**
 * PostgresStore: the shared store contract, all five parts (one fresh schema per test in one
 * database made for this run), then what only PostgreSQL has: concurrent migrations from
 * several processes, per-type concurrency under competing worker processes, transactional
 * enqueue, lease fencing between nodes, LISTEN/NOTIFY wake-ups, sweeper election and
 * connection loss.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import pino from 'pino';
import { Webhook } from 'standardwebhooks';
import type { JobRecord } from '../../src/core/job.js';
import { EMPTY_PROGRESS } from '../../src/core/progress.js';
import { suspend } from '../../src/core/transitions.js';
import { emptyWorkflow, NEVER } from '../../src/core/workflow.js';
import { defineTask, InvalidOptionsError, type JobSnapshot, JobNotFoundError, Longhaul, type OpenOptions } from '../../src/index.js';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { tenantBacklogSql } from '../../src/store/postgres/submit-ops.js';
import { deadLetterGroupsSql, deadLetterWhere, failedJobsSql } from '../../src/store/postgres/dead-letter-ops.js';
import { runStatsContract } from './store-contract/stats.js';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import type { SqlTransaction } from '../../src/store/store.js';
import { killAllChildren, tempDir, WorkerChild, waitFor } from '../fixtures/process-harness.js';
import pgTasks, { createLedger } from '../fixtures/pg-tasks.js';
import { assertLogReplays, newJob } from './store-contract/fixtures.js';
import { runJobQueueContract } from './store-contract/job-queue.js';
import { runResultFileContract } from './store-contract/result-files.js';
import { runWebhookOutboxContract } from './store-contract/webhook-outbox.js';
import { runScheduleContract } from './store-contract/schedules.js';
import { runRetentionContract } from './store-contract/retention.js';
import { runClaimLimitsContract } from './store-contract/claim-limits.js';
import { runTenantQuotaContract } from './store-contract/tenant-quota.js';
import { runDeadLetterContract } from './store-contract/dead-letters.js';
import { runWorkflowContract } from './store-contract/workflow.js';
import { runFailFastContract } from './store-contract/fail-fast.js';
import { runApiKeyContract } from './store-contract/api-keys.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { scriptedReceiver } from '../support/webhook-receiver.js';
import { settled } from '../support/jobs.js';

const db: TestDatabase = await createTestDatabase('lh_pgstore');
let schemas = 0;

after(async () => {
  await db.drop();
});

async function openStore(schema = `t${++schemas}`): Promise<PostgresStore> {
  const store = new PostgresStore({ connectionString: db.url, schema });
  await store.migrate();
  return store;
}

runJobQueueContract(`postgres (${db.source})`, () => openStore());
runResultFileContract(`postgres (${db.source})`, () => openStore());
runWebhookOutboxContract(`postgres (${db.source})`, () => openStore());
runWorkflowContract(`postgres (${db.source})`, () => openStore());
runFailFastContract(`postgres (${db.source})`, () => openStore());
runScheduleContract(`postgres (${db.source})`, () => openStore());
runRetentionContract(`postgres (${db.source})`, () => openStore());
runClaimLimitsContract(`postgres (${db.source})`, () => openStore());
runTenantQuotaContract(`postgres (${db.source})`, () => openStore());
runDeadLetterContract(`postgres (${db.source})`, () => openStore());
runStatsContract(`postgres (${db.source})`, () => openStore());
runApiKeyContract(`postgres (${db.source})`, () => openStore(), (s) =>
  admin(async (c) => (await c.query(`SELECT * FROM "${(s as PostgresStore).schema}".api_keys`)).rows.map((r) => JSON.stringify(r))),
);

describe('postgres: the stats change log, grouped per statement', () => {
  /** The real count of jobs by state, from the table. */
  async function tableCounts(schema: string): Promise<Record<string, number>> {
    return admin(async (c) => {
      const rows = (await c.query(`SELECT state, count(*)::integer AS n FROM "${schema}".jobs GROUP BY state`)).rows as { state: string; n: number }[];
      return Object.fromEntries(rows.map((r) => [r.state, r.n]));
    });
  }
  const nonZero = (counts: Record<string, number>) => Object.fromEntries(Object.entries(counts).filter(([, n]) => n !== 0));

  it('a claim of 50 jobs writes one change row of 50, and the counts stay exact', async () => {
    const store = await openStore();
    try {
      await store.insertJobs({ jobs: Array.from({ length: 60 }, (_, i) => newJob({ type: 'grouped', input: { i } })) });
      const claimed = await store.claimJobs({ workerId: 'w', types: [{ type: 'grouped' }, { type: 'other' }], limit: 50, now: T0 });
      assert.equal(claimed.length, 50);
      // The submission's rows carry submitted_at; the claim's is the other: -50 queued, +50 running
      // (one row, written by the claim itself, not by the update trigger).
      const rows = await admin(
        async (c) =>
          (await c.query(`SELECT old_state, new_state, n FROM "${store.schema}".job_changes WHERE submitted_at IS NULL ORDER BY old_state NULLS LAST`)).rows,
      );
      assert.deepEqual(rows, [{ old_state: 'queued', new_state: 'running', n: 50 }]);
      assert.deepEqual(nonZero(await store.countByState({})), { queued: 10, running: 50 });
      // A heartbeat changes no state: no change row.
      const before = await admin(async (c) => Number((await c.query(`SELECT count(*) FROM "${store.schema}".job_changes`)).rows[0].count));
      await admin((c) => c.query(`UPDATE "${store.schema}".jobs SET heartbeat_at = heartbeat_at + 1 WHERE state = 'running'`));
      assert.equal(await admin(async (c) => Number((await c.query(`SELECT count(*) FROM "${store.schema}".job_changes`)).rows[0].count)), before);
      await store.compactStats({ before: 0 });
      assert.deepEqual(nonZero(await store.countByState({})), await tableCounts(store.schema));
    } finally {
      await store.close();
    }
  });
});

describe("postgres: a claim's log entry waits in the row until the job's next change", () => {
  const claimEntry = (at: number, attempt: number, worker: string) => ({ from: 'queued', to: 'running', at, reason: 'claimed', attempt, workerId: worker });
  const logColumn = (schema: string, id: string) =>
    admin(async (c) => String((await c.query(`SELECT log FROM "${schema}".jobs WHERE id = $1`, [id])).rows[0]?.log));

  it('the reader adds the waiting entry; the next change writes it once, before its own; a job deleted on its end never writes it', async () => {
    const store = await openStore();
    try {
      await store.insertJobs({ jobs: [newJob({ type: 'logged' }), newJob({ type: 'logged' })] });
      const [a, b] = await store.claimJobs({ workerId: 'w-9', types: [{ type: 'logged' }], limit: 2, now: T0 + 7 });
      assert.ok(a && b);
      assert.doesNotMatch(await logColumn(store.schema, a.id), /claimed/);
      const running = await store.getTransitions({ id: a.id });
      assert.deepEqual(running?.slice(1), [claimEntry(T0 + 7, 1, 'w-9')]);
      assertLogReplays(running ?? [], await store.getJob({ id: a.id }) as JobRecord);
      // A change of the running job (flagged stalled) writes the claim's entry first.
      const [stalled] = await store.transition({ items: [{ id: a.id, from: 'running', to: 'running', lease: a.lease, reason: 'stalled', at: T0 + 8, patch: { stalled: true } }] });
      assert.equal(stalled, true);
      assert.equal((await logColumn(store.schema, a.id)).match(/claimed/g)?.length, 1);
      const [ended] = await store.transition({ items: [{ id: a.id, from: 'running', to: 'succeeded', lease: a.lease, reason: 'completed', at: T0 + 9, patch: { finishedAt: T0 + 9 } }] });
      assert.equal(ended, true);
      const log = (await store.getTransitions({ id: a.id })) ?? [];
      assert.deepEqual(
        log.slice(1).map((e) => e.reason),
        ['claimed', 'stalled', 'completed'],
      );
      assert.deepEqual(log[1], claimEntry(T0 + 7, 1, 'w-9'));
      assertLogReplays(log, await store.getJob({ id: a.id }) as JobRecord);
      // Retention 0: deleted by the write that ends it, log and all.
      const gone = await store.completeAndClaim({
        complete: [{ id: b.id, from: 'running', to: 'succeeded', lease: b.lease, reason: 'completed', at: T0 + 9, patch: { finishedAt: T0 + 9 }, deleteOnEnd: true }],
        claim: { workerId: 'w-9', types: [], limit: 0, now: T0 + 9 },
      });
      assert.deepEqual(gone.deleted, [true]);
      assert.equal(await store.getTransitions({ id: b.id }), null);
    } finally {
      await store.close();
    }
  });

});

// ---- helpers for the PostgreSQL-specific tests ----

const T0 = 1_700_000_000_000;
const quiet = pino({ level: 'silent' });

/** A client on the test database as an administrator would use it (terminating backends, reading tables). */
async function admin<T>(fn: (c: pg.Client) => Promise<T>, url = db.url): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Ends the sessions on database `url` whose application name matches. */
async function terminate(applicationName: string, url = db.url): Promise<number> {
  return admin(async (c) => {
    const res = await c.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()',
      [applicationName],
    );
    return res.rowCount ?? 0;
  }, url);
}

function spawnFixture(script: string, args: string[], env: Record<string, string>, label: string): WorkerChild {
  const proc = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: new URL('../..', import.meta.url).pathname,
    env: { ...process.env, LONGHAUL_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new WorkerChild(proc, label);
}

after(async () => {
  await killAllChildren();
});

describe("postgres: worker_cycle takes retention 0's successes as arrays", () => {
  it('a claimed job reads the same as the job read back, though its row leaves out what the claim set', async () => {
    const store = await openStore();
    try {
      const parent = newJob({ type: 'parent18' });
      const first = newJob({ type: 'read18', metadata: { who: 'me' }, timeoutMs: 5000, stallTimeoutMs: 7000, idempotencyKey: 'k-18', parentId: parent.id, priority: 'high' });
      await store.insertJobs({ jobs: [parent, first] });
      const [a] = await store.claimJobs({ workerId: 'w-18', types: [{ type: 'read18' }], limit: 1, now: T0 + 3 });
      assert.ok(a);
      assert.deepEqual(a, await store.getJob({ id: first.id }));
      assert.equal(a.state, 'running');
      assert.equal(a.startedAt, T0 + 3);
      // Its second attempt: progress, a checkpoint and the first attempt's error are read back too.
      const progress = { ...EMPTY_PROGRESS, percent: 40, updatedAt: new Date(T0 + 4).toISOString() };
      assert.ok(await store.saveProgress({ id: a.id, lease: a.lease, progress, now: T0 + 4 }));
      assert.ok(await store.saveCheckpoint({ id: a.id, lease: a.lease, checkpoint: { version: 1, data: { at: 3 } }, now: T0 + 4 }));
      const error = { message: 'x', code: 'E', retryable: true };
      const [retried] = await store.transition({ items: [{ id: a.id, from: 'running', to: 'retrying', lease: a.lease, reason: 'retry', at: T0 + 5, patch: { runAt: T0 + 5, error } }] });
      assert.equal(retried, true);
      assert.equal(await store.promoteDue({ now: T0 + 6, limit: 10 }), 1);
      const [b] = await store.claimJobs({ workerId: 'w-18b', types: [{ type: 'read18' }], limit: 1, now: T0 + 7 });
      assert.ok(b);
      assert.deepEqual(b, await store.getJob({ id: first.id }));
      assert.deepEqual([b.lease, b.attempts, b.workerId, b.heartbeatAt, b.stalled, b.wait], [2, 2, 'w-18b', T0 + 7, false, null]);
      assert.deepEqual(b.error, error);
      assert.equal(b.progress.percent, 40);
      assert.deepEqual(b.checkpoint?.data, { at: 3 });
    } finally {
      await store.close();
    }
  });

});

describe('PostgresStore specifics', () => {
  it('migrate run by 4 processes at once applies each version once, without errors', async () => {
    const schema = 'concurrent_migrate';
    const at = Date.now() + 2500;
    const children = Array.from({ length: 4 }, (_, i) =>
      spawnFixture('test/fixtures/pg-migrate.ts', ['--db', db.url, '--schema', schema, '--at', String(at)], {}, `migrate#${i + 1}`),
    );
    const exits = await Promise.all(children.map((c) => c.exited));
    for (const c of children) {
      assert.deepEqual(c.exitInfo, { code: 0, signal: null }, `${c.label} failed: ${c.stderr}`);
      assert.deepEqual(
        c.events.map((e) => [e.event, e.version]),
        [['migrated', PostgresStore.latestVersion]],
      );
    }
    assert.equal(exits.length, 4);
    const versions = await admin(async (c) => (await c.query(`SELECT version FROM "${schema}".schema_migrations ORDER BY version`)).rows.map((r) => r.version));
    assert.deepEqual(
      versions,
      Array.from({ length: PostgresStore.latestVersion }, (_, i) => i + 1),
    );
    // The schema works.
    const store = await openStore(schema);
    try {
      assert.equal((await store.insertJob({ job: newJob() })).kind, 'created');
    } finally {
      await store.close();
    }
  });

  it('dead-letter reads can be index-only scans of jobs_dead_letters: groups without a sort, a page seeking its cursor', async () => {
    const store = await openStore();
    const client = await store.pool.connect();
    try {
      // A tiny table is read sequentially whatever the indexes: ask what the plan is when it is not.
      await client.query('SET enable_seqscan = off');
      const explain = async (sql: string, values: unknown[]) =>
        ((await client.query({ text: `EXPLAIN (COSTS OFF) ${sql}`, values })).rows as Array<Record<string, string>>).map((r) => r['QUERY PLAN']).join('\n');
      const tenant = deadLetterWhere({ tenant: 'acme' });
      const groups = await explain(deadLetterGroupsSql(`"${store.schema}"`, tenant.where, tenant.values.length + 1), [...tenant.values, 10]);
      assert.match(groups, /GroupAggregate[\s\S]*Index Only Scan using jobs_dead_letters/, groups);
      assert.doesNotMatch(groups.split('GroupAggregate')[1] ?? '', /Sort\b/, groups);
      const group = deadLetterWhere({ tenant: 'acme', type: 'report', code: 'E' });
      const where = [...group.where, `(j.finished_at, j.id) < ($${group.values.length + 1}::bigint, $${group.values.length + 2}::uuid)`];
      const page = await explain(failedJobsSql(`"${store.schema}"`, where, 'desc', 'j.id', group.values.length + 3), [...group.values, T0, newJob().id, 10]);
      assert.match(page, /Index Only Scan Backward using jobs_dead_letters/, page);
      assert.match(page, /Index Cond: .*ROW\(finished_at, id\) < ROW/, page);
      assert.doesNotMatch(page, /Sort\b/, page);
    } finally {
      client.release();
      await store.close();
    }
  });

  it('refuses a schema made by a pre-release build (its own migrations table of 20 steps), saying so and what to do', async () => {
    const schema = `t${++schemas}`;
    await admin(async (c) => {
      await c.query(`CREATE SCHEMA "${schema}"`);
      await c.query(`CREATE TABLE "${schema}".migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
      await c.query(`INSERT INTO "${schema}".migrations (version) SELECT generate_series(1, 20)`);
    });
    const store = new PostgresStore({ connectionString: db.url, schema });
    try {
      await assert.rejects(store.migrate(), (err: Error) => {
        assert.match(err.message, new RegExp(`schema "${schema}" was created by a pre-release build of Longhaul`));
        assert.match(err.message, /DROP SCHEMA/);
        return true;
      });
      // Nothing was created beside it.
      assert.equal(await admin(async (c) => (await c.query('SELECT to_regclass($1) AS r', [`"${schema}".schema_migrations`])).rows[0].r), null);
    } finally {
      await store.close();
    }
  });

  it('migrate(to) stops at that version; a version past the latest is refused', async () => {
    const schema = `t${++schemas}`;
    const store = new PostgresStore({ connectionString: db.url, schema });
    try {
      assert.deepEqual(await store.migrate(1), { from: 0, to: 1 });
      assert.equal(await store.schemaVersion(), 1);
      await assert.rejects(store.migrate(PostgresStore.latestVersion + 1), /knows versions 1 to/);
      assert.deepEqual(await store.migrate(), { from: 1, to: PostgresStore.latestVersion });
      assert.deepEqual(
        await admin(async (c) => (await c.query(`SELECT version, name FROM "${schema}".schema_migrations ORDER BY version`)).rows),
        [
          { version: 1, name: 'baseline' },
          { version: 2, name: 'api_keys' },
        ],
        'each file recorded once, by name',
      );
    } finally {
      await store.close();
    }
  });

  it('refuses a schema newer than this version of Longhaul', async () => {
    const store = await openStore();
    try {
      await store.pool.query(`INSERT INTO "${store.schema}".schema_migrations (version, name) VALUES ($1, 'future')`, [PostgresStore.latestVersion + 1]);
      await assert.rejects(store.migrate(), /newer than this Longhaul/);
    } finally {
      await store.close();
    }
  });

  it('concurrent claims from 4 pools never exceed a type’s concurrency', async () => {
    const stores = [await openStore()];
    for (let i = 1; i < 4; i++) stores.push(new PostgresStore({ connectionString: db.url, schema: (stores[0] as PostgresStore).schema, poolSize: 2 }));
    const [first] = stores as [PostgresStore];
    try {
      await first.insertJobs({ jobs: Array.from({ length: 300 }, () => newJob({ type: 'lim' })) });
      await first.insertJobs({ jobs: Array.from({ length: 300 }, () => newJob({ type: 'free' })) });
      const types = [{ type: 'lim', concurrency: 2 }, { type: 'free' }];
      let freeClaimed = 0;
      for (let round = 0; round < 20; round++) {
        // Eight claims at once, two per pool, each asking for up to 5 jobs.
        const batches = await Promise.all(stores.flatMap((s, i) => [0, 1].map((k) => s.claimJobs({ workerId: `w${i}.${k}`, types, limit: 5, now: T0 }))));
        const got = batches.flat();
        const counts = await first.countByState({});
        const running = await first.listJobs({ states: ['running'], type: 'lim', limit: 100 });
        assert.equal(running.items.length, 2, `round ${round}: exactly 2 lim running`);
        freeClaimed += got.filter((j) => j.type === 'free').length;
        assert.equal(counts.running, got.length, 'what the claims returned is what runs');
        await first.transition({
          items: got.map((j) => ({ id: j.id, from: 'running' as const, to: 'succeeded' as const, lease: j.lease, reason: 'done', at: T0 + 1 })),
        });
      }
      assert.ok(freeClaimed >= 200, `the unlimited type kept being claimed (${freeClaimed})`);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it('tenant backlog limits hold under concurrent submissions from 4 pools: single jobs and whole batches never overshoot', async () => {
    const stores = [await openStore()];
    for (let i = 1; i < 4; i++) stores.push(new PostgresStore({ connectionString: db.url, schema: (stores[0] as PostgresStore).schema, poolSize: 3 }));
    const [first] = stores as [PostgresStore];
    const backlog = async (tenant: string) => {
      const c = await first.countByState({ tenant });
      return c.pending + c.queued + c.retrying;
    };
    try {
      // 4 pools × 15 single jobs at once (some keyed, as keyed ones take the same transaction path), limit 20.
      const singles = await Promise.all(
        stores.flatMap((s, p) =>
          Array.from({ length: 15 }, (_, i) =>
            s.insertJob({ job: newJob({ tenant: 'acme', ...(i % 3 === 0 ? { idempotencyKey: `k${p}.${i}`, requestHash: 'h' } : {}) }), maxTenantBacklog: { acme: 20 } }),
          ),
        ),
      );
      assert.equal(singles.filter((r) => r.kind === 'created').length, 20);
      assert.equal(singles.filter((r) => r.kind === 'tenant-full').length, 40);
      assert.equal(await backlog('acme'), 20);
      // 4 pools × 3 batches of 5 at once, limit 22: whole batches only, so 20 jobs, never 22 or more.
      const batches = await Promise.all(
        stores.flatMap((s) =>
          Array.from({ length: 3 }, () => s.insertJobs({ jobs: Array.from({ length: 5 }, () => newJob({ tenant: 'beta' })), maxTenantBacklog: { beta: 22 }, wholeBatch: true })),
        ),
      );
      const kinds = batches.map((b) => [...new Set(b.map((r) => r.kind))].join());
      assert.equal(kinds.filter((k) => k === 'created').length, 4, kinds.join(' | '));
      assert.equal(kinds.filter((k) => k === 'tenant-full').length, 8, kinds.join(' | '));
      assert.equal(await backlog('beta'), 20);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("a tenant's backlog is counted through the partial index jobs_tenant_backlog, stopping at the limit", async () => {
    const store = await openStore();
    try {
      // Many ended jobs and other tenants' jobs, a few waiting ones of the tenant counted.
      for (let i = 0; i < 4; i++) {
        await store.insertJobs({ jobs: Array.from({ length: 1000 }, (_, k) => newJob({ tenant: k % 10 === 0 ? 'acme' : `t${k % 7}`, type: 'old' })) });
      }
      await admin(async (c) => {
        await c.query(`UPDATE "${store.schema}".jobs SET state = 'succeeded', finished_at = 1 WHERE type = 'old' AND tenant <> 'acme'`);
        await c.query(`ANALYZE "${store.schema}".jobs`);
        const res = await c.query(`EXPLAIN ${tenantBacklogSql(`"${store.schema}"`)}`, [['acme'], [50]]);
        const plan = res.rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n');
        assert.match(plan, /(Index (Only )?Scan using|Bitmap Index Scan on) jobs_tenant_backlog\b/, plan);
        assert.match(plan, /Limit/, plan);
      });
    } finally {
      await store.close();
    }
  });

  it('tenant quotas refuse a caller transaction that is not READ COMMITTED (its count would miss concurrent submissions)', async () => {
    const store = await openStore();
    try {
      await admin(async (c) => {
        await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        await assert.rejects(store.insertJob({ job: newJob(), tx: c, maxTenantBacklog: { acme: 5 } }), (err: Error) => err instanceof InvalidOptionsError && /READ COMMITTED/.test(err.message));
        await c.query('ROLLBACK');
        await c.query('BEGIN');
        assert.equal((await store.insertJob({ job: newJob(), tx: c, maxTenantBacklog: { acme: 5 } })).kind, 'created');
        await c.query('COMMIT');
      });
      assert.equal((await store.countByState({ tenant: 'acme' })).queued, 1);
    } finally {
      await store.close();
    }
  });

  it('a limited type’s claims wait for its lock; unlimited types never wait', async () => {
    const store = await openStore();
    try {
      await store.insertJobs({
        jobs: [...Array.from({ length: 3 }, () => newJob({ type: 'lim' })), ...Array.from({ length: 3 }, () => newJob({ type: 'free' }))],
      });
      await admin(async (c) => {
        await c.query('BEGIN');
        // What a concurrent claim of `lim` holds until it commits.
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', [`${store.schema}:type-limit`, 'lim']);
        const free = await store.claimJobs({ workerId: 'w', types: [{ type: 'free' }], limit: 5, now: T0 });
        assert.equal(free.length, 3, 'an unlimited type is claimed at once');
        let waited = true;
        const limited = store.claimJobs({ workerId: 'w', types: [{ type: 'lim', concurrency: 2 }], limit: 5, now: T0 }).then((jobs) => {
          waited = false;
          return jobs;
        });
        await sleep(200);
        assert.equal(waited, true, 'the limited claim waits for the lock');
        await c.query('COMMIT');
        assert.equal((await limited).length, 2);
        // Claims refuse to run with a snapshot per transaction (the lock would not protect the count).
        await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        await assert.rejects(
          c.query(`SELECT * FROM "${store.schema}".worker_cycle('{}', '{}', '{}', '{}', '{}', '{}', '[]', 0, 'w', '{lim}', '{2}', 5, $1, '{NULL}', '{NULL}', '{NULL}', NULL, '{}', '{}', NULL)`, [T0]),
          /READ COMMITTED/,
        );
        await c.query('ROLLBACK');
      });
    } finally {
      await store.close();
    }
  });

  it('a worker whose lease was taken over is refused everywhere, and of a racing reap and completion exactly one applies', async () => {
    const a = await openStore(); // worker node
    const b = new PostgresStore({ connectionString: db.url, schema: a.schema }); // sweeper node, its own pool
    try {
      await a.insertJob({ job: newJob({ type: 'fence' }) });
      const [mine] = await a.claimJobs({ workerId: 'node-a', types: [{ type: 'fence' }], limit: 1, now: T0 });
      assert.ok(mine);
      // Node B reaps it (stale heartbeat) and claims the next attempt.
      assert.deepEqual(
        await b.transition({
          items: [{ id: mine.id, from: 'running', to: 'retrying', lease: mine.lease, reason: 'heartbeat lost', at: T0 + 1, patch: { runAt: T0 + 1 } }],
        }),
        [true],
      );
      const [theirs] = await b.claimJobs({ workerId: 'node-b', types: [{ type: 'fence' }], limit: 1, now: T0 + 2 });
      assert.equal(theirs?.lease, mine.lease + 1);
      // Every late write of node A is refused.
      const late = {
        id: mine.id,
        from: 'running' as const,
        to: 'succeeded' as const,
        lease: mine.lease,
        reason: 'completed',
        at: T0 + 3,
        patch: { result: 'stale' },
      };
      assert.deepEqual((await a.completeAndClaim({ complete: [late], claim: { workerId: 'node-a', types: [], limit: 0, now: T0 + 3 } })).applied, [false]);
      assert.equal((await a.heartbeat({ items: [{ id: mine.id, lease: mine.lease }], now: T0 + 3 }))[0]?.ok, false);
      assert.equal((await a.leaseStatus({ items: [{ id: mine.id, lease: mine.lease }] }))[0]?.ok, false);
      assert.equal(await a.saveProgress({ id: mine.id, lease: mine.lease, progress: { ...EMPTY_PROGRESS, percent: 99 }, now: T0 + 3 }), false);
      assert.equal(await a.saveCheckpoint({ id: mine.id, lease: mine.lease, checkpoint: { version: 1, data: 'stale' }, now: T0 + 3 }), false);
      assert.deepEqual(await b.transition({ items: [{ ...late, lease: mine.lease + 1, patch: { result: 'fresh' } }] }), [true]);
      const done = await a.getJob({ id: mine.id });
      assert.equal(done?.state, 'succeeded');
      assert.equal(done?.result, 'fresh');
      assert.equal(done?.checkpoint, null);
      assert.equal(done?.progress.percent, null);

      // A race: node A completes 40 jobs while node B reaps the same 40, concurrently.
      for (let i = 0; i < 40; i++) await a.insertJob({ job: newJob({ type: 'race' }) });
      const claimed = await a.claimJobs({ workerId: 'node-a', types: [{ type: 'race' }], limit: 40, now: T0 });
      assert.equal(claimed.length, 40);
      const completions = claimed.map((j) => ({
        id: j.id,
        from: 'running' as const,
        to: 'succeeded' as const,
        lease: j.lease,
        reason: 'completed',
        at: T0 + 5,
      }));
      const reaps = [...claimed].reverse().map((j) => ({
        id: j.id,
        from: 'running' as const,
        to: 'retrying' as const,
        lease: j.lease,
        reason: 'heartbeat lost',
        at: T0 + 5,
        patch: { runAt: T0 + 5 },
      }));
      const [completed, reaped] = await Promise.all([
        a.completeAndClaim({ complete: completions, claim: { workerId: 'node-a', types: [], limit: 0, now: T0 + 5 } }),
        b.transition({ items: reaps }),
      ]);
      const reapedById = new Map(reaps.map((r, i) => [r.id, reaped[i]]));
      for (const [i, j] of claimed.entries()) {
        const won = [completed.applied[i], reapedById.get(j.id)].filter(Boolean).length;
        assert.equal(won, 1, `job ${j.id}: exactly one side wins`);
        const log = await a.getTransitions({ id: j.id });
        assert.equal(log?.length, 3, 'submitted, claimed, and one of the two');
        assertLogReplays(log ?? [], (await a.getJob({ id: j.id })) as JobRecord);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('pollChanges: NOTIFY on insert, promotion and hand-back, delivered at commit; the listen connection reconnects', async () => {
    const writer = await openStore();
    const reader = new PostgresStore({ connectionString: db.url, schema: writer.schema, applicationName: 'lh-poll-reader' });
    const changed = () => waitFor(async () => (await reader.pollChanges()) || undefined, 'a wake-up', 5_000, 20);
    const quietFor = async (ms: number) => {
      await sleep(ms);
      return reader.pollChanges();
    };
    try {
      assert.equal(await reader.pollChanges(), true, 'true before the first look');
      await waitFor(() => reader.listenState.connected, 'the listen connection');
      await reader.pollChanges();
      assert.equal(await quietFor(100), false, 'nothing happened');

      await writer.insertJob({ job: newJob({ type: 'wake' }) });
      await changed();
      assert.equal(await quietFor(100), false, 'one signal, taken once');

      // A future job wakes nobody; its promotion does.
      await writer.insertJob({ job: newJob({ type: 'wake', state: 'pending', runAt: T0 + 1_000 }) });
      assert.equal(await quietFor(200), false, 'a pending job is not claimable');
      assert.equal(await writer.promoteDue({ now: T0 + 1_000, limit: 10 }), 1);
      await changed();

      // Completions wake nobody; a hand-back (due at once) does.
      const [a, b] = await writer.claimJobs({ workerId: 'w', types: [{ type: 'wake' }], limit: 2, now: T0 + 1_000 });
      assert.ok(a && b);
      await reader.pollChanges();
      await writer.transition({ items: [{ id: a.id, from: 'running', to: 'succeeded', lease: a.lease, reason: 'done', at: T0 + 1_001 }] });
      assert.equal(await quietFor(200), false, 'a completion frees a slot only for its own worker');
      await writer.transition({
        items: [
          { id: b.id, from: 'running', to: 'retrying', lease: b.lease, reason: 'shutdown', at: T0 + 1_001, patch: { runAt: T0 + 1_001, refundAttempt: true } },
        ],
      });
      await changed();

      // Inside a caller's transaction: nothing until COMMIT.
      await admin(async (c) => {
        await c.query('BEGIN');
        await writer.insertJob({ job: newJob({ type: 'wake' }), tx: c });
        assert.equal(await quietFor(200), false, 'not before commit');
        await c.query('COMMIT');
      });
      await changed();

      // The listen connection dies: true once (notifications may have been lost), and again when it is back.
      const pid = reader.listenState.backendPid;
      assert.ok(pid);
      await admin((c) => c.query('SELECT pg_terminate_backend($1)', [pid]));
      await waitFor(() => !reader.listenState.connected || reader.listenState.backendPid !== pid, 'the listen connection to drop');
      assert.equal(await reader.pollChanges(), true);
      await waitFor(() => reader.listenState.connected && reader.listenState.backendPid !== pid, 'the listen connection to come back', 10_000);
      await reader.pollChanges();
      assert.equal(await quietFor(100), false);
      await writer.insertJob({ job: newJob({ type: 'wake' }) });
      await changed();
    } finally {
      await Promise.all([writer.close(), reader.close()]);
    }
  });

  it('workflow wake-ups: a due waiting job, a signal that wakes its job and resumed parents NOTIFY; a sleep and a kept signal do not', async () => {
    const writer = await openStore();
    const reader = new PostgresStore({ connectionString: db.url, schema: writer.schema, applicationName: 'lh-wf-reader' });
    const changed = () => waitFor(async () => (await reader.pollChanges()) || undefined, 'a wake-up', 5_000, 20);
    const quietFor = async (ms: number) => {
      await sleep(ms);
      return reader.pollChanges();
    };
    const runningJob = async (type: string, now = T0): Promise<JobRecord> => {
      await writer.insertJob({ job: newJob({ type }) });
      const [j] = await writer.claimJobs({ workerId: 'w', types: [{ type }], limit: 1, now });
      assert.ok(j);
      return j;
    };
    try {
      await reader.pollChanges();
      await waitFor(() => reader.listenState.connected, 'the listen connection');
      const sleeper = await runningJob('wf-sleep');
      const waiter = await runningJob('wf-signal');
      const parent = await runningJob('wf-parent');
      await reader.pollChanges();
      assert.equal(await quietFor(100), false, 'nothing happened');

      const sleep1 = suspend(sleeper, 'w', T0 + 1, T0 + 1_000, 'sleep');
      assert.deepEqual(await writer.suspend({ write: sleep1, wait: { kind: 'sleep' }, workflow: emptyWorkflow() }), { kind: 'suspended' });
      const wait1 = suspend(waiter, 'w', T0 + 1, NEVER, 'signal');
      assert.deepEqual(await writer.suspend({ write: wait1, wait: { kind: 'signal', name: 'go', key: 'k' }, workflow: emptyWorkflow() }), { kind: 'suspended' });
      assert.equal((await writer.sendSignal({ id: sleeper.id, name: 'go', payload: 1, at: T0 + 2 })).kind, 'accepted');
      assert.equal(await quietFor(200), false, 'suspends and a kept signal make nothing claimable');

      assert.equal(await writer.promoteDue({ now: T0 + 1_000, limit: 10 }), 1);
      await changed();
      assert.deepEqual(await writer.sendSignal({ id: waiter.id, name: 'go', payload: 2, at: T0 + 3 }), {
        kind: 'accepted',
        job: { id: waiter.id, tenant: waiter.tenant, type: waiter.type },
        resumed: true,
        reason: 'signal go',
      });
      await changed();

      const child = newJob({ type: 'wf-child', parentId: parent.id });
      const spawn1 = suspend(parent, 'w', T0 + 1, NEVER, 'spawn');
      await writer.suspend({ write: spawn1, wait: { kind: 'children', failFast: false }, workflow: emptyWorkflow(), children: [child] });
      await changed(); // the child is claimable
      const [c] = await writer.claimJobs({ workerId: 'w', types: [{ type: 'wf-child' }], limit: 1, now: T0 + 4 });
      assert.ok(c);
      await writer.transition({ items: [{ id: c.id, from: 'running', to: 'succeeded', lease: c.lease, reason: 'done', at: T0 + 5 }] });
      assert.equal(await quietFor(200), false);
      assert.equal((await writer.resumeParents({ parents: [{ id: parent.id, childFailed: false }], at: T0 + 6 })).length, 1);
      await changed();
    } finally {
      await Promise.all([writer.close(), reader.close()]);
    }
  });

  it('a signal sent while its job suspends on it, from another pool, is consumed exactly once: by the suspend or by waking the job', async () => {
    const a = await openStore();
    const b = new PostgresStore({ connectionString: db.url, schema: a.schema });
    try {
      const outcomes = { signalled: 0, woken: 0 };
      for (let i = 0; i < 30; i++) {
        await a.insertJob({ job: newJob({ type: 'race' }) });
        const [j] = await a.claimJobs({ workerId: 'w', types: [{ type: 'race' }], limit: 1, now: T0 });
        assert.ok(j);
        const write = suspend(j, 'w', T0 + 1, NEVER, 'signal');
        const [suspended, sent] = await Promise.all([
          a.suspend({ write, wait: { kind: 'signal', name: 'go', key: 'k' }, workflow: emptyWorkflow() }),
          b.sendSignal({ id: j.id, name: 'go', payload: i, at: T0 + 1 }),
        ]);
        assert.equal(sent.kind, 'accepted');
        const woken = sent.kind === 'accepted' && sent.resumed;
        if (suspended.kind === 'signalled') {
          assert.equal(woken, false);
          assert.equal(suspended.payload, i);
          assert.equal((await a.getJob({ id: j.id }))?.state, 'running');
          outcomes.signalled++;
          await a.transition({ items: [{ id: j.id, from: 'running', to: 'succeeded', lease: j.lease, reason: 'done', at: T0 + 2 }] });
        } else {
          assert.equal(suspended.kind, 'suspended');
          assert.equal(woken, true, 'the job waited when the signal came: the signal woke it');
          assert.equal((await a.getJob({ id: j.id }))?.state, 'queued');
          outcomes.woken++;
          await a.transition({ items: [{ id: j.id, from: 'queued', to: 'cancelled', reason: 'test', at: T0 + 2 }] });
        }
        assert.deepEqual(await a.consumedSignal({ id: j.id, key: 'k' }), { payload: i });
      }
      assert.equal(outcomes.signalled + outcomes.woken, 30);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('pollChanges after close answers without opening a connection (a worker loop may tick once more)', async () => {
    const late = new PostgresStore({ connectionString: db.url, applicationName: 'lh-poll-late' });
    await late.close();
    assert.equal(await late.pollChanges(), true);
    assert.equal(await late.pollChanges(), false);
    await sleep(100);
    const open = await admin((c) => c.query("SELECT count(*)::integer AS n FROM pg_stat_activity WHERE application_name LIKE 'lh-poll-late%'"));
    assert.equal(open.rows[0]?.n, 0);
  });

  it('sweeper election: one holder at a time; the lock moves on when the holder closes or its session dies', async () => {
    const a = await openStore();
    const b = new PostgresStore({ connectionString: db.url, schema: a.schema, applicationName: 'lh-election-b' });
    const c = new PostgresStore({ connectionString: db.url, schema: a.schema, applicationName: 'lh-election-c' });
    try {
      assert.equal(await a.tryAcquireSweeperLock(), true);
      assert.equal(await b.tryAcquireSweeperLock(), false);
      assert.equal(await c.tryAcquireSweeperLock(), false);
      assert.equal(await a.tryAcquireSweeperLock(), true, 'the holder keeps it');
      await a.close();
      await waitFor(async () => (await b.tryAcquireSweeperLock()) || undefined, 'b to take over');
      assert.equal(await c.tryAcquireSweeperLock(), false);
      // The holder's session dies (crash, network): the lock is free again.
      assert.ok((await terminate('lh-election-b:sweeper')) >= 1);
      await waitFor(async () => (await c.tryAcquireSweeperLock()) || undefined, 'c to take over');
      assert.equal(await b.tryAcquireSweeperLock(), false, 'b reconnects and finds c holding it');
      // Another schema is another election.
      const other = await openStore();
      try {
        assert.equal(await other.tryAcquireSweeperLock(), true);
      } finally {
        await other.close();
      }
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });

  it("a stopped sweeper hands the role on though its store stays open (a Longhaul closed over the caller's store)", async () => {
    const a = await openStore();
    const b = new PostgresStore({ connectionString: db.url, schema: a.schema });
    try {
      assert.equal(await a.tryAcquireSweeperLock(), true);
      await a.releaseSweeperLock();
      assert.equal(await b.tryAcquireSweeperLock(), true, 'released at once');
      assert.equal(await a.tryAcquireSweeperLock(), false);
      await b.releaseSweeperLock();
      // Through Longhaul: an instance over a store it does not own stops its sweeper on close.
      const noop = defineTask({ type: 'sweeper.noop', run: () => null });
      const lh = await Longhaul.open({ store: a, tasks: [noop], logger: quiet, channel: false, sweepIntervalMs: 20 });
      let closed = false;
      try {
        await lh.startWorker({ concurrency: 1 });
        // b looks and lets go at once, so the instance's next pass can take the role.
        const taken = async () => {
          const got = await b.tryAcquireSweeperLock();
          if (got) await b.releaseSweeperLock();
          return !got;
        };
        await waitFor(async () => ((await taken()) ? true : undefined), 'the instance to be the sweeper');
        await lh.close({ drainMs: 0 });
        closed = true;
        assert.equal(await b.tryAcquireSweeperLock(), true, 'the closed instance no longer holds the role');
      } finally {
        if (!closed) await lh.close({ drainMs: 0 });
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('Longhaul on PostgreSQL', () => {
  const quick = defineTask({ type: 'pg.quick', run: async (input: { n: number }) => ({ doubled: input.n * 2 }) });
  const slow = defineTask({
    type: 'pg.slow',
    run: async (input: { ms: number }) => {
      await sleep(input.ms);
      return 'ok';
    },
  });

  /** Longhaul.open on a fresh database of its own (the default schema). */
  async function withLonghaul(fn: (lh: Longhaul, url: string) => Promise<void>, options: Partial<OpenOptions> = {}): Promise<void> {
    const own = await createTestDatabase('lh_pglib');
    const lh = await Longhaul.open({ database: own.url, tasks: [quick, slow], logger: quiet, sweepIntervalMs: 100, ...options });
    try {
      await fn(lh, own.url);
    } finally {
      await lh.close({ drainMs: 0 });
      await own.drop();
    }
  }

  it('per-type concurrency holds exactly under 4 competing worker processes; unlimited types run wide', async () => {
    await withLonghaul(
      async (lh, url) => {
        const ledgerPool = new pg.Pool({ connectionString: url, max: 2 });
        try {
          await createLedger(ledgerPool);
          const workers = Array.from({ length: 4 }, (_, i) =>
            spawnFixture('test/fixtures/pg-worker.ts', ['--db', url, '--concurrency', '6'], { LH_LEDGER_URL: url }, `pg-worker#${i + 1}`),
          );
          let limitedJobs: JobSnapshot[] = [];
          let freeJobs: JobSnapshot[] = [];
          try {
            await Promise.all(workers.map((w) => w.waitEvent((e) => e.event === 'ready', 'ready', 30_000)));
            // Submitted once every worker is idle and listening: the NOTIFY wakes all four at once,
            // and the stream of short unlimited jobs keeps every worker claiming all the time.
            limitedJobs = await lh.submitMany(Array.from({ length: 24 }, () => ({ type: 'pg.limited', input: { ms: 50 } })));
            freeJobs = await lh.submitMany(Array.from({ length: 600 }, () => ({ type: 'pg.free', input: { ms: 20 } })));
            // Meanwhile, sample what the database says is running.
            let sampling = true;
            const sampler = (async () => {
              let max = 0;
              while (sampling) {
                const res = await ledgerPool.query(`SELECT count(*)::integer AS n FROM longhaul.jobs WHERE state = 'running' AND type = 'pg.limited'`);
                max = Math.max(max, res.rows[0].n);
                await sleep(2);
              }
              return max;
            })();
            try {
              for (const j of [...limitedJobs, ...freeJobs]) {
                const done = await settled(lh, j.id, 30_000);
                assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
                assert.equal(done.attempts, 1);
              }
            } finally {
              sampling = false;
            }
            assert.ok((await sampler) <= 3, 'the database never had more than 3 pg.limited jobs running');
          } catch (err) {
            for (const w of workers) if (w.stderr.trim()) (err as Error).message += `\n--- ${w.label} ---\n${w.stderr.slice(-3000)}`;
            throw err;
          } finally {
            for (const w of workers) w.signal('SIGTERM');
            await Promise.all(workers.map((w) => Promise.race([w.exited, sleep(5_000).then(() => w.kill())])));
          }
          const gauges = Object.fromEntries((await ledgerPool.query('SELECT name, cur, max FROM ledger_gauge')).rows.map((r) => [r.name, r]));
          assert.equal(gauges.limited?.max, 3, 'pg.limited (concurrency 3) reached 3 and never more');
          assert.equal(gauges.limited?.cur, 0);
          assert.ok(gauges.free?.max > 3, `pg.free ran ${gauges.free?.max} at once`);
          const pids = (await ledgerPool.query("SELECT DISTINCT pid FROM ledger_events WHERE kind = 'start'")).rows;
          assert.ok(pids.length >= 2, 'several processes took part');
          const starts = (await ledgerPool.query("SELECT count(*)::integer AS n FROM ledger_events WHERE kind = 'start'")).rows[0].n;
          assert.equal(starts, 624, 'every job ran exactly once');
        } finally {
          await ledgerPool.end();
        }
      },
      { tasks: pgTasks },
    );
  });

  it('transactional enqueue: the job exists only once the caller commits; a rollback leaves nothing', async () => {
    await withLonghaul(async (lh, url) => {
      const worker = await lh.startWorker({ concurrency: 2 });
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      // The database is dropped (WITH FORCE) after the test: an idle client killed then must not
      // become an uncaught 'error' (seen twice in CI runs).
      pool.on('error', () => undefined);
      try {
        // Commit.
        const client = await pool.connect();
        let committed: JobSnapshot;
        try {
          await client.query('BEGIN');
          await client.query('CREATE TABLE orders (id integer PRIMARY KEY)');
          await client.query('INSERT INTO orders VALUES (1)');
          committed = await lh.submit('pg.quick', { n: 21 }, { tx: client });
          assert.equal(committed.status, 'queued');
          assert.equal(await lh.get(committed.id), null, 'invisible outside the transaction');
          const again = await lh.enqueue('pg.quick', { n: 21 }, { tx: client, idempotencyKey: 'order-1' });
          const replay = await lh.enqueue('pg.quick', { n: 21 }, { tx: client, idempotencyKey: 'order-1' });
          assert.equal(replay.replayed, true);
          assert.equal(replay.job.id, again.job.id);
          await sleep(150);
          assert.equal(await lh.get(committed.id), null, 'no worker ran it before commit');
          await client.query('COMMIT');
        } finally {
          client.release();
        }
        const done = await settled(lh, committed.id, 10_000);
        assert.equal(done.status, 'succeeded');
        assert.deepEqual(done.result, { doubled: 42 });
        assert.equal((await lh.list({ type: 'pg.quick' })).items.length, 2);

        // Rollback.
        const client2 = await pool.connect();
        let rolledBack: JobSnapshot;
        try {
          await client2.query('BEGIN');
          rolledBack = await lh.submit('pg.quick', { n: 1 }, { tx: client2 });
          const many = await lh.submitMany([1, 2, 3].map((n) => ({ type: 'pg.quick', input: { n }, options: { tx: client2 } })));
          assert.equal(many.length, 3);
          await client2.query('ROLLBACK');
        } finally {
          client2.release();
        }
        await sleep(200);
        assert.equal(await lh.get(rolledBack.id), null);
        await assert.rejects(lh.transitions(rolledBack.id), JobNotFoundError);
        assert.equal((await lh.list({ type: 'pg.quick' })).items.length, 2);
        assert.ok(worker.stats.succeeded >= 2);

        // One batch, one transaction (or none): a mixed batch is refused whole.
        for (const batch of [
          [{ tx: client2 }, {}],
          [{}, { tx: client2 }],
        ]) {
          await assert.rejects(lh.submitMany(batch.map((options) => ({ type: 'pg.quick', input: { n: 1 }, options }))), InvalidOptionsError);
        }
        assert.equal((await lh.list({ type: 'pg.quick' })).items.length, 2);
        // What tx must be.
        await assert.rejects(
          lh.submit('pg.quick', { n: 1 }, { tx: pool }),
          (err: unknown) => err instanceof InvalidOptionsError && /not the pool/.test(err.message),
        );
        await assert.rejects(lh.submit('pg.quick', { n: 1 }, { tx: {} as SqlTransaction }), InvalidOptionsError);
      } finally {
        await pool.end();
      }
    });
  });

  it('tx is refused with a typed error on SQLite', async () => {
    const tmp = tempDir('lh-pg-tx-');
    const lh = await Longhaul.open({ database: join(tmp.dir, 'x.db'), tasks: [quick], logger: quiet });
    try {
      await assert.rejects(
        lh.submit('pg.quick', { n: 1 }, { tx: { query: async () => ({ rows: [] }) } }),
        (err: unknown) => err instanceof InvalidOptionsError && /PostgreSQL/.test(err.message),
      );
      assert.equal((await lh.list()).items.length, 0);
    } finally {
      await lh.close();
      tmp.remove();
    }
  });

  it('connections killed under a running worker (as in a server restart): no crash, every job still succeeds once', async () => {
    await withLonghaul(async (lh, url) => {
      const worker = await lh.startWorker({ concurrency: 4 });
      const jobs = await lh.submitMany(Array.from({ length: 30 }, () => ({ type: 'pg.slow', input: { ms: 40 } })));
      let killed = 0;
      for (let i = 0; i < 3; i++) {
        await sleep(120);
        killed += await terminate('longhaul', url);
        killed += await terminate('longhaul:listen', url);
      }
      assert.ok(killed >= 3, `sessions ended: ${killed}`);
      for (const j of jobs) {
        const s = await settled(lh, j.id, 20_000);
        assert.equal(s.status, 'succeeded');
        assert.equal(s.attempts, 1);
      }
      // Work submitted after the storm is picked up too.
      const late = await lh.submit('pg.quick', { n: 2 });
      assert.equal((await settled(lh, late.id, 10_000)).status, 'succeeded');
      assert.ok(worker.stats.succeeded >= 31);
    });
  });

  it('result files and webhooks on PostgreSQL: a handler writes a file, the snapshot links it, the webhook is delivered and logged', async () => {
    const files = tempDir('longhaul-pg-files-');
    const secret = generateWebhookSecret();
    const rx = await scriptedReceiver([500, 200]);
    const writer = defineTask({
      type: 'pg.writer',
      async run(_input, ctx) {
        await ctx.results.write('hello.txt', 'hello from postgres\n');
        return { ok: true };
      },
    });
    try {
      await withLonghaul(
        async (lh) => {
          lh.register(writer);
          await lh.startWorker({ concurrency: 2, pollIntervalMs: 20 });
          const job = await lh.submit('pg.writer', null, { webhook: { url: rx.url } });
          const done = await settled(lh, job.id, 10_000);
          assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
          assert.deepEqual(
            done.results.map((r) => [r.name, r.size]),
            [['hello.txt', 20]],
          );
          assert.match(done.resultUrl ?? '', /^\/v1\/jobs\/[0-9a-f-]{36}\/results\/hello\.txt\?exp=\d+&sig=/);
          await waitFor(async () => rx.answered.length >= 2, 'two delivery attempts', 15_000);
          for (const r of rx.received) assert.equal((new Webhook(secret).verify(r.body, r.headers as Record<string, string>) as { type: string }).type, 'job.succeeded');
          // The delivery job logs an attempt after its answer arrived: the receiver may have
          // answered twice before the second entry is written (seen once in CI under load).
          const log = await waitFor(
            async () => {
              const entries = await lh.webhookDeliveries(job.id);
              return entries.length >= 2 && entries;
            },
            'both attempts in the delivery log',
            15_000,
          );
          assert.deepEqual(
            log.map((e) => [e.attempt, e.status, e.ok]),
            [
              [1, 500, false],
              [2, 200, true],
            ],
          );
          assert.equal((await lh.list({ tenant: 'default' })).items.some((j) => j.type === 'longhaul.webhook'), false);
        },
        {
          files: { urlSigningSecret: 'pg-test-url-signing-secret-0123456789', blobs: await FsBlobStore.open(files.dir) },
          webhooks: { secret, allowlist: '127.0.0.1', retrySchedule: [100] },
        },
      );
    } finally {
      await rx.close();
      files.remove();
    }
  });
});
