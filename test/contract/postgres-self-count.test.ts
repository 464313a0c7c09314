/**
 * PostgreSQL, the self-counted setting (migrations/0001_baseline.sql, "Wire formats"): the
 * worker's claim appends its own queued-to-running change to job_changes while the update
 * trigger skips it, and it looks up progress only for jobs claimed before. Each test checks the figures against the table itself.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { EMPTY_PROGRESS, type Progress } from '../../src/core/progress.js';
import { succeed } from '../../src/core/transitions.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { newJob, T0 } from './store-contract/fixtures.js';

/** The transaction-local setting on while a statement counts itself (the baseline's worker_cycle, end_succeeded). */
const SELF_COUNTED = 'longhaul.self_counted';

const db: TestDatabase = await createTestDatabase('lh_claimcount');
let schemas = 0;
const stores: PostgresStore[] = [];

after(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await db.drop();
});

async function openStore(): Promise<PostgresStore> {
  const store = new PostgresStore({ connectionString: db.url, schema: `c${++schemas}` });
  stores.push(store);
  await store.migrate();
  return store;
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Jobs per state as the table holds them. */
async function tableCounts(schema: string): Promise<Record<string, number>> {
  const rows = await admin(async (c) => (await c.query(`SELECT state, count(*)::integer AS n FROM "${schema}".jobs GROUP BY state`)).rows);
  return Object.fromEntries((rows as { state: string; n: number }[]).map((r) => [r.state, r.n]));
}

const nonZero = (counts: Record<string, number>) => Object.fromEntries(Object.entries(counts).filter(([, n]) => n !== 0));

/** The change rows that are not submissions: (tenant, old state, new state, n). */
async function claimRows(schema: string): Promise<{ tenant: string; old_state: string | null; new_state: string | null; n: number }[]> {
  return admin(
    async (c) =>
      (
        await c.query(
          `SELECT tenant, old_state, new_state, sum(n)::integer AS n FROM "${schema}".job_changes WHERE submitted_at IS NULL
           GROUP BY 1, 2, 3 ORDER BY 1, 2 NULLS LAST, 3 NULLS LAST`,
        )
      ).rows,
  );
}

/** Queued jobs of `type`, as many per tenant as `counts` says. */
async function insertPerTenant(store: PostgresStore, type: string, counts: Record<string, number>): Promise<void> {
  await store.insertJobs({ jobs: Object.entries(counts).flatMap(([tenant, n]) => Array.from({ length: n }, () => newJob({ tenant, type }))) });
}

describe('postgres: the claim and end_succeeded count their own changes', () => {
  it('a claim across tenants (the candidates path) writes one row per tenant, and the counts stay exact', async () => {
    const store = await openStore();
    await insertPerTenant(store, 'fair', { a: 20, b: 20 });
    const claimed = await store.claimJobs({ workerId: 'w', types: [{ type: 'fair' }], limit: 30, now: T0 });
    assert.equal(claimed.length, 30);
    const perTenant = (t: string) => claimed.filter((j) => j.tenant === t).length;
    assert.ok(perTenant('a') > 0 && perTenant('b') > 0, 'both tenants claimed: the candidates path, not the one-queue path');
    assert.deepEqual(await claimRows(store.schema), [
      { tenant: 'a', old_state: 'queued', new_state: 'running', n: perTenant('a') },
      { tenant: 'b', old_state: 'queued', new_state: 'running', n: perTenant('b') },
    ]);
    assert.deepEqual(nonZero(await store.countByState({})), { queued: 10, running: 30 });
    await store.compactStats({ before: 0 });
    assert.deepEqual(nonZero(await store.countByState({})), await tableCounts(store.schema));
  });

  it('the setting is off again once the claim statement ran: a later update of the same transaction is counted by the trigger', async () => {
    const store = await openStore();
    const s = store.schema;
    await store.insertJobs({ jobs: Array.from({ length: 10 }, () => newJob({ type: 'tx' })) });
    await admin(async (c) => {
      await c.query('BEGIN');
      const { rows } = await c.query(
        `SELECT id FROM "${s}".worker_cycle('{}', '{}', '{}', '{}', '{}', '{}', '[]', 0, 'w', ARRAY['tx'], ARRAY[NULL]::integer[], 4, $1,
           ARRAY[NULL]::integer[], ARRAY[NULL]::integer[], ARRAY[NULL]::bigint[], 10000, NULL, NULL, NULL) WHERE id IS NOT NULL`,
        [T0],
      );
      assert.equal(rows.length, 4);
      assert.equal((await c.query(`SELECT current_setting('${SELF_COUNTED}', true) AS v`)).rows[0].v, 'off');
      // Two of the four back to queued in the same transaction (as a release would): the trigger counts them.
      await c.query(`UPDATE "${s}".jobs SET state = 'queued' WHERE id IN (SELECT id FROM "${s}".jobs WHERE state = 'running' ORDER BY id LIMIT 2)`);
      await c.query('COMMIT');
    });
    assert.deepEqual(nonZero(await store.countByState({})), { queued: 8, running: 2 });
    assert.deepEqual(nonZero(await store.countByState({})), await tableCounts(s));
    assert.deepEqual(await claimRows(s), [
      { tenant: 'acme', old_state: 'queued', new_state: 'running', n: 4 },
      { tenant: 'acme', old_state: 'running', new_state: null, n: 2 },
      { tenant: 'acme', old_state: null, new_state: 'queued', n: 2 },
    ]);
  });

  it('jobs deleted on their end (retention 0) write one change row per tenant, and the counts stay exact', async () => {
    const store = await openStore();
    await insertPerTenant(store, 'gone', { a: 4, b: 2 });
    const claimed = await store.claimJobs({ workerId: 'w', types: [{ type: 'gone' }], limit: 6, now: T0 });
    assert.equal(claimed.length, 6);
    const res = await store.completeAndClaim({
      complete: claimed.map((j) => ({ ...succeed(j, 'w', T0 + 5, { ok: true }, 60_000), deleteOnEnd: true })),
      claim: { workerId: 'w', types: [], limit: 0, now: T0 + 5 },
    });
    assert.deepEqual(
      res.deleted,
      claimed.map(() => true),
    );
    assert.deepEqual(
      (await claimRows(store.schema)).filter((r) => r.old_state === 'running'),
      [
        { tenant: 'a', old_state: 'running', new_state: null, n: 4 },
        { tenant: 'b', old_state: 'running', new_state: null, n: 2 },
      ],
    );
    assert.deepEqual(await tableCounts(store.schema), {});
    assert.deepEqual(nonZero(await store.countByState({})), {});
    await admin(async (c) => {
      await c.query('BEGIN');
      await c.query(`SELECT "${store.schema}".end_succeeded(ARRAY[gen_random_uuid()], '{1}', '{1}', '{1}', '{1}', '{null}', 'w')`);
      assert.equal((await c.query(`SELECT current_setting('${SELF_COUNTED}', true) AS v`)).rows[0].v, 'off');
      await c.query('ROLLBACK');
    });
  });

  it('a job claimed again reads the progress of its earlier attempt; a job never claimed reads none', async () => {
    const store = await openStore();
    const first = newJob({ type: 'again' });
    await store.insertJobs({ jobs: [first] });
    const [a] = await store.claimJobs({ workerId: 'w', types: [{ type: 'again' }], limit: 1, now: T0 });
    assert.ok(a);
    assert.deepEqual(a.progress, EMPTY_PROGRESS);
    // Saved at a time after the next claim's: the claimed row's updated_at still follows it.
    const saved: Progress = { ...EMPTY_PROGRESS, percent: 40, stage: 'half', updatedAt: new Date(T0 + 500).toISOString() };
    assert.equal(await store.saveProgress({ id: a.id, lease: a.lease, progress: saved, now: T0 + 500 }), true);
    // Back to queued (as a release would leave it), beside a job never claimed.
    await admin((c) => c.query(`UPDATE "${store.schema}".jobs SET state = 'queued' WHERE id = $1`, [a.id]));
    const fresh = newJob({ type: 'again', runAt: T0 + 1 });
    await store.insertJobs({ jobs: [fresh] });
    const again = await store.claimJobs({ workerId: 'w', types: [{ type: 'again' }], limit: 2, now: T0 + 60 });
    const byId = new Map(again.map((j) => [j.id, j]));
    assert.equal(byId.get(a.id)?.lease, 2);
    assert.deepEqual(byId.get(a.id)?.progress, saved);
    assert.equal(byId.get(a.id)?.updatedAt, T0 + 501);
    assert.equal(byId.get(fresh.id)?.lease, 1);
    assert.deepEqual(byId.get(fresh.id)?.progress, EMPTY_PROGRESS);
  });
});
