/**
 * PostgreSQL's fail-fast wake-up (src/store/postgres/workflow-ops.ts; the contract is in
 * store-contract/fail-fast.ts): what it costs in statements. Waking a fail-fast parent of 1,000
 * children stops them all with a fixed number of statements (read and lock the siblings, one
 * apply_transitions), none per child; a child's success (the common path) sends what it sent
 * before fail-fast stopped siblings; and the siblings are found through the partial indexes of
 * failed and open children, not by reading every child.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type pg from 'pg';
import { uuidv7 } from '../../src/core/ids.js';
import { succeed, suspend } from '../../src/core/transitions.js';
import { emptyWorkflow, NEVER } from '../../src/core/workflow.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { NewJob } from '../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { newJob, T0 } from './store-contract/fixtures.js';

const db: TestDatabase = await createTestDatabase('lh_failfast');
const stores: PostgresStore[] = [];
after(async () => {
  for (const s of stores) await s.close();
  await db.drop();
});

async function openStore(): Promise<PostgresStore> {
  const store = new PostgresStore({ connectionString: db.url, schema: `ff${stores.length}` });
  stores.push(store);
  await store.migrate();
  return store;
}

/** Records the statements sent on connections checked out of the store's pool while `fn` runs. */
async function statementsOf<T>(store: PostgresStore, fn: () => Promise<T>): Promise<{ out: T; sent: { text: string; values: unknown[] }[] }> {
  const sent: { text: string; values: unknown[] }[] = [];
  const pool = store.pool;
  const connect = pool.connect;
  const checkOut = connect.bind(pool) as () => Promise<pg.PoolClient>;
  pool.connect = (async () => {
    const client = await checkOut();
    const query = client.query;
    const release = client.release;
    client.query = ((config: string | pg.QueryConfig, values?: unknown[]) => {
      sent.push(typeof config === 'string' ? { text: config, values: values ?? [] } : { text: config.text, values: config.values ?? values ?? [] });
      return (query as (...a: unknown[]) => unknown).call(client, config, values);
    }) as typeof client.query;
    client.release = ((err?: Error | boolean) => {
      client.query = query;
      client.release = release;
      return release.call(client, err);
    }) as typeof client.release;
    return client;
  }) as typeof pool.connect;
  try {
    return { out: await fn(), sent };
  } finally {
    pool.connect = connect;
  }
}

/** A fail-fast parent waiting on `n` children of one type plus `first` (of its own type), all queued. */
async function parentOf(store: PostgresStore, n: number, failFast = true): Promise<{ parentId: string; first: NewJob; rest: NewJob[] }> {
  const type = `p-${uuidv7().slice(-8)}`;
  await store.insertJob({ job: newJob({ type }) });
  const [p] = await store.claimJobs({ workerId: 'w1', types: [{ type }], limit: 1, now: T0 });
  assert.ok(p);
  const first = newJob({ type: `f-${uuidv7().slice(-8)}`, parentId: p.id });
  const rest = Array.from({ length: n }, () => newJob({ type: 'sibling', parentId: p.id }));
  const r = await store.suspend({ write: suspend(p, 'w1', T0 + 1, NEVER, 'waiting'), wait: { kind: 'children', failFast }, workflow: emptyWorkflow(), children: [first, ...rest] });
  assert.deepEqual(r, { kind: 'suspended' });
  return { parentId: p.id, first, rest };
}

async function endFirst(store: PostgresStore, first: NewJob, ok: boolean): Promise<void> {
  const [c] = await store.claimJobs({ workerId: 'w1', types: [{ type: first.type }], limit: 1, now: T0 + 2 });
  assert.ok(c);
  const write = ok
    ? succeed(c, 'w1', T0 + 3, 'ok', 60_000)
    : { id: c.id, from: 'running' as const, to: 'failed' as const, lease: c.lease, reason: 'boom', at: T0 + 3, patch: { finishedAt: T0 + 3 } };
  assert.deepEqual(await store.transition({ items: [write] }), [true]);
}

describe(`postgres (${db.source}): a fail-fast wake-up's statements`, () => {
  it('1,000 siblings are stopped by one read and one apply_transitions, in the transaction that wakes the parent', async () => {
    const store = await openStore();
    const { parentId, first } = await parentOf(store, 1000);
    await endFirst(store, first, false);
    const { out, sent } = await statementsOf(store, () => store.resumeParents({ parents: [{ id: parentId, childFailed: true }], at: T0 + 10 }));
    assert.equal(out[0]?.stopped?.length, 1000);
    assert.deepEqual(
      sent.map((s) => s.text.trim().split(/\s+/).slice(0, 2).join(' ')),
      ['BEGIN ISOLATION', 'SELECT p.id::text,', 'WITH failed', `SELECT "${store.schema}".apply_transitions($1::json,`, 'COMMIT'],
      'one transaction: lock the parent, read and lock its open children, write them all and the parent',
    );
    assert.deepEqual(await store.countChildren({ id: parentId }), { ...(await store.countChildren({ id: uuidv7() })), failed: 1, cancelled: 1000 });

    // The siblings are read through the partial indexes (a tiny table is read sequentially
    // whatever the indexes: ask what the plan is when it is not).
    const lock = sent[2] as { text: string; values: unknown[] };
    const client = await store.pool.connect();
    try {
      await client.query('SET enable_seqscan = off');
      const plan = ((await client.query({ text: `EXPLAIN (COSTS OFF) ${lock.text}`, values: lock.values })).rows as Record<string, string>[])
        .map((r) => r['QUERY PLAN'])
        .join('\n');
      assert.match(plan, /jobs_failed_children/, plan);
      assert.match(plan, /jobs_open_children/, plan);
    } finally {
      client.release();
    }
  });

  it("a child's success wakes nothing early and sends what it sent before: no sibling is read", async () => {
    const store = await openStore();
    const { parentId, first, rest } = await parentOf(store, 3);
    await endFirst(store, first, true);
    const open = await statementsOf(store, () => store.resumeParents({ parents: [{ id: parentId, childFailed: false }], at: T0 + 10 }));
    assert.deepEqual(open.out, []);
    assert.equal(open.sent.length, 3, open.sent.map((s) => s.text).join('\n---\n'));
    for (const c of rest) {
      const [claimed] = await store.claimJobs({ workerId: 'w1', types: [{ type: 'sibling' }], limit: 1, now: T0 + 4 });
      assert.ok(claimed);
      assert.deepEqual(await store.transition({ items: [succeed(claimed, 'w1', T0 + 5, c.id, 60_000)] }), [true]);
    }
    const done = await statementsOf(store, () => store.resumeParents({ parents: [{ id: parentId, childFailed: false }], at: T0 + 11 }));
    assert.deepEqual(
      done.out.map((r) => r.reason),
      ['children done'],
    );
    assert.equal(done.sent.length, 4, 'BEGIN, lock, apply_transitions, COMMIT');
  });
});
