/**
 * SqliteStore: the shared store contract, all five parts, on a fresh temp file per test,
 * plus what only SQLite has (corrupt checkpoint bytes, data_version polling across
 * connections, the migration files applied and recorded, a pre-release database refused).
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DatabaseSync } from 'node:sqlite';
import { after, afterEach, describe, it } from 'node:test';
import type { SQLInputValue } from 'node:sqlite';
import { FAILED_CHILD_SQL, OPEN_CHILD_SQL, OPEN_SIBLINGS_SQL, STRANDED_PARENTS_SQL } from '../../src/store/sqlite/workflow-ops.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { TENANT_BACKLOG_SQL } from '../../src/store/sqlite/submit-ops.js';
import { PENDING_WEBHOOKS_SQL } from '../../src/store/sqlite/webhook-ops.js';
import { deadLetterGroupsSql, deadLetterWhere, failedJobsSql } from '../../src/store/sqlite/dead-letter-ops.js';
import { newJob } from './store-contract/fixtures.js';
import { runJobQueueContract } from './store-contract/job-queue.js';
import { runResultFileContract } from './store-contract/result-files.js';
import { runWebhookOutboxContract } from './store-contract/webhook-outbox.js';
import { runScheduleContract } from './store-contract/schedules.js';
import { runRetentionContract } from './store-contract/retention.js';
import { runClaimLimitsContract } from './store-contract/claim-limits.js';
import { runTenantQuotaContract } from './store-contract/tenant-quota.js';
import { runDeadLetterContract } from './store-contract/dead-letters.js';
import { runStatsContract } from './store-contract/stats.js';
import { runWorkflowContract } from './store-contract/workflow.js';
import { runFailFastContract } from './store-contract/fail-fast.js';
import { runApiKeyContract } from './store-contract/api-keys.js';

const dirs: string[] = [];

function tempPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-sqlite-'));
  dirs.push(dir);
  return join(dir, 'jobs.db');
}

after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function openStore(path = tempPath()): Promise<SqliteStore> {
  const s = new SqliteStore({ path });
  await s.migrate();
  return s;
}

runJobQueueContract('sqlite (file)', () => openStore());
runResultFileContract('sqlite (file)', () => openStore());
runWebhookOutboxContract('sqlite (file)', () => openStore());
runWorkflowContract('sqlite (file)', () => openStore());
runFailFastContract('sqlite (file)', () => openStore());
runScheduleContract('sqlite (file)', () => openStore());
runRetentionContract('sqlite (file)', () => openStore());
runClaimLimitsContract('sqlite (file)', () => openStore());
runTenantQuotaContract('sqlite (file)', () => openStore());
runDeadLetterContract('sqlite (file)', () => openStore());
// No backfill case: the baseline has the counters from the start.
runStatsContract('sqlite (file)', () => openStore());
runApiKeyContract('sqlite (file)', () => openStore(), async (s) =>
  (s as SqliteStore).db
    .prepare('SELECT * FROM api_keys')
    .all()
    .map((r) => JSON.stringify(r)),
);

describe('SqliteStore specifics', () => {
  const open: SqliteStore[] = [];
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
  });
  async function track(s: Promise<SqliteStore>): Promise<SqliteStore> {
    const store = await s;
    open.push(store);
    return store;
  }

  it('a checkpoint with corrupt bytes reads back as corrupt', async () => {
    const store = await track(openStore());
    const job = newJob();
    await store.insertJob({ job });
    const [claimed] = await store.claimJobs({ workerId: 'w', types: [{ type: job.type }], limit: 1, now: job.runAt });
    assert.ok(claimed);
    assert.ok(await store.saveCheckpoint({ id: job.id, lease: claimed.lease, checkpoint: { version: 3, data: { page: 7 } }, now: job.runAt }));
    assert.deepEqual((await store.getJob({ id: job.id }))?.checkpoint, { version: 3, data: { page: 7 } });

    store.db.prepare('UPDATE jobs SET checkpoint = ? WHERE id = ?').run('{"version": 3, "data": {"pa', job.id);
    const cp = (await store.getJob({ id: job.id }))?.checkpoint;
    assert.equal(cp?.corrupt, true);
    assert.ok(Number.isNaN(cp?.version));
    assert.equal(cp?.data, null);

    // Valid JSON without a numeric version is corrupt too.
    store.db.prepare('UPDATE jobs SET checkpoint = ? WHERE id = ?').run('{"data": 1}', job.id);
    assert.equal((await store.getJob({ id: job.id }))?.checkpoint?.corrupt, true);
    store.db.prepare('UPDATE jobs SET checkpoint = ? WHERE id = ?').run('"just a string"', job.id);
    assert.equal((await store.getJob({ id: job.id }))?.checkpoint?.corrupt, true);

    // A claim of a job with a corrupt checkpoint still works (the runtime starts over).
    assert.ok(
      await store.transition({
        items: [{ id: job.id, from: 'running', to: 'retrying', lease: claimed.lease, reason: 'r', at: job.runAt, patch: { runAt: job.runAt } }],
      }),
    );
    const [again] = await store.claimJobs({ workerId: 'w', types: [{ type: job.type }], limit: 1, now: job.runAt + 1 });
    assert.equal(again?.checkpoint?.corrupt, true);
  });

  it('pollChanges: true once at first, then only after another connection wrote', async () => {
    const path = tempPath();
    const a = await track(openStore(path));
    const b = await track(openStore(path));
    assert.equal(await a.pollChanges(), true, 'first poll');
    assert.equal(await a.pollChanges(), false, 'nothing happened');
    const job = newJob();
    await b.insertJob({ job });
    assert.equal(await a.pollChanges(), true, 'b wrote');
    assert.equal(await a.pollChanges(), false, 'seen');
    await b.getJob({ id: 'x' }); // a read is not a change
    assert.equal(await a.pollChanges(), false, 'b only read');
    await b.promoteDue({ now: 0, limit: 10 }); // nothing due: no rows written
    assert.equal(await a.pollChanges(), false, 'b wrote nothing');
    assert.deepEqual(await b.transition({ items: [{ id: job.id, from: 'queued', to: 'cancelled', reason: 'user', at: job.runAt }] }), [true]);
    assert.equal(await a.pollChanges(), true, 'b cancelled a job');
    await a.transition({ items: [{ id: job.id, from: 'cancelled', to: 'queued', reason: 'retry', at: job.runAt }] });
    assert.equal(await b.pollChanges(), true, 'first poll of b');
    await a.transition({ items: [{ id: job.id, from: 'queued', to: 'cancelled', reason: 'user', at: job.runAt }] });
    assert.equal(await b.pollChanges(), true, 'a wrote');
  });

  it('two connections on one file never claim the same job twice', async () => {
    const path = tempPath();
    const a = await track(openStore(path));
    const b = await track(openStore(path));
    const jobs = Array.from({ length: 40 }, () => newJob());
    await a.insertJobs({ jobs });
    const claimed: string[] = [];
    for (let i = 0; i < 20; i++) {
      const s = i % 2 === 0 ? a : b;
      const got = await s.claimJobs({ workerId: s === a ? 'wa' : 'wb', types: [{ type: 'report' }], limit: 3, now: jobs[0]?.runAt ?? 0 });
      claimed.push(...got.map((j) => j.id));
    }
    assert.equal(claimed.length, 40);
    assert.equal(new Set(claimed).size, 40);
  });

  it('several stores migrating one file apply each migration once', async () => {
    const path = tempPath();
    const stores = [new SqliteStore({ path }), new SqliteStore({ path }), new SqliteStore({ path })];
    for (const s of stores) open.push(s);
    const results = await Promise.all(stores.map((s) => s.migrate()));
    const latest = SqliteStore.latestVersion;
    assert.deepEqual(
      results.map((r) => [r.from, r.to]).sort(),
      [[0, latest], [latest, latest], [latest, latest]],
      'one store applied the files, the others found them applied',
    );
    for (const s of stores) assert.equal(await s.schemaVersion(), latest);
    const applied = stores[0]?.db.prepare('SELECT version, name FROM longhaul_migrations ORDER BY version').all() ?? [];
    assert.deepEqual(
      applied.map((r) => r.version),
      Array.from({ length: latest }, (_, i) => i + 1),
      'each file recorded once',
    );
    assert.equal(applied[0]?.name, 'baseline');
    await stores[0]?.insertJob({ job: newJob() });
    assert.equal((await stores[2]?.countByState({}))?.queued, 1);
  });

  it('several processes migrating one new file at once: one applies each file, the others find them applied', async () => {
    const path = tempPath();
    const startAt = Date.now() + 3_000; // every process waits for this instant, then migrates
    const script = `
      import { SqliteStore } from ${JSON.stringify(new URL('../../src/store/sqlite/sqlite-store.ts', import.meta.url).href)};
      const store = new SqliteStore({ path: ${JSON.stringify(path)} });
      while (Date.now() < ${startAt});
      const result = await store.migrate();
      await store.close();
      console.log(JSON.stringify(result));`;
    const runs = await Promise.all(
      Array.from({ length: 4 }, () => promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 60_000 })),
    );
    const latest = SqliteStore.latestVersion;
    assert.deepEqual(
      runs.map((r) => JSON.parse(r.stdout.trim()) as { from: number; to: number }).sort((a, b) => a.from - b.from),
      [{ from: 0, to: latest }, ...Array.from({ length: 3 }, () => ({ from: latest, to: latest }))],
    );
    const raw = new DatabaseSync(path);
    const versions = raw.prepare('SELECT version FROM longhaul_migrations ORDER BY version').all().map((r) => r.version);
    raw.close();
    assert.deepEqual(versions, Array.from({ length: latest }, (_, i) => i + 1));
  });

  it('migrate(to) stops at that version; a later migrate() goes on from there; to below the current version is refused', async () => {
    const store = await track(Promise.resolve(new SqliteStore({ path: tempPath() })));
    await assert.rejects(store.ping(), 'not migrated: not ready');
    assert.deepEqual(await store.migrate(1), { from: 0, to: 1 });
    assert.equal(await store.schemaVersion(), 1);
    await store.ping();
    assert.deepEqual(await store.migrate(), { from: 1, to: SqliteStore.latestVersion });
    assert.deepEqual(await store.migrate(), { from: SqliteStore.latestVersion, to: SqliteStore.latestVersion });
    await assert.rejects(store.migrate(0), /cannot migrate from version/);
    await assert.rejects(store.migrate(SqliteStore.latestVersion + 1), /cannot migrate from version/);
  });

  it('refuses a database written by a pre-release build (longhaul_meta, no longhaul_migrations), naming the file and the remedy', async () => {
    const path = tempPath();
    const raw = new DatabaseSync(path);
    // What builds before the fold into 0001_baseline.sql left: their version in longhaul_meta.
    raw.exec("CREATE TABLE longhaul_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO longhaul_meta VALUES ('schema_version', '11')");
    raw.exec('CREATE TABLE jobs (id TEXT PRIMARY KEY)');
    raw.close();
    const store = await track(Promise.resolve(new SqliteStore({ path })));
    for (const attempt of [store.migrate(), store.schemaVersion()]) {
      await assert.rejects(attempt, (err: Error) => {
        assert.ok(err.message.includes(path), err.message);
        assert.match(err.message, /pre-release build of Longhaul/);
        assert.match(err.message, /cannot be upgraded: delete the file .* or point Longhaul at another file/);
        return true;
      });
    }
    const check = new DatabaseSync(path);
    const tables = check.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all().map((r) => r.name);
    check.close();
    assert.deepEqual(tables, ['jobs', 'longhaul_meta'], 'nothing was written');
  });

  it('refuses a database whose schema is newer than this code', async () => {
    const store = await track(openStore());
    store.db.prepare("INSERT INTO longhaul_migrations (version, name, applied_at) VALUES (?, 'from_the_future', 0)").run(SqliteStore.latestVersion + 1);
    await assert.rejects(store.migrate(), /newer than this Longhaul/);
  });

  it("works in ':memory:'", async () => {
    const store = await track(openStore(':memory:'));
    const job = newJob();
    assert.equal((await store.insertJob({ job })).kind, 'created');
    assert.equal((await store.getJob({ id: job.id }))?.state, 'queued');
  });

  it('data survives closing and reopening the file', async () => {
    const path = tempPath();
    const a = await openStore(path);
    const job = newJob({ input: { keep: true } });
    await a.insertJob({ job });
    await a.close();
    const b = await track(openStore(path));
    assert.deepEqual((await b.getJob({ id: job.id }))?.input, { keep: true });
  });
  it('close() with the checkpoint thread started keeps the process alive until it is done', () => {
    // A script whose last step is `await store.close()`: with the thread unref'd, Node used to
    // exit with code 13 (unsettled top-level await) before close() resolved.
    const script = `
      import { SqliteStore } from ${JSON.stringify(new URL('../../src/store/sqlite/sqlite-store.ts', import.meta.url).href)};
      import { newJob } from ${JSON.stringify(new URL('./store-contract/fixtures.ts', import.meta.url).href)};
      const store = new SqliteStore({ path: ${JSON.stringify(tempPath())} });
      await store.migrate();
      for (let i = 0; i < 5; i++) await store.insertJobs({ jobs: Array.from({ length: 1000 }, () => newJob()) });
      await store.close();
      console.log('closed');`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(out.trim(), 'closed');
  });
  it('looking for pending webhook events starts from the pending webhooks, never a walk of every finished job', async () => {
    const s = await track(openStore());
    const plan = (s.db.prepare(`EXPLAIN QUERY PLAN ${PENDING_WEBHOOKS_SQL}`).all(100) as { detail: string }[]).map((r) => r.detail);
    const outer = plan.find((d) => /^(SCAN|SEARCH) /.test(d));
    assert.match(outer ?? '', /^(SCAN|SEARCH) w\b/, plan.join(' | '));
  });
  it("a tenant's backlog is counted through the partial index jobs_tenant_backlog", async () => {
    const s = await track(openStore());
    const plan = (s.db.prepare(`EXPLAIN QUERY PLAN ${TENANT_BACKLOG_SQL}`).all('acme', 10) as { detail: string }[]).map((r) => r.detail).join(' | ');
    assert.match(plan, /USING (COVERING )?INDEX jobs_tenant_backlog/, plan);
  });
  it('dead-letter reads follow jobs_dead_letters: groups without sorting the jobs, a page seeks its cursor', async () => {
    const s = await track(openStore());
    const plan = (sql: string, args: SQLInputValue[]) =>
      (s.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as { detail: string }[]).map((r) => r.detail).join(' | ');
    const tenant = deadLetterWhere({ tenant: 'acme' });
    const groups = plan(deadLetterGroupsSql(tenant.where), [...tenant.args, 10]);
    assert.match(groups, /SEARCH j USING COVERING INDEX jobs_dead_letters \(tenant=\?\)/, groups);
    assert.doesNotMatch(groups, /FOR GROUP BY/, groups);
    const group = deadLetterWhere({ tenant: 'acme', type: 'report', code: 'E' });
    const page = plan(failedJobsSql([...group.where, '(j.finished_at, j.id) < (?, ?)'], 'desc', 'j.id'), [...group.args, 1, 'x', 10]);
    assert.match(page, /SEARCH j USING (COVERING )?INDEX jobs_dead_letters \(tenant=\? AND type=\? AND error_code=\? AND \(finished_at,id\)<\(\?,\?\)\)/, page);
    assert.doesNotMatch(page, /TEMP B-TREE/, page);
  });
  it('workflow reads are index probes: an open child of a parent, stranded parents, due waiting jobs', async () => {
    const s = await track(openStore());
    const plan = (sql: string, ...args: (string | number)[]) =>
      (s.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as { detail: string }[]).map((r) => r.detail).join(' | ');
    assert.match(plan(OPEN_CHILD_SQL, 'p'), /USING (COVERING )?INDEX jobs_open_children/);
    const stranded = plan(STRANDED_PARENTS_SQL, 10);
    assert.match(stranded, /USING (COVERING )?INDEX jobs_waiting_parents/, stranded);
    assert.match(stranded, /USING (COVERING )?INDEX jobs_open_children/, stranded);
    assert.match(stranded, /USING (COVERING )?INDEX jobs_failed_children/, stranded);
    assert.match(plan("SELECT id FROM jobs WHERE state IN ('pending', 'retrying', 'waiting') AND run_at <= ? ORDER BY run_at LIMIT 10", 0), /INDEX jobs_due/);
    // Fail-fast: the failed child and the open siblings of one parent (not a walk of every ended job by finished_at).
    assert.match(plan(FAILED_CHILD_SQL, 'p'), /USING INDEX jobs_failed_children/);
    assert.match(plan(OPEN_SIBLINGS_SQL, 'p'), /USING INDEX jobs_open_children/);
  });
});

describe('sqlite: the worker counts its own claims and ends', () => {
  const nonZero = (counts: Record<string, number>) => Object.fromEntries(Object.entries(counts).filter(([, n]) => n !== 0));

  it("claims and ends through the store are counted once, and another connection's writes through the triggers", async () => {
    const path = tempPath();
    const store = await openStore(path);
    try {
      const jobs = Array.from({ length: 20 }, (_, i) => newJob({ input: { i } }));
      await store.insertJobs({ jobs });
      const claimed = await store.claimJobs({ workerId: 'w', types: [{ type: 'report' }, { type: 'other' }], limit: 12, now: 1_000 });
      assert.equal(claimed.length, 12);
      const ends = claimed.slice(0, 5).map((j) => ({
        id: j.id,
        from: 'running' as const,
        to: 'succeeded' as const,
        lease: j.lease,
        workerId: 'w',
        at: 1_500,
        reason: 'done',
        patch: { result: null, finishedAt: 1_500, expiresAt: 100_000 },
      }));
      assert.deepEqual(await store.transition({ items: ends }), [true, true, true, true, true]);
      assert.deepEqual(nonZero(await store.countByState({})), { queued: 8, running: 7, succeeded: 5 });
      const activity = await store.activity({ since: 0, durationsSince: 0 });
      assert.equal(activity.finished, 5);
      assert.equal(activity.durations.reduce((n, d) => n + d.count, 0), 5);
      // The claim marked its rows and cleared finished_at: a running job's end is always a change of it.
      const raw = new DatabaseSync(path);
      try {
        const marks = raw.prepare("SELECT DISTINCT stats_seq, finished_at FROM jobs WHERE state = 'running'").all();
        assert.deepEqual(marks.map((r) => ({ ...r })), [{ stats_seq: 1, finished_at: null }]);
        // Another connection's write (no mark) is counted by the triggers.
        raw.prepare("UPDATE jobs SET state = 'cancelled', finished_at = 2000 WHERE id = ?").run(claimed[5]?.id as string);
      } finally {
        raw.close();
      }
      assert.deepEqual(nonZero(await store.countByState({})), { queued: 8, running: 6, succeeded: 5, cancelled: 1 });
      assert.equal((await store.activity({ since: 0, durationsSince: 0 })).finished, 6);
    } finally {
      await store.close();
    }
  });
});
