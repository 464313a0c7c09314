/**
 * Fail-fast in the storage contract (WorkflowStore.resumeParents and resumeStrandedParents,
 * src/store/fail-fast.ts): the transaction that queues a fail-fast parent again because a child
 * failed also stops the parent's other open children, each with a log entry naming the failed
 * child, and returns them for the caller to announce. Run by every store's test file:
 *
 *   runFailFastContract('sqlite', async () => { const s = new SqliteStore(...); await s.migrate(); return s; });
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { uuidv7 } from '../../../src/core/ids.js';
import type { JobRecord } from '../../../src/core/job.js';
import { JOB_STATES, type JobState } from '../../../src/core/states.js';
import { manualRetry, requestCancel, succeed, suspend } from '../../../src/core/transitions.js';
import { emptyWorkflow, NEVER } from '../../../src/core/workflow.js';
import type { NewJob, ResumedJob, StoppedSibling, Store } from '../../../src/store/store.js';
import { assertLogReplays, contractHelpers, newJob, T0 } from './fixtures.js';

function counts(partial: Partial<Record<JobState, number>>): Record<JobState, number> {
  return Object.fromEntries(JOB_STATES.map((s) => [s, partial[s] ?? 0])) as Record<JobState, number>;
}

const byId = <T extends { id: string }>(a: T, b: T) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

export function runFailFastContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (fail-fast siblings): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { get, log, claimOne, running, apply } = contractHelpers(() => store);

    /** A child of `parentId`, of its own type (so that a test can claim it alone). */
    function child(parentId: string, overrides: Partial<NewJob> = {}): NewJob {
      return newJob({ type: `c-${uuidv7().slice(-8)}`, parentId, ...overrides });
    }

    /** Suspends the running `job` on `children` (inserted with it). */
    async function waitOn(job: JobRecord, children: NewJob[], failFast: boolean, at = T0 + 1): Promise<JobRecord> {
      const write = suspend(job, 'w1', at, NEVER, 'waiting for children');
      assert.deepEqual(await store.suspend({ write, wait: { kind: 'children', failFast }, workflow: emptyWorkflow(), children }), { kind: 'suspended' });
      return get(job.id);
    }

    /** Claims `c` (of its own type) and ends it failed. */
    async function fail(c: NewJob, at = T0 + 20): Promise<void> {
      const claimed = await claimOne({ types: [{ type: c.type }], now: at - 1 });
      assert.ok(
        await apply({
          id: claimed.id,
          from: 'running',
          to: 'failed',
          lease: claimed.lease,
          reason: 'boom',
          at,
          patch: { finishedAt: at, error: { message: 'boom', code: 'BOOM', retryable: false } },
        }),
      );
    }

    const resumeOne = (id: string, at: number) => store.resumeParents({ parents: [{ id, childFailed: true }], at });

    it('the wake-up for a failed child cancels the queued, pending, retrying and waiting siblings and asks running ones to cancel, in the same call', async () => {
      const parent = await running();
      const failer = child(parent.id);
      const queued = [child(parent.id), child(parent.id)];
      const pending = child(parent.id, { state: 'pending', runAt: T0 + 1_000_000 });
      const [retrying, run, asked, waiter, done] = [child(parent.id), child(parent.id), child(parent.id), child(parent.id), child(parent.id)];
      await waitOn(parent, [failer, ...queued, pending, retrying, run, asked, waiter, done], true);

      const r = await claimOne({ types: [{ type: retrying.type }], now: T0 + 2 });
      assert.ok(await apply({ id: r.id, from: 'running', to: 'retrying', lease: r.lease, reason: 'retry', at: T0 + 3, patch: { runAt: T0 + 1_000_000 } }));
      const runningChild = await claimOne({ types: [{ type: run.type }], now: T0 + 2 });
      const askedChild = await claimOne({ types: [{ type: asked.type }], now: T0 + 2 });
      assert.ok(await apply(requestCancel(askedChild, T0 + 3)));
      const w = await claimOne({ types: [{ type: waiter.type }], now: T0 + 2 });
      const grandchildren = [child(w.id), child(w.id)];
      await waitOn(w, grandchildren, false, T0 + 3);
      const d = await claimOne({ types: [{ type: done.type }], now: T0 + 2 });
      assert.ok(await apply(succeed(d, 'w1', T0 + 4, 'ok', 60_000)));
      await fail(failer);

      const at = T0 + 30;
      const resumed = await resumeOne(parent.id, at);
      assert.equal(resumed.length, 1);
      const { stopped, ...rest } = resumed[0] as ResumedJob;
      assert.deepEqual(rest, { id: parent.id, tenant: parent.tenant, type: parent.type, reason: 'child failed' });
      const reason = `sibling failed (child ${failer.id} failed)`;

      // What the store returns: each sibling it stopped, once, with the write it applied.
      const expected: { id: string; from: JobState; type: string }[] = [
        [queued[0], 'queued'],
        [queued[1], 'queued'],
        [pending, 'pending'],
        [retrying, 'retrying'],
        [waiter, 'waiting'],
        [run, 'running'],
      ].map(([c, from]) => ({ id: (c as NewJob).id, from: from as JobState, type: (c as NewJob).type }));
      const got = (stopped ?? []).map((s: StoppedSibling) => ({
        id: s.job.id,
        from: s.write.from,
        type: s.job.type,
        to: s.write.to,
        parentId: s.job.parentId,
        tenant: s.job.tenant,
        reason: s.write.reason,
        childrenTotal: s.childrenTotal,
      }));
      assert.deepEqual(
        got.sort(byId),
        expected
          .map((e) => ({
            ...e,
            to: e.from === 'running' ? 'running' : 'cancelled',
            parentId: parent.id,
            tenant: parent.tenant,
            reason: e.from === 'running' ? `cancel requested: ${reason}` : reason,
            childrenTotal: e.id === waiter.id ? 2 : 0,
          }))
          .sort(byId),
      );
      const runWrite = stopped?.find((s) => s.job.id === run.id)?.write;
      assert.deepEqual(runWrite?.patch?.cancelRequest, { reason }, 'a running sibling: a cancel request, so its ctx.signal fires');

      // What the store wrote.
      for (const e of expected.filter((x) => x.from !== 'running')) {
        const j = await get(e.id);
        assert.equal(j.state, 'cancelled', `${e.from} sibling`);
        assert.equal(j.finishedAt, at);
        assert.deepEqual(j.error, { message: `cancelled; ${reason}`, code: 'CANCELLED', retryable: false });
        const l = await log(e.id);
        const { attempt: _, ...entry } = l.at(-1) ?? { attempt: 0 };
        assert.deepEqual(entry, { from: e.from, to: 'cancelled', at, reason, workerId: null }, `the ${e.from} sibling's log entry says why`);
        assertLogReplays(l, j);
      }
      const r2 = await get(run.id);
      assert.deepEqual([r2.state, r2.cancelRequested, r2.cancelReason, r2.lease], ['running', true, reason, runningChild.lease]);
      assert.deepEqual((await log(run.id)).at(-1), { from: 'running', to: 'running', at, reason: `cancel requested: ${reason}`, attempt: 1, workerId: null });
      // Asked already (by a user): left as it was, not asked again.
      const a2 = await get(asked.id);
      assert.deepEqual([a2.state, a2.cancelReason], ['running', 'user']);
      assert.ok(!stopped?.some((s) => s.job.id === asked.id));
      assert.equal((await get(done.id)).state, 'succeeded');
      // A stopped waiting sibling's own children are the caller's to cancel (workflow/fail-fast.ts).
      assert.deepEqual(await store.countChildren({ id: waiter.id }), counts({ queued: 2 }));

      const p = await get(parent.id);
      assert.equal(p.state, 'queued');
      assert.equal((await log(parent.id)).at(-1)?.reason, 'child failed');
      assert.deepEqual(await store.countChildren({ id: parent.id }), counts({ failed: 1, cancelled: 5, running: 2, succeeded: 1 }));
      assert.deepEqual(await resumeOne(parent.id, at + 1), [], 'once');
    });

    it('a cancelled child stops its siblings too, named as cancelled', async () => {
      const parent = await running();
      const [a, b] = [child(parent.id), child(parent.id)];
      await waitOn(parent, [a, b], true);
      assert.ok(await apply({ id: a.id, from: 'queued', to: 'cancelled', reason: 'cancelled by user', at: T0 + 5, patch: { finishedAt: T0 + 5 } }));
      const [r] = await resumeOne(parent.id, T0 + 6);
      assert.deepEqual(
        r?.stopped?.map((s) => [s.job.id, s.write.reason]),
        [[b.id, `sibling failed (child ${a.id} cancelled)`]],
      );
      assert.equal((await get(b.id)).state, 'cancelled');
    });

    it('a parent of 1,000 children: every open sibling is stopped by the one call', async () => {
      const parent = await running();
      const type = `c-${uuidv7().slice(-8)}`;
      const failer = child(parent.id);
      const siblings = Array.from({ length: 1000 }, () => newJob({ type, parentId: parent.id }));
      await waitOn(parent, [failer, ...siblings], true);
      await fail(failer);
      const t0 = performance.now();
      const [r] = await resumeOne(parent.id, T0 + 30);
      const ms = performance.now() - t0;
      console.log(`# ${name}: a fail-fast wake-up stopping 1,000 siblings took ${ms.toFixed(1)} ms`);
      assert.equal(r?.stopped?.length, 1000);
      assert.deepEqual(await store.countChildren({ id: parent.id }), counts({ failed: 1, cancelled: 1000 }));
      // The counters behind /v1/stats and /metrics follow the one write as they follow any other.
      assert.deepEqual(await store.countByState({}), counts({ queued: 1, failed: 1, cancelled: 1000 }));
      const l = await log((siblings[999] as NewJob).id);
      assert.deepEqual(
        l.map((e) => [e.from, e.to]),
        [
          [null, 'queued'],
          ['queued', 'cancelled'],
        ],
      );
    });

    it('nothing is stopped for a collect wait, nor when no child failed any more (retried since)', async () => {
      // Collect: the parent wakes when all are done; a failure stops nobody.
      const collect = await running();
      const [x, y] = [child(collect.id), child(collect.id)];
      await waitOn(collect, [x, y], false);
      await fail(x);
      assert.deepEqual(await resumeOne(collect.id, T0 + 30), []);
      assert.equal((await get(y.id)).state, 'queued');

      // Fail-fast, but the failed child was retried before the parent was woken.
      const parent = await running();
      const [a, b] = [child(parent.id), child(parent.id)];
      await waitOn(parent, [a, b], true);
      await fail(a);
      assert.ok(await apply(manualRetry(await get(a.id), T0 + 25)));
      const resumed = await resumeOne(parent.id, T0 + 30);
      assert.deepEqual(resumed, [{ id: parent.id, tenant: parent.tenant, type: parent.type, reason: 'child failed' }]);
      assert.deepEqual(await store.countChildren({ id: parent.id }), counts({ queued: 2 }));
    });

    it('the sweeper backstop (resumeStrandedParents) stops the siblings as it wakes the parent', async () => {
      const parent = await running();
      const [a, b, c] = [child(parent.id), child(parent.id), child(parent.id)];
      await waitOn(parent, [a, b, c], true);
      await fail(a);
      const resumed = await store.resumeStrandedParents({ at: T0 + 40, limit: 10 });
      assert.deepEqual(
        resumed.map((r) => [r.id, r.reason, r.stopped?.map((s) => s.job.id).sort()]),
        [[parent.id, 'child failed', [b.id, c.id].sort()]],
      );
      assert.deepEqual(await store.countChildren({ id: parent.id }), counts({ failed: 1, cancelled: 2 }));
      assert.equal((await log(b.id)).at(-1)?.reason, `sibling failed (child ${a.id} failed)`);
    });

    it('a waiting sibling listed as a parent in the same call is stopped, not queued, whichever comes first', async () => {
      for (const sFirst of [true, false]) {
        const parent = await running();
        const [a, s] = [child(parent.id), child(parent.id)];
        await waitOn(parent, [a, s], true);
        // s waits fail-fast on its own children, one of which failed.
        const sr = await claimOne({ types: [{ type: s.type }], now: T0 + 2 });
        const [g1, g2] = [child(s.id), child(s.id)];
        await waitOn(sr, [g1, g2], true, T0 + 3);
        await fail(g1, T0 + 10);
        await fail(a, T0 + 20);
        const listed = [
          { id: s.id, childFailed: true },
          { id: parent.id, childFailed: true },
        ];
        const resumed = await store.resumeParents({ parents: sFirst ? listed : listed.reverse(), at: T0 + 30 });
        assert.deepEqual(
          resumed.map((r) => [r.id, r.reason, r.stopped?.map((x) => [x.job.id, x.write.from, x.write.to, x.childrenTotal])]),
          [[parent.id, 'child failed', [[s.id, 'waiting', 'cancelled', 2]]]],
        );
        const sj = await get(s.id);
        assert.equal(sj.state, 'cancelled');
        assertLogReplays(await log(s.id), sj);
        assert.equal((await get(parent.id)).state, 'queued');
        assert.equal((await get(g2.id)).state, 'queued', "the stopped sibling's children are left to the caller's cascade");
      }
    });
  });
}
