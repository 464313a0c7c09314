/**
 * The job queue part of the storage contract (JobQueueStore in src/store/store.ts), plus the
 * schema and readiness calls every store has, as one suite parameterised only by a factory.
 * Every store's test file runs it with the other parts' suites:
 *
 *   runJobQueueContract('sqlite', async () => { const s = new SqliteStore(...); await s.migrate(); return s; });
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 * All times are explicit (`now`, `at`), so nothing here sleeps.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { uuidv7 } from '../../../src/core/ids.js';
import type { JobRecord, TransitionEntry } from '../../../src/core/job.js';
import { EMPTY_PROGRESS, type Progress } from '../../../src/core/progress.js';
import { JOB_STATES, type JobState } from '../../../src/core/states.js';
import { durationBucket } from '../../../src/core/stats-window.js';
import type { Store, TransitionParams } from '../../../src/store/store.js';
import { assertLogReplays, contractHelpers, newJob, T0 } from './fixtures.js';

export function runJobQueueContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (job queue): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, get, log, claimParams, claimOne, running, apply } = contractHelpers(() => store);

    const progress = (percent: number, at: number): Progress => ({ ...EMPTY_PROGRESS, percent, updatedAt: new Date(at).toISOString() });

    // ---- readiness ----

    describe('ping', () => {
      it('resolves on a migrated store, with or without jobs (the /readyz probe)', async () => {
        await store.ping();
        await insert();
        await store.ping();
      });
    });

    // ---- insert / get ----

    describe('insert and get', () => {
      it('keys written as one escape sequence read back as written, after a backslash key was read at the same place', async () => {
        // Node 24/26's JSON.parse misreads such a key as "\\" once it has parsed an object with
        // the same earlier keys and a "\\" key there (src/core/json-text.ts). Every read below
        // comes after one of those.
        const keys = ['\\', '"', '\n', '\u0001', '\u001f', '/', '\b'];
        const ids: string[] = [];
        for (const k of keys) {
          const nj = newJob({ input: { h: [], [k]: k }, metadata: { owner: 'ann', [k]: { h: 1, [k]: true } } });
          ids.push(nj.id);
          await store.insertJob({ job: nj });
        }
        for (let round = 0; round < 2; round++) {
          for (const [i, k] of keys.entries()) {
            const got = await get(ids[i] as string);
            assert.deepEqual(Object.keys(got.input as object), ['h', k]);
            assert.deepEqual(got.metadata, { owner: 'ann', [k]: { h: 1, [k]: true } });
          }
        }
        const page = await store.listJobs({ limit: 100 });
        for (const job of page.items) {
          const k = Object.keys(job.input as object)[1] as string;
          assert.equal((job.input as Record<string, unknown>)[k], k, 'each key holds its own text');
        }
      });

      it('creates a job whose record reads back identically', async () => {
        const nj = newJob({ input: { file: 'a.csv', rows: [1, 2] }, metadata: { owner: 'ann' }, priority: 'high', maxAttempts: 5, timeoutMs: 9_000 });
        const r = await store.insertJob({ job: nj });
        assert.equal(r.kind, 'created');
        const created = (r as { job: JobRecord }).job;
        const got = await get(nj.id);
        assert.deepEqual(created, got);
        assert.equal(got.id, nj.id);
        assert.equal(got.tenant, 'acme');
        assert.equal(got.state, 'queued');
        assert.equal(got.priority, 'high');
        assert.deepEqual(got.input, { file: 'a.csv', rows: [1, 2] });
        assert.deepEqual(got.metadata, { owner: 'ann' });
        assert.equal(got.attempts, 0);
        assert.equal(got.maxAttempts, 5);
        assert.equal(got.lease, 0);
        assert.equal(got.workerId, null);
        assert.equal(got.cancelRequested, false);
        assert.equal(got.stalled, false);
        assert.equal(got.result, null);
        assert.equal(got.error, null);
        assert.equal(got.checkpoint, null);
        assert.equal(got.timeoutMs, 9_000);
        assert.equal(got.startedAt, null);
        assert.equal(got.createdAt, T0);
        assert.deepEqual(got.progress, EMPTY_PROGRESS);
      });

      it('a pending job keeps its future runAt', async () => {
        const j = await insert({ state: 'pending', runAt: T0 + 60_000 });
        const got = await get(j.id);
        assert.equal(got.state, 'pending');
        assert.equal(got.runAt, T0 + 60_000);
      });

      it('is scoped by tenant: another tenant sees nothing', async () => {
        const j = await insert({ tenant: 'acme' });
        assert.equal((await store.getJob({ id: j.id, tenant: 'acme' }))?.id, j.id);
        assert.equal(await store.getJob({ id: j.id, tenant: 'globex' }), null);
        assert.equal(await store.getTransitions({ id: j.id, tenant: 'globex' }), null);
        assert.ok(await store.getTransitions({ id: j.id, tenant: 'acme' }));
      });

      it('an unknown id is null', async () => {
        assert.equal(await store.getJob({ id: uuidv7() }), null);
        assert.equal(await store.getTransitions({ id: uuidv7() }), null);
      });

      it('the log starts with one submitted entry', async () => {
        const j = await insert({ state: 'pending', runAt: T0 + 1 });
        assert.deepEqual(await log(j.id), [{ from: null, to: 'pending', at: T0, reason: 'submitted', attempt: 0, workerId: null }]);
      });
    });

    describe('idempotency', () => {
      it('same key and same request hash returns the existing job', async () => {
        const first = await store.insertJob({ job: newJob({ idempotencyKey: 'k1', requestHash: 'h1' }) });
        assert.equal(first.kind, 'created');
        const again = await store.insertJob({ job: newJob({ idempotencyKey: 'k1', requestHash: 'h1', input: { other: true } }) });
        assert.equal(again.kind, 'existing');
        assert.equal((again as { job: JobRecord }).job.id, (first as { job: JobRecord }).job.id);
        assert.deepEqual((again as { job: JobRecord }).job.input, { n: 1 });
        assert.equal((await store.listJobs({ limit: 10 })).items.length, 1);
      });

      it('same key with a different hash is a conflict and inserts nothing', async () => {
        const first = await store.insertJob({ job: newJob({ idempotencyKey: 'k1', requestHash: 'h1' }) });
        const other = await store.insertJob({ job: newJob({ idempotencyKey: 'k1', requestHash: 'h2' }) });
        assert.equal(other.kind, 'conflict');
        assert.equal((other as { job: JobRecord }).job.id, (first as { job: JobRecord }).job.id);
        assert.equal((await store.listJobs({ limit: 10 })).items.length, 1);
      });

      it('keys are scoped per tenant', async () => {
        const a = await store.insertJob({ job: newJob({ tenant: 'acme', idempotencyKey: 'k1', requestHash: 'h1' }) });
        const b = await store.insertJob({ job: newJob({ tenant: 'globex', idempotencyKey: 'k1', requestHash: 'h1' }) });
        assert.equal(a.kind, 'created');
        assert.equal(b.kind, 'created');
        assert.notEqual((a as { job: JobRecord }).job.id, (b as { job: JobRecord }).job.id);
      });

      it('jobs without a key never collide', async () => {
        await insert();
        await insert();
        assert.equal((await store.listJobs({ limit: 10 })).items.length, 2);
      });

      it('a repeated key inside one bulk insert answers existing/conflict', async () => {
        const results = await store.insertJobs({
          jobs: [
            newJob({ idempotencyKey: 'k', requestHash: 'h' }),
            newJob({ idempotencyKey: 'k', requestHash: 'h' }),
            newJob({ idempotencyKey: 'k', requestHash: 'x' }),
          ],
        });
        assert.deepEqual(
          results.map((r) => r.kind),
          ['created', 'existing', 'conflict'],
        );
        assert.equal((await store.listJobs({ limit: 10 })).items.length, 1);
      });
    });

    describe('backlog limit', () => {
      it('refuses with kind full once pending+queued+retrying reach maxBacklog', async () => {
        await insert();
        await insert({ state: 'pending', runAt: T0 + 10_000 });
        const full = await store.insertJob({ job: newJob(), maxBacklog: 2 });
        assert.deepEqual(full, { kind: 'full', backlog: 2 });
        assert.equal((await store.listJobs({ limit: 10 })).items.length, 2);
        assert.equal((await store.insertJob({ job: newJob(), maxBacklog: 3 })).kind, 'created');
      });

      it('running and finished jobs do not count', async () => {
        const r = await running();
        const done = await running();
        assert.ok(await apply({ id: done.id, from: 'running', to: 'succeeded', lease: done.lease, reason: 'done', at: T0 }));
        assert.equal(r.state, 'running');
        assert.equal((await store.insertJob({ job: newJob(), maxBacklog: 1 })).kind, 'created');
        assert.equal((await store.insertJob({ job: newJob(), maxBacklog: 1 })).kind, 'full');
      });

      it('maxBacklog 0 refuses everything', async () => {
        assert.equal((await store.insertJob({ job: newJob(), maxBacklog: 0 })).kind, 'full');
      });

      it('an idempotent replay is answered even when the queue is full', async () => {
        await store.insertJob({ job: newJob({ idempotencyKey: 'k', requestHash: 'h' }) });
        assert.equal((await store.insertJob({ job: newJob({ idempotencyKey: 'k', requestHash: 'h' }), maxBacklog: 1 })).kind, 'existing');
      });

      it('applies within a bulk insert, job by job', async () => {
        const results = await store.insertJobs({ jobs: [newJob(), newJob(), newJob()], maxBacklog: 2 });
        assert.deepEqual(
          results.map((r) => r.kind),
          ['created', 'created', 'full'],
        );
      });
    });

    describe('insertJobs', () => {
      it('inserts many jobs at once, in order', async () => {
        const jobs = Array.from({ length: 50 }, (_, i) => newJob({ input: { i } }));
        const results = await store.insertJobs({ jobs });
        assert.equal(results.length, 50);
        results.forEach((r, i) => {
          assert.equal(r.kind, 'created');
          assert.equal((r as { job: JobRecord }).job.id, jobs[i]?.id);
        });
        const counts = await store.countByState({});
        assert.equal(counts.queued, 50);
        assert.deepEqual((await get(jobs[17]?.id as string)).input, { i: 17 });
      });

      it('an empty batch is fine', async () => {
        assert.deepEqual(await store.insertJobs({ jobs: [] }), []);
      });
    });

    // ---- listing ----

    describe('listJobs', () => {
      it('filters by tenant, states and type, newest first', async () => {
        const a1 = await insert({ tenant: 'acme', type: 'report' });
        const a2 = await insert({ tenant: 'acme', type: 'export', state: 'pending', runAt: T0 + 1_000 });
        const g1 = await insert({ tenant: 'globex', type: 'report' });
        const a3 = await insert({ tenant: 'acme', type: 'report' });
        const ids = async (p: Parameters<Store['listJobs']>[0]) => (await store.listJobs(p)).items.map((j) => j.id);
        assert.deepEqual(await ids({ limit: 10 }), [a3.id, g1.id, a2.id, a1.id]);
        assert.deepEqual(await ids({ limit: 10, tenant: 'acme' }), [a3.id, a2.id, a1.id]);
        assert.deepEqual(await ids({ limit: 10, tenant: 'globex' }), [g1.id]);
        assert.deepEqual(await ids({ limit: 10, tenant: 'nobody' }), []);
        assert.deepEqual(await ids({ limit: 10, states: ['pending'] }), [a2.id]);
        assert.deepEqual(await ids({ limit: 10, states: ['pending', 'queued'], tenant: 'acme' }), [a3.id, a2.id, a1.id]);
        assert.deepEqual(await ids({ limit: 10, states: ['running'] }), []);
        assert.deepEqual(await ids({ limit: 10, type: 'report' }), [a3.id, g1.id, a1.id]);
        assert.deepEqual(await ids({ limit: 10, type: 'report', tenant: 'acme', states: ['queued'] }), [a3.id, a1.id]);
        assert.deepEqual(await ids({ limit: 10, states: [] }), [a3.id, g1.id, a2.id, a1.id]); // empty = no filter
      });

      it("lists a tenant's running jobs among its others, newest first, page by page and by state", async () => {
        // Interleaved: running, queued, pending, running... (PostgreSQL reads a tenant's running
        // jobs apart from its others; the listing must merge them in id order.)
        const made: JobRecord[] = [];
        for (let i = 0; i < 9; i++) {
          if (i % 3 === 0) made.push(await running({ tenant: 'acme' }));
          else made.push(await insert({ tenant: 'acme', type: 'report', ...(i % 3 === 2 ? { state: 'pending' as const, runAt: T0 + 60_000 } : {}) }));
        }
        const other = await running({ tenant: 'globex' });
        const newest = made.map((j) => j.id).reverse();
        const ids = async (p: Parameters<Store['listJobs']>[0]) => (await store.listJobs(p)).items.map((j) => j.id);
        assert.deepEqual(await ids({ limit: 20, tenant: 'acme' }), newest);
        const seen: string[] = [];
        let cursor: string | null = null;
        do {
          const page = await store.listJobs({ limit: 2, tenant: 'acme', cursor });
          seen.push(...page.items.map((j) => j.id));
          cursor = page.nextCursor;
        } while (cursor);
        assert.deepEqual(seen, newest);
        const byState = (states: JobState[]) => made.filter((j) => states.includes(j.state)).map((j) => j.id).reverse();
        assert.deepEqual(await ids({ limit: 20, tenant: 'acme', states: ['running'] }), byState(['running']));
        assert.deepEqual(await ids({ limit: 20, tenant: 'acme', states: ['running', 'queued'] }), byState(['running', 'queued']));
        assert.deepEqual(await ids({ limit: 20, tenant: 'acme', states: ['pending', 'queued'] }), byState(['pending', 'queued']));
        assert.deepEqual(await ids({ limit: 2, tenant: 'acme', states: ['running'] }), byState(['running']).slice(0, 2));
        assert.deepEqual(await ids({ limit: 20, tenant: 'globex' }), [other.id]);
        assert.deepEqual(await ids({ limit: 20, tenant: 'globex', states: ['queued'] }), []);
        assert.deepEqual((await ids({ limit: 20 })).length, 10);
      });

      it('filters by text in the id or the metadata, letters without case, as written (no wildcards), with the other filters and the cursor', async () => {
        const a = await insert({ tenant: 'acme', type: 'report', metadata: { customer: 'Northwind Traders', order: 1042 } });
        const b = await insert({ tenant: 'acme', type: 'export', metadata: { customer: 'northwind', note: '100% done_now' } });
        const c = await insert({ tenant: 'globex', type: 'report', metadata: { customer: 'Northwind' } });
        const d = await insert({ tenant: 'acme', type: 'report', metadata: null });
        const ids = async (p: Parameters<Store['listJobs']>[0]) => (await store.listJobs(p)).items.map((j) => j.id);
        assert.deepEqual(await ids({ limit: 10, text: 'NORTHWIND' }), [c.id, b.id, a.id]);
        assert.deepEqual(await ids({ limit: 10, text: 'northwind', tenant: 'acme' }), [b.id, a.id]);
        assert.deepEqual(await ids({ limit: 10, text: 'northwind', tenant: 'acme', type: 'report' }), [a.id]);
        assert.deepEqual(await ids({ limit: 10, text: '1042' }), [a.id]);
        // Keys are text of the metadata too.
        assert.deepEqual(await ids({ limit: 10, text: 'note' }), [b.id]);
        // % and _ are themselves, not wildcards.
        assert.deepEqual(await ids({ limit: 10, text: '100% done_' }), [b.id]);
        assert.deepEqual(await ids({ limit: 10, text: 'n_rthwind' }), []);
        assert.deepEqual(await ids({ limit: 10, text: '%' }), [b.id]);
        // The id, in part or whole, in either case.
        assert.deepEqual(await ids({ limit: 10, text: d.id }), [d.id]);
        assert.deepEqual(await ids({ limit: 10, text: d.id.slice(-12).toUpperCase() }), [d.id]);
        assert.deepEqual(await ids({ limit: 10, text: 'no such text' }), []);
        // The cursor walks the matching jobs.
        const first = await store.listJobs({ limit: 2, text: 'northwind' });
        assert.deepEqual(
          first.items.map((j) => j.id),
          [c.id, b.id],
        );
        assert.ok(first.nextCursor);
        const second = await store.listJobs({ limit: 2, text: 'northwind', cursor: first.nextCursor });
        assert.deepEqual(
          second.items.map((j) => j.id),
          [a.id],
        );
        assert.equal(second.nextCursor, null);
      });

      it('paginates with a cursor: no duplicates, no gaps, null at the end', async () => {
        const all: string[] = [];
        for (let i = 0; i < 25; i++) all.push((await insert({ type: i % 2 === 0 ? 'even' : 'odd' })).id);
        const expected = [...all].reverse();
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const page = await store.listJobs({ limit: 10, cursor });
          seen.push(...page.items.map((j) => j.id));
          cursor = page.nextCursor;
          pages++;
          assert.ok(pages <= 3, 'too many pages');
        } while (cursor);
        assert.equal(pages, 3);
        assert.deepEqual(seen, expected);

        // With a filter, the cursor walks the filtered set.
        const odd: string[] = [];
        cursor = null;
        do {
          const page = await store.listJobs({ limit: 5, type: 'odd', cursor });
          assert.ok(page.items.every((j) => j.type === 'odd'));
          odd.push(...page.items.map((j) => j.id));
          cursor = page.nextCursor;
        } while (cursor);
        assert.deepEqual(
          odd,
          expected.filter((_, i) => (24 - i) % 2 === 1),
        );
      });

      it('a page that exactly exhausts the set has no next cursor', async () => {
        for (let i = 0; i < 4; i++) await insert();
        const page = await store.listJobs({ limit: 4 });
        assert.equal(page.items.length, 4);
        assert.equal(page.nextCursor, null);
        const first = await store.listJobs({ limit: 2 });
        assert.ok(first.nextCursor);
        const second = await store.listJobs({ limit: 2, cursor: first.nextCursor });
        assert.equal(second.items.length, 2);
        assert.equal(second.nextCursor, null);
      });

      it('a job inserted between pages does not shift the next page', async () => {
        const ids: string[] = [];
        for (let i = 0; i < 6; i++) ids.push((await insert()).id);
        const p1 = await store.listJobs({ limit: 3 });
        await insert(); // newer than everything: belongs before page 1
        const p2 = await store.listJobs({ limit: 3, cursor: p1.nextCursor });
        assert.deepEqual(
          [...p1.items, ...p2.items].map((j) => j.id),
          [...ids].reverse(),
        );
      });

      it('an invalid cursor throws', async () => {
        await insert();
        await assert.rejects(store.listJobs({ limit: 10, cursor: '!!not a cursor!!' }));
        await assert.rejects(store.listJobs({ limit: 10, cursor: 'AAAA' }));
      });
    });

    // ---- claims ----

    describe('claimJobs', () => {
      it('claims by priority, then runAt', async () => {
        const low = await insert({ priority: 'low', runAt: T0 - 5_000 });
        const crit2 = await insert({ priority: 'critical', runAt: T0 - 1_000 });
        const normal = await insert({ priority: 'normal', runAt: T0 - 9_000 });
        const crit1 = await insert({ priority: 'critical', runAt: T0 - 2_000 });
        const high = await insert({ priority: 'high', runAt: T0 });
        const order: string[] = [];
        for (let i = 0; i < 5; i++) order.push((await claimOne()).id);
        assert.deepEqual(order, [crit1.id, crit2.id, high.id, normal.id, low.id]);
        assert.deepEqual(await store.claimJobs(claimParams()), []);
      });

      it('orders across several types the same way', async () => {
        const a = await insert({ type: 'a', priority: 'low' });
        const b = await insert({ type: 'b', priority: 'critical' });
        const c = await insert({ type: 'a', priority: 'high' });
        const types = [{ type: 'a' }, { type: 'b' }];
        assert.deepEqual([(await claimOne({ types })).id, (await claimOne({ types })).id, (await claimOne({ types })).id], [b.id, c.id, a.id]);
      });

      it('claims at most limit jobs; limit 0 claims nothing', async () => {
        for (let i = 0; i < 5; i++) await insert();
        assert.deepEqual(await store.claimJobs(claimParams({ limit: 0 })), []);
        const got = await store.claimJobs(claimParams({ limit: 2 }));
        assert.equal(got.length, 2);
        assert.equal(new Set(got.map((j) => j.id)).size, 2);
        const counts = await store.countByState({});
        assert.equal(counts.running, 2);
        assert.equal(counts.queued, 3);
      });

      it('claims only the listed types', async () => {
        const other = await insert({ type: 'other' });
        await insert({ type: 'report' });
        const got = await store.claimJobs(claimParams({ types: [{ type: 'report' }] }));
        assert.deepEqual(
          got.map((j) => j.type),
          ['report'],
        );
        assert.equal((await get(other.id)).state, 'queued');
        assert.deepEqual(await store.claimJobs(claimParams({ types: [] })), []);
        assert.deepEqual(await store.claimJobs(claimParams({ types: [{ type: 'nothing-here' }] })), []);
      });

      it('sets state, lease, attempts, worker and times, and returns what getJob reads', async () => {
        const j = await insert();
        const c = await claimOne({ workerId: 'worker-7', now: T0 + 500 });
        assert.equal(c.id, j.id);
        assert.equal(c.state, 'running');
        assert.equal(c.lease, 1);
        assert.equal(c.attempts, 1);
        assert.equal(c.workerId, 'worker-7');
        assert.equal(c.startedAt, T0 + 500);
        assert.equal(c.heartbeatAt, T0 + 500);
        assert.deepEqual(await get(j.id), c);
        const entries = await log(j.id);
        assert.deepEqual(entries[entries.length - 1], { from: 'queued', to: 'running', at: T0 + 500, reason: 'claimed', attempt: 1, workerId: 'worker-7' });
      });

      it('each claim increments lease and attempts', async () => {
        const j = await running({ type: 'again' });
        assert.ok(
          await apply({
            id: j.id,
            from: 'running',
            to: 'retrying',
            lease: 1,
            reason: 'retry scheduled',
            at: T0 + 1,
            workerId: 'w1',
            patch: { runAt: T0 + 1 },
          }),
        );
        const again = await claimOne({ types: [{ type: 'again' }], workerId: 'w2', now: T0 + 2 });
        assert.equal(again.lease, 2);
        assert.equal(again.attempts, 2);
        assert.equal(again.workerId, 'w2');
        assert.equal(again.startedAt, T0 + 2);
      });

      it('promotes due pending and retrying jobs, not future ones', async () => {
        const duePending = await insert({ state: 'pending', runAt: T0 + 1_000 });
        const futurePending = await insert({ state: 'pending', runAt: T0 + 1_001 });
        const r = await running({ type: 'report' });
        assert.ok(await apply({ id: r.id, from: 'running', to: 'retrying', lease: r.lease, reason: 'retry', at: T0, patch: { runAt: T0 + 500 } }));
        const futureRetry = await running({ type: 'report' });
        assert.ok(
          await apply({ id: futureRetry.id, from: 'running', to: 'retrying', lease: futureRetry.lease, reason: 'retry', at: T0, patch: { runAt: T0 + 5_000 } }),
        );

        assert.deepEqual(await store.claimJobs(claimParams({ now: T0 + 499 })), []);
        const got = await store.claimJobs(claimParams({ now: T0 + 1_000 }));
        assert.deepEqual(got.map((j) => j.id).sort(), [duePending.id, r.id].sort());
        assert.equal((await get(futurePending.id)).state, 'pending');
        assert.equal((await get(futureRetry.id)).state, 'retrying');
        const entries = await log(duePending.id);
        assert.deepEqual(
          entries.map((e) => `${e.from}>${e.to}`),
          ['null>pending', 'pending>queued', 'queued>running'],
        );
        assertLogReplays(await log(r.id), await get(r.id));
      });

      it('promotes due jobs even when their type is not being claimed', async () => {
        const other = await insert({ type: 'other', state: 'pending', runAt: T0 });
        await store.claimJobs(claimParams({ types: [{ type: 'report' }] }));
        assert.equal((await get(other.id)).state, 'queued');
      });

      it('honours per-type concurrency across claims while unlimited types are still claimed', async () => {
        for (let i = 0; i < 5; i++) await insert({ type: 'limited' });
        for (let i = 0; i < 3; i++) await insert({ type: 'free' });
        const types = [{ type: 'limited', concurrency: 2 }, { type: 'free' }];
        const first = await store.claimJobs(claimParams({ types, limit: 10 }));
        assert.equal(first.filter((j) => j.type === 'limited').length, 2);
        assert.equal(first.filter((j) => j.type === 'free').length, 3);
        // Another worker: the limit counts running jobs of every worker.
        assert.deepEqual(await store.claimJobs(claimParams({ types, limit: 10, workerId: 'w2' })), []);
        // One finishes: exactly one slot opens.
        const done = first.find((j) => j.type === 'limited') as JobRecord;
        assert.ok(await apply({ id: done.id, from: 'running', to: 'succeeded', lease: done.lease, reason: 'done', at: T0 + 1 }));
        const next = await store.claimJobs(claimParams({ types, limit: 10, workerId: 'w2', now: T0 + 2 }));
        assert.deepEqual(
          next.map((j) => j.type),
          ['limited'],
        );
        assert.equal((await store.countByState({})).running, 5);
      });

      it('counts running jobs that already exist against the limit', async () => {
        for (let i = 0; i < 4; i++) await insert({ type: 'limited' });
        await claimOne({ types: [{ type: 'limited' }] }); // claimed without a limit
        const more = await store.claimJobs(claimParams({ types: [{ type: 'limited', concurrency: 2 }], limit: 10 }));
        assert.equal(more.length, 1);
        // Over the limit already (3 running > 2): nothing, not a negative count.
        await claimOne({ types: [{ type: 'limited' }] });
        assert.deepEqual(await store.claimJobs(claimParams({ types: [{ type: 'limited', concurrency: 2 }], limit: 10 })), []);
      });

      it('completeAndClaim completes first, so a freed slot is claimable in the same call', async () => {
        await insert({ type: 'solo' });
        await insert({ type: 'solo' });
        const types = [{ type: 'solo', concurrency: 1 }];
        const [a] = await store.claimJobs(claimParams({ types }));
        assert.ok(a);
        const r = await store.completeAndClaim({
          complete: [
            { id: a.id, from: 'running', to: 'succeeded', lease: a.lease, reason: 'completed', at: T0 + 1, patch: { result: { ok: 1 } } },
            { id: a.id, from: 'running', to: 'succeeded', lease: a.lease, reason: 'completed', at: T0 + 1 },
          ],
          claim: claimParams({ types, now: T0 + 1 }),
        });
        assert.deepEqual(r.applied, [true, false]);
        assert.equal(r.jobs.length, 1);
        assert.notEqual(r.jobs[0]?.id, a.id);
        assert.deepEqual((await get(a.id)).result, { ok: 1 });
      });

      it('completeAndClaim refuses an illegal completion before writing anything', async () => {
        const j = await insert();
        await assert.rejects(store.completeAndClaim({ complete: [{ id: j.id, from: 'queued', to: 'succeeded', reason: 'x', at: T0 }], claim: claimParams() }));
        assert.equal((await get(j.id)).state, 'queued');
      });
    });

    // ---- transitions ----

    describe('transition (compare-and-swap)', () => {
      it('a wrong expected state loses and changes nothing', async () => {
        const j = await insert();
        const before = await log(j.id);
        assert.equal(await apply({ id: j.id, from: 'pending', to: 'cancelled', reason: 'user', at: T0 + 1 }), false);
        assert.equal((await get(j.id)).state, 'queued');
        assert.deepEqual(await log(j.id), before);
      });

      it('a wrong lease loses', async () => {
        const j = await running();
        assert.equal(await apply({ id: j.id, from: 'running', to: 'succeeded', lease: j.lease + 1, reason: 'x', at: T0 }), false);
        assert.equal(await apply({ id: j.id, from: 'running', to: 'succeeded', lease: j.lease - 1, reason: 'x', at: T0 }), false);
        assert.equal((await get(j.id)).state, 'running');
        assert.equal(await apply({ id: j.id, from: 'running', to: 'succeeded', lease: j.lease, reason: 'x', at: T0 }), true);
      });

      it('an unknown id loses', async () => {
        assert.equal(await apply({ id: uuidv7(), from: 'queued', to: 'cancelled', reason: 'x', at: T0 }), false);
      });

      it('of two identical transitions only the first applies', async () => {
        const j = await insert();
        const p: TransitionParams = { id: j.id, from: 'queued', to: 'cancelled', reason: 'user', at: T0 };
        assert.deepEqual(await store.transition({ items: [p, p] }), [true, false]);
        assert.equal(await apply(p), false);
      });

      it('the cancelRequested expectation makes cancel requests apply once', async () => {
        const j = await running();
        const req: TransitionParams = {
          id: j.id,
          from: 'running',
          to: 'running',
          lease: j.lease,
          cancelRequested: false,
          reason: 'cancel requested by user',
          at: T0 + 10,
          patch: { cancelRequest: { reason: 'user' } },
        };
        assert.equal(await apply(req), true);
        assert.equal(await apply({ ...req, patch: { cancelRequest: { reason: 'timeout' } } }), false);
        const got = await get(j.id);
        assert.equal(got.cancelRequested, true);
        assert.equal(got.cancelReason, 'user');
        assert.equal(got.cancelRequestedAt, T0 + 10);
        // Expecting true now matches.
        assert.equal(await apply({ id: j.id, from: 'running', to: 'running', lease: j.lease, cancelRequested: true, reason: 'note', at: T0 + 11 }), true);
      });

      it('an illegal transition throws and changes nothing', async () => {
        const j = await insert();
        await assert.rejects(store.transition({ items: [{ id: j.id, from: 'queued', to: 'succeeded', reason: 'x', at: T0 }] }));
        await assert.rejects(store.transition({ items: [{ id: j.id, from: 'queued', to: 'queued', reason: 'x', at: T0 }] }));
        await assert.rejects(store.transition({ items: [{ id: j.id, from: 'expired', to: 'queued', reason: 'x', at: T0 }] }));
        // One illegal item rejects the whole batch: the legal one before it is not applied.
        await assert.rejects(
          store.transition({
            items: [
              { id: j.id, from: 'queued', to: 'cancelled', reason: 'x', at: T0 },
              { id: j.id, from: 'cancelled', to: 'expired', reason: 'x', at: T0 },
            ],
          }),
        );
        assert.equal((await get(j.id)).state, 'queued');
        assert.equal((await log(j.id)).length, 1);
      });

      it('only a claim may move a job to running', async () => {
        const j = await insert();
        await assert.rejects(store.transition({ items: [{ id: j.id, from: 'queued', to: 'running', reason: 'x', at: T0 }] }));
        assert.equal((await get(j.id)).state, 'queued');
        assert.equal((await get(j.id)).lease, 0);
      });

      it('an empty batch is fine', async () => {
        assert.deepEqual(await store.transition({ items: [] }), []);
      });

      it('every applied transition appends exactly one log entry', async () => {
        const j = await running({}, T0);
        // Each step with a losing twin (wrong lease or wrong expected state) tried first.
        const steps: Array<[TransitionParams, Partial<TransitionParams>]> = [
          [{ id: j.id, from: 'running', to: 'running', lease: 1, reason: 'checkpoint discarded', workerId: 'w1', at: T0 + 1 }, { lease: 2 }],
          [
            { id: j.id, from: 'running', to: 'retrying', lease: 1, reason: 'retry scheduled', workerId: 'w1', at: T0 + 2, patch: { runAt: T0 + 100 } },
            { lease: 0 },
          ],
          [{ id: j.id, from: 'retrying', to: 'cancelled', reason: 'cancelled by user', at: T0 + 3 }, { from: 'pending' }],
          [{ id: j.id, from: 'cancelled', to: 'queued', reason: 'manual retry', at: T0 + 4, patch: { resetAttempts: true } }, { from: 'failed' }],
        ];
        let before = await log(j.id);
        for (const [s, losing] of steps) {
          assert.equal(await apply({ ...s, ...losing }), false);
          assert.equal((await log(j.id)).length, before.length);
          assert.equal(await apply(s), true);
          const after = await log(j.id);
          assert.equal(after.length, before.length + 1);
          assert.deepEqual(after.slice(0, before.length), before);
          const e = after[after.length - 1] as TransitionEntry;
          assert.equal(e.from, s.from);
          assert.equal(e.to, s.to);
          assert.equal(e.reason, s.reason);
          assert.equal(e.at, s.at);
          assert.equal(e.workerId, s.workerId ?? null);
          before = after;
        }
        const attempts = before.map((e) => e.attempt);
        assert.deepEqual(attempts, [0, 1, 1, 1, 1, 0]); // submitted, claimed, note, retrying, cancelled, manual retry (reset)
        assertLogReplays(before, await get(j.id));
      });

      it('a batch applies each item independently, in order', async () => {
        const a = await insert();
        const b = await insert();
        const res = await store.transition({
          items: [
            { id: a.id, from: 'queued', to: 'cancelled', reason: 'x', at: T0 },
            { id: b.id, from: 'pending', to: 'cancelled', reason: 'x', at: T0 },
            { id: b.id, from: 'queued', to: 'cancelled', reason: 'x', at: T0 },
            { id: a.id, from: 'cancelled', to: 'queued', reason: 'retry', at: T0 },
          ],
        });
        assert.deepEqual(res, [true, false, true, true]);
        assert.equal((await get(a.id)).state, 'queued');
        assert.equal((await get(b.id)).state, 'cancelled');
      });

      describe('patch fields', () => {
        it('result, error, finishedAt, expiresAt, runAt', async () => {
          const j = await running();
          const err = { message: 'boom', code: 'E', retryable: true };
          assert.ok(
            await apply({
              id: j.id,
              from: 'running',
              to: 'retrying',
              lease: j.lease,
              reason: 'retry',
              at: T0 + 5,
              patch: { error: err, runAt: T0 + 777 },
            }),
          );
          let got = await get(j.id);
          assert.deepEqual(got.error, err);
          assert.equal(got.runAt, T0 + 777);
          assert.equal(got.finishedAt, null);

          const c = await claimOne({ types: [{ type: j.type }], now: T0 + 800 });
          assert.ok(
            await apply({
              id: j.id,
              from: 'running',
              to: 'succeeded',
              lease: c.lease,
              reason: 'completed',
              at: T0 + 900,
              patch: { result: { rows: [1, 'two', null], nested: { ok: true } }, error: null, finishedAt: T0 + 900, expiresAt: T0 + 10_900 },
            }),
          );
          got = await get(j.id);
          assert.deepEqual(got.result, { rows: [1, 'two', null], nested: { ok: true } });
          assert.equal(got.error, null);
          assert.equal(got.finishedAt, T0 + 900);
          assert.equal(got.expiresAt, T0 + 10_900);
          assert.equal(got.runAt, T0 + 777, 'runAt unchanged when not patched');

          assert.ok(await apply({ id: j.id, from: 'succeeded', to: 'expired', reason: 'ttl', at: T0 + 20_000, patch: { result: null } }));
          got = await get(j.id);
          assert.equal(got.state, 'expired');
          assert.equal(got.result, null);
          assert.equal(got.finishedAt, T0 + 900, 'finishedAt unchanged when not patched');
        });

        it('scalar results round-trip', async () => {
          for (const value of [0, 'text', false, [1, 2]]) {
            const j = await running();
            assert.ok(await apply({ id: j.id, from: 'running', to: 'succeeded', lease: j.lease, reason: 'done', at: T0, patch: { result: value } }));
            assert.deepEqual((await get(j.id)).result, value);
          }
        });

        it('resetAttempts: a manual retry starts a new budget', async () => {
          const j = await running({ maxAttempts: 1 });
          assert.ok(
            await apply({
              id: j.id,
              from: 'running',
              to: 'failed',
              lease: j.lease,
              reason: 'fatal',
              at: T0 + 1,
              patch: { error: { message: 'x', code: 'X', retryable: false }, finishedAt: T0 + 1 },
            }),
          );
          assert.equal((await get(j.id)).attempts, 1);
          assert.ok(
            await apply({
              id: j.id,
              from: 'failed',
              to: 'queued',
              reason: 'manual retry',
              at: T0 + 2,
              patch: { resetAttempts: true, error: null, finishedAt: null, runAt: T0 + 2 },
            }),
          );
          const got = await get(j.id);
          assert.equal(got.state, 'queued');
          assert.equal(got.attempts, 0);
          assert.equal(got.error, null);
          assert.equal(got.finishedAt, null);
          assert.equal(got.lease, 1, 'the lease is never reset');
          const again = await claimOne({ types: [{ type: j.type }], now: T0 + 3 });
          assert.equal(again.attempts, 1);
          assert.equal(again.lease, 2);
        });

        it('refundAttempt: a handed-back attempt does not count', async () => {
          const j = await running();
          assert.equal(j.attempts, 1);
          assert.ok(
            await apply({
              id: j.id,
              from: 'running',
              to: 'retrying',
              lease: j.lease,
              reason: 'shutdown',
              at: T0 + 1,
              patch: { runAt: T0 + 1, refundAttempt: true },
            }),
          );
          assert.equal((await get(j.id)).attempts, 0);
          const entries = await log(j.id);
          assert.equal(entries[entries.length - 1]?.attempt, 0);
        });

        it('clearCheckpoint drops the checkpoint; otherwise it survives a retry', async () => {
          const j = await running();
          assert.ok(await store.saveCheckpoint({ id: j.id, lease: j.lease, checkpoint: { version: 1, data: { page: 3 } }, now: T0 }));
          assert.ok(await apply({ id: j.id, from: 'running', to: 'retrying', lease: j.lease, reason: 'retry', at: T0, patch: { runAt: T0 } }));
          const c = await claimOne({ types: [{ type: j.type }], now: T0 + 1 });
          assert.deepEqual(c.checkpoint, { version: 1, data: { page: 3 } });
          assert.ok(await apply({ id: j.id, from: 'running', to: 'succeeded', lease: c.lease, reason: 'done', at: T0 + 2, patch: { clearCheckpoint: true } }));
          assert.equal((await get(j.id)).checkpoint, null);
        });

        it('cancelRequest sets and clears the request', async () => {
          const j = await running();
          assert.ok(
            await apply({
              id: j.id,
              from: 'running',
              to: 'running',
              lease: j.lease,
              reason: 'cancel',
              at: T0 + 3,
              patch: { cancelRequest: { reason: 'timeout' } },
            }),
          );
          let got = await get(j.id);
          assert.deepEqual([got.cancelRequested, got.cancelReason, got.cancelRequestedAt], [true, 'timeout', T0 + 3]);
          assert.ok(await apply({ id: j.id, from: 'running', to: 'cancelled', lease: j.lease, reason: 'timeout', at: T0 + 4 }));
          assert.equal((await get(j.id)).cancelRequested, true, 'a state change alone keeps the flag');
          assert.ok(await apply({ id: j.id, from: 'cancelled', to: 'queued', reason: 'manual retry', at: T0 + 5, patch: { cancelRequest: false } }));
          got = await get(j.id);
          assert.deepEqual([got.cancelRequested, got.cancelReason, got.cancelRequestedAt], [false, null, null]);
        });

        it('stalled sets and clears the flag', async () => {
          const j = await running();
          assert.ok(await apply({ id: j.id, from: 'running', to: 'running', lease: j.lease, reason: 'stalled', at: T0, patch: { stalled: true } }));
          assert.equal((await get(j.id)).stalled, true);
          assert.ok(await apply({ id: j.id, from: 'running', to: 'running', lease: j.lease, reason: 'unstalled', at: T0, patch: { stalled: false } }));
          assert.equal((await get(j.id)).stalled, false);
        });

        it('fields not in the patch are left alone', async () => {
          const j = await running({ metadata: { m: 1 } });
          assert.ok(await store.saveCheckpoint({ id: j.id, lease: j.lease, checkpoint: { version: 2, data: 'cp' }, now: T0 }));
          const before = await get(j.id);
          assert.ok(await apply({ id: j.id, from: 'running', to: 'running', lease: j.lease, reason: 'note', at: T0 + 1 }));
          const after = await get(j.id);
          assert.deepEqual({ ...after, updatedAt: 0 }, { ...before, updatedAt: 0 });
          assert.ok(after.updatedAt > before.updatedAt, 'every write moves updatedAt strictly forward');
          assert.ok(after.updatedAt >= T0 + 1);
        });
      });
    });

    // ---- lease-holder writes ----

    describe('heartbeat and leaseStatus', () => {
      it('heartbeat succeeds for the lease holder and moves heartbeatAt', async () => {
        const j = await running();
        const [r] = await store.heartbeat({ items: [{ id: j.id, lease: j.lease }], now: T0 + 5_000 });
        assert.deepEqual(r, { id: j.id, ok: true, cancelRequested: false, cancelReason: null });
        assert.equal((await get(j.id)).heartbeatAt, T0 + 5_000);
      });

      it('a lost lease is reported and heartbeatAt is not moved', async () => {
        const j = await running();
        // Reaped and claimed again by someone else.
        assert.ok(await apply({ id: j.id, from: 'running', to: 'retrying', lease: j.lease, reason: 'reaped', at: T0 + 1, patch: { runAt: T0 + 1 } }));
        const again = await claimOne({ types: [{ type: j.type }], workerId: 'w2', now: T0 + 2 });
        const res = await store.heartbeat({
          items: [
            { id: j.id, lease: j.lease },
            { id: j.id, lease: again.lease },
            { id: uuidv7(), lease: 1 },
          ],
          now: T0 + 3,
        });
        assert.deepEqual(
          res.map((r) => [r.id, r.ok]),
          [
            [j.id, false],
            [j.id, true],
            [res[2]?.id, false],
          ],
        );
        assert.equal((await get(j.id)).heartbeatAt, T0 + 3);
        const stale = await store.heartbeat({ items: [{ id: j.id, lease: j.lease }], now: T0 + 4 });
        assert.equal(stale[0]?.ok, false);
        assert.equal((await get(j.id)).heartbeatAt, T0 + 3);
      });

      it('a job that is no longer running is a lost lease', async () => {
        const j = await running();
        assert.ok(await apply({ id: j.id, from: 'running', to: 'succeeded', lease: j.lease, reason: 'done', at: T0 }));
        assert.equal((await store.heartbeat({ items: [{ id: j.id, lease: j.lease }], now: T0 + 1 }))[0]?.ok, false);
        assert.equal((await store.leaseStatus({ items: [{ id: j.id, lease: j.lease }] }))[0]?.ok, false);
      });

      it('reports cancel requests with their reason', async () => {
        const j = await running();
        assert.ok(
          await apply({
            id: j.id,
            from: 'running',
            to: 'running',
            lease: j.lease,
            reason: 'cancel',
            at: T0,
            cancelRequested: false,
            patch: { cancelRequest: { reason: 'user' } },
          }),
        );
        assert.deepEqual((await store.heartbeat({ items: [{ id: j.id, lease: j.lease }], now: T0 + 1 }))[0], {
          id: j.id,
          ok: true,
          cancelRequested: true,
          cancelReason: 'user',
        });
        assert.deepEqual((await store.leaseStatus({ items: [{ id: j.id, lease: j.lease }] }))[0], {
          id: j.id,
          ok: true,
          cancelRequested: true,
          cancelReason: 'user',
        });
      });

      it('leaseStatus reads without writing, one answer per item in order', async () => {
        const a = await running();
        const b = await running();
        const res = await store.leaseStatus({
          items: [
            { id: b.id, lease: b.lease },
            { id: a.id, lease: a.lease + 1 },
            { id: a.id, lease: a.lease },
          ],
        });
        assert.deepEqual(
          res.map((r) => [r.id, r.ok, r.cancelRequested]),
          [
            [b.id, true, false],
            [a.id, false, false],
            [a.id, true, false],
          ],
        );
        assert.equal((await get(a.id)).heartbeatAt, T0, 'leaseStatus does not heartbeat');
        assert.deepEqual(await store.leaseStatus({ items: [] }), []);
        assert.deepEqual(await store.heartbeat({ items: [], now: T0 }), []);
      });
    });

    describe('progress and checkpoints', () => {
      it('progress from the lease holder is visible in getJob', async () => {
        const j = await running();
        const p: Progress = {
          percent: 42.5,
          stage: 'parse',
          itemsDone: 425,
          itemsTotal: 1000,
          message: 'parsing',
          eta: 12_000,
          updatedAt: new Date(T0 + 10).toISOString(),
        };
        assert.equal(await store.saveProgress({ id: j.id, lease: j.lease, progress: p, now: T0 + 10 }), true);
        assert.deepEqual((await get(j.id)).progress, p);
        const p2 = progress(60, T0 + 20);
        assert.equal(await store.saveProgress({ id: j.id, lease: j.lease, progress: p2, now: T0 + 20 }), true);
        assert.deepEqual((await get(j.id)).progress, p2);
      });

      it('progress with a stale lease is refused and the value is unchanged', async () => {
        const j = await running();
        assert.ok(await store.saveProgress({ id: j.id, lease: j.lease, progress: progress(10, T0), now: T0 }));
        assert.ok(await apply({ id: j.id, from: 'running', to: 'retrying', lease: j.lease, reason: 'reaped', at: T0 + 1, patch: { runAt: T0 + 1 } }));
        assert.equal(await store.saveProgress({ id: j.id, lease: j.lease, progress: progress(99, T0 + 2), now: T0 + 2 }), false, 'not running');
        const again = await claimOne({ types: [{ type: j.type }], now: T0 + 3 });
        assert.equal(await store.saveProgress({ id: j.id, lease: j.lease, progress: progress(98, T0 + 4), now: T0 + 4 }), false, 'old lease');
        assert.equal((await get(j.id)).progress.percent, 10);
        assert.equal(await store.saveProgress({ id: j.id, lease: again.lease, progress: progress(20, T0 + 5), now: T0 + 5 }), true);
        assert.equal((await get(j.id)).progress.percent, 20);
        assert.equal(await store.saveProgress({ id: uuidv7(), lease: 1, progress: progress(1, T0), now: T0 }), false);
      });

      it('a progress save unflags a stalled job', async () => {
        const j = await running();
        assert.ok(
          await apply({ id: j.id, from: 'running', to: 'running', lease: j.lease, reason: 'stalled: no progress', at: T0 + 1, patch: { stalled: true } }),
        );
        assert.equal((await get(j.id)).stalled, true);
        assert.ok(await store.saveProgress({ id: j.id, lease: j.lease, progress: progress(5, T0 + 2), now: T0 + 2 }));
        const got = await get(j.id);
        assert.equal(got.stalled, false);
        assert.equal(got.state, 'running');
        assertLogReplays(await log(j.id), got);
      });

      it('a progress save with a stale lease does not unflag a stalled job', async () => {
        const j = await running();
        assert.ok(await apply({ id: j.id, from: 'running', to: 'running', lease: j.lease, reason: 'stalled', at: T0 + 1, patch: { stalled: true } }));
        assert.equal(await store.saveProgress({ id: j.id, lease: j.lease + 1, progress: progress(5, T0 + 2), now: T0 + 2 }), false);
        assert.equal((await get(j.id)).stalled, true);
      });

      it('checkpoints are fenced by the lease', async () => {
        const j = await running();
        assert.equal(await store.saveCheckpoint({ id: j.id, lease: j.lease, checkpoint: { version: 1, data: { offset: 10 } }, now: T0 }), true);
        assert.deepEqual((await get(j.id)).checkpoint, { version: 1, data: { offset: 10 } });
        assert.equal(await store.saveCheckpoint({ id: j.id, lease: j.lease + 1, checkpoint: { version: 1, data: { offset: 99 } }, now: T0 }), false);
        assert.deepEqual((await get(j.id)).checkpoint, { version: 1, data: { offset: 10 } });
        assert.ok(await apply({ id: j.id, from: 'running', to: 'retrying', lease: j.lease, reason: 'reaped', at: T0, patch: { runAt: T0 } }));
        assert.equal(await store.saveCheckpoint({ id: j.id, lease: j.lease, checkpoint: { version: 1, data: { offset: 50 } }, now: T0 }), false, 'not running');
        const again = await claimOne({ types: [{ type: j.type }], now: T0 + 1 });
        assert.equal(
          await store.saveCheckpoint({ id: j.id, lease: j.lease, checkpoint: { version: 1, data: { offset: 60 } }, now: T0 + 1 }),
          false,
          'old lease',
        );
        assert.deepEqual(again.checkpoint, { version: 1, data: { offset: 10 } });
        assert.equal(await store.saveCheckpoint({ id: j.id, lease: again.lease, checkpoint: { version: 2, data: null }, now: T0 + 2 }), true);
        assert.deepEqual((await get(j.id)).checkpoint, { version: 2, data: null });
      });
    });

    // ---- sweeper ----

    describe('sweepCandidates', () => {
      const ids = (jobs: JobRecord[]) => jobs.map((j) => j.id).sort();

      it('stale: running jobs whose heartbeat is older than their heartbeat timeout', async () => {
        const a = await running({ heartbeatTimeoutMs: 1_000 }, T0);
        const b = await running({ heartbeatTimeoutMs: 5_000 }, T0);
        await insert({ heartbeatTimeoutMs: 1 }); // queued: never stale
        assert.deepEqual(await store.sweepCandidates({ kind: 'stale', now: T0 + 1_000, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stale', now: T0 + 1_001, limit: 10 })), [a.id]);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stale', now: T0 + 5_001, limit: 10 })), ids([a, b]));
        assert.equal((await store.sweepCandidates({ kind: 'stale', now: T0 + 5_001, limit: 1 })).length, 1);
        // A heartbeat makes it fresh again.
        await store.heartbeat({ items: [{ id: a.id, lease: a.lease }], now: T0 + 4_500 });
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stale', now: T0 + 5_001, limit: 10 })), [b.id]);
        // The candidate carries what the sweeper needs for its CAS.
        const [cand] = await store.sweepCandidates({ kind: 'stale', now: T0 + 5_001, limit: 10 });
        assert.equal(cand?.lease, b.lease);
        assert.equal(cand?.attempts, 1);
        // Finished jobs are not stale.
        assert.ok(await apply({ id: b.id, from: 'running', to: 'succeeded', lease: b.lease, reason: 'done', at: T0 + 1 }));
        assert.deepEqual(await store.sweepCandidates({ kind: 'stale', now: T0 + 5_001, limit: 10 }), []);
      });

      it('timed-out: running past timeoutMs from start, no cancel requested yet', async () => {
        const a = await running({ timeoutMs: 5_000 }, T0);
        const b = await running({ timeoutMs: null }, T0);
        assert.deepEqual(await store.sweepCandidates({ kind: 'timed-out', now: T0 + 5_000, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'timed-out', now: T0 + 5_001, limit: 10 })), [a.id]);
        assert.ok(b);
        assert.ok(
          await apply({
            id: a.id,
            from: 'running',
            to: 'running',
            lease: a.lease,
            cancelRequested: false,
            reason: 'timeout',
            at: T0 + 5_001,
            patch: { cancelRequest: { reason: 'timeout' } },
          }),
        );
        assert.deepEqual(await store.sweepCandidates({ kind: 'timed-out', now: T0 + 99_000, limit: 10 }), []);
      });

      it('timed-out counts from the current attempt start', async () => {
        const a = await running({ timeoutMs: 5_000 }, T0);
        assert.ok(await apply({ id: a.id, from: 'running', to: 'retrying', lease: a.lease, reason: 'retry', at: T0 + 1, patch: { runAt: T0 + 10_000 } }));
        await claimOne({ types: [{ type: a.type }], now: T0 + 10_000 });
        assert.deepEqual(await store.sweepCandidates({ kind: 'timed-out', now: T0 + 14_000, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'timed-out', now: T0 + 15_001, limit: 10 })), [a.id]);
      });

      it('drained: cancel requested longer ago than drainMs', async () => {
        const a = await running({}, T0);
        await running({}, T0); // no cancel request
        assert.ok(
          await apply({
            id: a.id,
            from: 'running',
            to: 'running',
            lease: a.lease,
            reason: 'cancel',
            at: T0 + 1_000,
            patch: { cancelRequest: { reason: 'user' } },
          }),
        );
        assert.deepEqual(await store.sweepCandidates({ kind: 'drained', now: T0 + 4_000, limit: 10, drainMs: 3_000 }), []);
        const got = await store.sweepCandidates({ kind: 'drained', now: T0 + 4_001, limit: 10, drainMs: 3_000 });
        assert.deepEqual(ids(got), [a.id]);
        assert.equal(got[0]?.cancelReason, 'user');
        assert.deepEqual(await store.sweepCandidates({ kind: 'drained', now: T0 + 4_001, limit: 10, drainMs: 10_000 }), []);
        assert.ok(await apply({ id: a.id, from: 'running', to: 'cancelled', lease: a.lease, reason: 'forced', at: T0 + 4_001 }));
        assert.deepEqual(await store.sweepCandidates({ kind: 'drained', now: T0 + 99_000, limit: 10, drainMs: 3_000 }), []);
      });

      it('stalled: heartbeat fresh but no progress for stallTimeoutMs, not yet flagged', async () => {
        const a = await running({ stallTimeoutMs: 2_000, heartbeatTimeoutMs: 60_000 }, T0);
        await running({ stallTimeoutMs: null, heartbeatTimeoutMs: 60_000 }, T0);
        assert.deepEqual(await store.sweepCandidates({ kind: 'stalled', now: T0 + 2_000, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stalled', now: T0 + 2_001, limit: 10 })), [a.id]);
        // Progress counts from its last save.
        assert.ok(await store.saveProgress({ id: a.id, lease: a.lease, progress: progress(10, T0 + 1_500), now: T0 + 1_500 }));
        assert.deepEqual(await store.sweepCandidates({ kind: 'stalled', now: T0 + 3_500, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stalled', now: T0 + 3_501, limit: 10 })), [a.id]);
        // Flagged: no longer a candidate.
        assert.ok(await apply({ id: a.id, from: 'running', to: 'running', lease: a.lease, reason: 'stalled', at: T0 + 3_501, patch: { stalled: true } }));
        assert.deepEqual(await store.sweepCandidates({ kind: 'stalled', now: T0 + 9_000, limit: 10 }), []);
      });

      it('stalled: a job whose heartbeat is stale is not stalled (it is stale)', async () => {
        const a = await running({ stallTimeoutMs: 1_000, heartbeatTimeoutMs: 2_000 }, T0);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stalled', now: T0 + 1_500, limit: 10 })), [a.id]);
        assert.deepEqual(await store.sweepCandidates({ kind: 'stalled', now: T0 + 2_500, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stale', now: T0 + 2_500, limit: 10 })), [a.id]);
      });

      it('stalled: a new attempt counts from its own start, not the last attempt’s progress', async () => {
        const a = await running({ stallTimeoutMs: 2_000, heartbeatTimeoutMs: 60_000 }, T0);
        assert.ok(await store.saveProgress({ id: a.id, lease: a.lease, progress: progress(10, T0 + 100), now: T0 + 100 }));
        assert.ok(await apply({ id: a.id, from: 'running', to: 'retrying', lease: a.lease, reason: 'retry', at: T0 + 200, patch: { runAt: T0 + 10_000 } }));
        await claimOne({ types: [{ type: a.type }], now: T0 + 10_000 });
        assert.deepEqual(await store.sweepCandidates({ kind: 'stalled', now: T0 + 11_000, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'stalled', now: T0 + 12_001, limit: 10 })), [a.id]);
      });

      it('expired: succeeded jobs past expiresAt', async () => {
        const a = await running();
        const b = await running();
        const c = await running();
        assert.ok(await apply({ id: a.id, from: 'running', to: 'succeeded', lease: a.lease, reason: 'done', at: T0, patch: { expiresAt: T0 + 1_000 } }));
        assert.ok(await apply({ id: b.id, from: 'running', to: 'succeeded', lease: b.lease, reason: 'done', at: T0 })); // no expiry
        assert.ok(await apply({ id: c.id, from: 'running', to: 'failed', lease: c.lease, reason: 'fatal', at: T0, patch: { expiresAt: T0 } })); // not succeeded
        assert.deepEqual(await store.sweepCandidates({ kind: 'expired', now: T0 + 1_000, limit: 10 }), []);
        assert.deepEqual(ids(await store.sweepCandidates({ kind: 'expired', now: T0 + 1_001, limit: 10 })), [a.id]);
        assert.ok(await apply({ id: a.id, from: 'succeeded', to: 'expired', reason: 'ttl', at: T0 + 1_001, patch: { result: null } }));
        assert.deepEqual(await store.sweepCandidates({ kind: 'expired', now: T0 + 99_000, limit: 10 }), []);
      });

      it('nothing to sweep in an empty store', async () => {
        for (const kind of ['stale', 'timed-out', 'drained', 'stalled', 'expired'] as const) {
          assert.deepEqual(await store.sweepCandidates({ kind, now: T0 + 10 ** 9, limit: 10, drainMs: 0 }), [], kind);
        }
      });
    });

    describe('promoteDue', () => {
      it('moves due pending and retrying jobs to queued and counts them', async () => {
        const r = await running(); // first: its claim would promote due jobs of every type
        const due = await insert({ state: 'pending', runAt: T0 });
        const later = await insert({ state: 'pending', runAt: T0 + 1 });
        assert.ok(await apply({ id: r.id, from: 'running', to: 'retrying', lease: r.lease, reason: 'retry', at: T0, patch: { runAt: T0 - 1 } }));
        assert.equal(await store.promoteDue({ now: T0, limit: 100 }), 2);
        assert.equal((await get(due.id)).state, 'queued');
        assert.equal((await get(r.id)).state, 'queued');
        assert.equal((await get(later.id)).state, 'pending');
        assert.equal(await store.promoteDue({ now: T0, limit: 100 }), 0);
        assert.equal(await store.promoteDue({ now: T0 + 1, limit: 100 }), 1);
        assertLogReplays(await log(r.id), await get(r.id));
        assertLogReplays(await log(later.id), await get(later.id));
      });

      it('respects the limit, earliest runAt first', async () => {
        const a = await insert({ state: 'pending', runAt: T0 - 10 });
        const b = await insert({ state: 'pending', runAt: T0 - 30 });
        const c = await insert({ state: 'pending', runAt: T0 - 20 });
        assert.equal(await store.promoteDue({ now: T0, limit: 2 }), 2);
        assert.deepEqual([(await get(a.id)).state, (await get(b.id)).state, (await get(c.id)).state], ['pending', 'queued', 'queued']);
      });
    });

    describe('countByState', () => {
      it('counts every state, zero included, optionally per tenant', async () => {
        const empty = await store.countByState({});
        assert.deepEqual(Object.keys(empty).sort(), [...JOB_STATES].sort());
        assert.ok(Object.values(empty).every((n) => n === 0));
        await insert({ tenant: 'acme' });
        await insert({ tenant: 'acme', state: 'pending', runAt: T0 + 1 });
        await insert({ tenant: 'globex' });
        const r = await running({ tenant: 'globex' });
        assert.ok(r);
        const all = await store.countByState({});
        assert.equal(all.queued, 2);
        assert.equal(all.pending, 1);
        assert.equal(all.running, 1);
        assert.equal(all.failed, 0);
        const acme = await store.countByState({ tenant: 'acme' });
        assert.deepEqual([acme.queued, acme.pending, acme.running], [1, 1, 0]);
        const globex = await store.countByState({ tenant: 'globex' });
        assert.deepEqual([globex.queued, globex.pending, globex.running], [1, 0, 1]);
        assert.equal(Object.keys(globex).length, 9);
      });
    });

    describe('activity', () => {
      it('counts submitted and finished jobs and reports durations', async () => {
        const now = Date.now();
        await insert({ createdAt: now });
        const r = await running({ createdAt: now }, now);
        assert.ok(await apply({ id: r.id, from: 'running', to: 'succeeded', lease: r.lease, reason: 'done', at: now + 250, patch: { finishedAt: now + 250 } }));
        const a = await store.activity({ since: now - 60_000, durationsSince: now - 60_000 });
        assert.equal(a.submitted, 2);
        assert.equal(a.finished, 1);
        assert.deepEqual(a.durations, [{ type: r.type, bucket: durationBucket(250), count: 1 }]);
        const other = await store.activity({ tenant: 'nobody', since: now - 60_000, durationsSince: now - 60_000 });
        assert.deepEqual(other, { submitted: 0, finished: 0, durations: [] });
      });
    });

    describe('migrate', () => {
      it('running it again is a no-op that keeps the data', async () => {
        const j = await insert();
        await store.migrate();
        await store.migrate();
        assert.equal((await get(j.id)).id, j.id);
        assert.equal((await store.listJobs({ limit: 10 })).items.length, 1);
      });
    });
  });
}
