/**
 * The workflow part of the storage contract (WorkflowStore in src/store/store.ts): suspend,
 * the wake-ups of a waiting job (its runAt, a signal, its children), signals, children counts
 * and listing, and the status fast path for waiting jobs and parents. One suite parameterised
 * only by a factory, run by every store's test file with the other parts' suites:
 *
 *   runWorkflowContract('sqlite', async () => { const s = new SqliteStore(...); await s.migrate(); return s; });
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 * All times are explicit (`now`, `at`), so nothing here sleeps.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { uuidv7 } from '../../../src/core/ids.js';
import { type JobRecord, toSnapshot } from '../../../src/core/job.js';
import { JOB_STATES, type JobState } from '../../../src/core/states.js';
import { manualRetry, reapLostWorker, suspend, succeed } from '../../../src/core/transitions.js';
import { compensationOnly, emptyWorkflow, NEVER, type WaitCondition, type WorkflowState } from '../../../src/core/workflow.js';
import type { NewJob, Store, SuspendResult } from '../../../src/store/store.js';
import { assertLogReplays, contractHelpers, newJob, T0 } from './fixtures.js';

/** A journal that says something, so that reading it back proves it was saved. */
function journal(tag: string): WorkflowState {
  return { ...emptyWorkflow(), waits: { [`main#${tag}`]: { kind: 'sleep', until: T0 + 1 } }, stages: { fetch: { output: { tag } } } };
}

function counts(partial: Partial<Record<JobState, number>>): Record<JobState, number> {
  return Object.fromEntries(JOB_STATES.map((s) => [s, partial[s] ?? 0])) as Record<JobState, number>;
}

export function runWorkflowContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (workflows): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, get, log, claimOne, running, apply } = contractHelpers(() => store);

    /** `n` children of `parent`, of their own type (so a test can claim them). */
    function childrenOf(parent: JobRecord, n: number, overrides: Partial<NewJob> = {}): NewJob[] {
      const type = `child-${uuidv7().slice(-8)}`;
      return Array.from({ length: n }, () => newJob({ type, parentId: parent.id, ...overrides }));
    }

    function suspendJob(
      job: JobRecord,
      wait: WaitCondition,
      opts: { runAt?: number; at?: number; workflow?: WorkflowState; children?: NewJob[]; lease?: number } = {},
    ): Promise<SuspendResult> {
      const write = suspend({ ...job, lease: opts.lease ?? job.lease }, 'w1', opts.at ?? T0 + 1, opts.runAt ?? NEVER, `waiting for ${wait.kind}`);
      return store.suspend({ write, wait, workflow: opts.workflow ?? journal(wait.kind), ...(opts.children ? { children: opts.children } : {}) });
    }

    /** A running parent suspended on `n` children; returns it (waiting) and the children. */
    async function parentWith(n: number, failFast = false): Promise<{ parent: JobRecord; children: NewJob[] }> {
      const r = await running();
      const children = childrenOf(r, n);
      assert.deepEqual(await suspendJob(r, { kind: 'children', failFast }, { children }), { kind: 'suspended' });
      return { parent: await get(r.id), children };
    }

    /** Claims the child `c` and ends it succeeded. */
    async function succeedChild(c: NewJob, at = T0 + 10): Promise<void> {
      const claimed = await claimOne({ types: [{ type: c.type }], now: at });
      assert.equal(claimed.id, c.id);
      assert.ok(await apply(succeed(claimed, 'w1', at, 'ok', 60_000)));
    }

    async function cancelChild(c: NewJob, at = T0 + 10): Promise<void> {
      assert.ok(await apply({ id: c.id, from: 'queued', to: 'cancelled', reason: 'cancelled by user', at, patch: { finishedAt: at } }));
    }

    describe('suspend', () => {
      it('children: the job waits, its attempt refunded, its journal saved, its children inserted with parentId and counted', async () => {
        const plain = await insert();
        assert.equal(plain.childrenTotal, 0);
        assert.deepEqual([plain.workflow, plain.wait], [null, null]);
        const r = await running();
        assert.equal(r.attempts, 1);
        const children = childrenOf(r, 3);
        const result = await suspendJob(r, { kind: 'children', failFast: true }, { children, workflow: journal('spawn'), at: T0 + 7 });
        assert.deepEqual(result, { kind: 'suspended' });

        const p = await get(r.id);
        assert.equal(p.state, 'waiting');
        assert.equal(p.attempts, 0, 'the attempt is refunded');
        assert.equal(p.runAt, NEVER);
        assert.deepEqual(p.wait, { kind: 'children', name: null, failFast: true });
        assert.deepEqual(p.workflow, journal('spawn'));
        assert.equal(p.childrenTotal, 3);
        const l = await log(r.id);
        assert.deepEqual(l.at(-1), { from: 'running', to: 'waiting', at: T0 + 7, reason: 'waiting for children', attempt: 0, workerId: 'w1' });
        assertLogReplays(l, p);

        for (const c of children) {
          const got = await get(c.id);
          assert.equal(got.parentId, r.id);
          assert.equal(got.state, 'queued');
          assert.deepEqual(await log(c.id), [{ from: null, to: 'queued', at: T0, reason: 'submitted', attempt: 0, workerId: null }]);
        }
        assert.deepEqual(await store.countChildren({ id: r.id }), counts({ queued: 3 }));
      });

      it('children of a later wait add to the count', async () => {
        const { parent } = await parentWith(2);
        assert.equal((await store.resumeParents({ parents: [{ id: parent.id, childFailed: false }], at: T0 + 5 })).length, 0);
        assert.ok(await apply({ id: parent.id, from: 'waiting', to: 'queued', reason: 'test', at: T0 + 5, patch: { runAt: T0 + 5 } }));
        const again = await claimOne({ types: [{ type: parent.type }], now: T0 + 6 });
        assert.deepEqual(await suspendJob(again, { kind: 'children', failFast: false }, { children: childrenOf(again, 4) }), { kind: 'suspended' });
        const p = await get(parent.id);
        assert.equal(p.childrenTotal, 6);
        assert.deepEqual(p.wait, { kind: 'children', name: null, failFast: false });
        assert.equal((await store.countChildren({ id: parent.id })).queued, 6);
      });

      it('lost: a lease that moved on, or a job not running, changes nothing (no child, no journal)', async () => {
        const r = await running();
        const children = childrenOf(r, 2);
        assert.deepEqual(await suspendJob(r, { kind: 'children', failFast: false }, { children, lease: r.lease + 1 }), { kind: 'lost' });
        assert.deepEqual(await suspendJob(r, { kind: 'signal', name: 'go', key: 'k' }, { lease: r.lease + 1 }), { kind: 'lost' });
        const same = await get(r.id);
        assert.equal(same.state, 'running');
        assert.equal(same.attempts, 1);
        assert.equal(same.workflow, null);
        assert.equal(same.childrenTotal, 0);
        for (const c of children) assert.equal(await store.getJob({ id: c.id }), null);
        assert.deepEqual(await store.countChildren({ id: r.id }), counts({}));

        const queued = await insert();
        assert.deepEqual(await suspendJob({ ...queued, lease: 0 }, { kind: 'sleep' }, { runAt: T0 + 10 }), { kind: 'lost' });
        assert.equal((await get(queued.id)).state, 'queued');
        assert.equal((await log(queued.id)).length, 1);
      });

      it('refuses a write that is not running → waiting under the lease, and children of another job, before writing anything', async () => {
        const r = await running();
        const other = await insert();
        const write = suspend(r, 'w1', T0 + 1, NEVER, 'waiting');
        await assert.rejects(store.suspend({ write: { ...write, to: 'queued' }, wait: { kind: 'sleep' }, workflow: emptyWorkflow() }));
        const stray = newJob({ parentId: other.id });
        await assert.rejects(store.suspend({ write, wait: { kind: 'children', failFast: false }, workflow: emptyWorkflow(), children: [stray] }));
        assert.equal((await get(r.id)).state, 'running');
        assert.equal(await store.getJob({ id: stray.id }), null);
      });

      it('sleep: the job waits until its runAt, then is queued with reason "wait over"', async () => {
        const r = await running();
        assert.deepEqual(await suspendJob(r, { kind: 'sleep' }, { runAt: T0 + 1_000 }), { kind: 'suspended' });
        const w = await get(r.id);
        assert.deepEqual(w.wait, { kind: 'sleep', name: null, failFast: false });
        assert.equal(w.runAt, T0 + 1_000);
        assert.equal(await store.promoteDue({ now: T0 + 999, limit: 10 }), 0);
        assert.equal((await get(r.id)).state, 'waiting');
        assert.equal(await store.promoteDue({ now: T0 + 1_000, limit: 10 }), 1);
        const q = await get(r.id);
        assert.equal(q.state, 'queued');
        assert.equal(q.wait, null, 'no wait once queued');
        assert.deepEqual(q.workflow, journal('sleep'), 'the journal stays');
        const l = await log(r.id);
        assert.deepEqual(l.at(-1), { from: 'waiting', to: 'queued', at: T0 + 1_000, reason: 'wait over', attempt: 0, workerId: null });
        assertLogReplays(l, q);
      });

      it('a due waiting job is claimable (the claim promotes it); a wait without time limit (NEVER) is never promoted', async () => {
        const sleeper = await running();
        await suspendJob(sleeper, { kind: 'sleep' }, { runAt: T0 + 50 });
        const forever = await running();
        await suspendJob(forever, { kind: 'signal', name: 'go', key: 'k' });
        const parent = await parentWith(1);
        const claimed = await claimOne({ types: [{ type: sleeper.type }], now: T0 + 50 });
        assert.equal(claimed.id, sleeper.id);
        assert.equal(claimed.attempts, 1, 'the refunded attempt is taken again');
        assert.equal(await store.promoteDue({ now: NEVER - 1, limit: 100 }), 0);
        assert.equal((await get(forever.id)).state, 'waiting');
        assert.equal((await get(parent.parent.id)).state, 'waiting');
      });

      it('20,000 children in one suspend', async () => {
        const r = await running();
        const children = childrenOf(r, 20_000);
        const started = performance.now();
        assert.deepEqual(await suspendJob(r, { kind: 'children', failFast: false }, { children }), { kind: 'suspended' });
        const ms = performance.now() - started;
        console.log(`# ${name}: suspend with 20,000 children took ${ms.toFixed(0)} ms`);
        assert.equal((await get(r.id)).childrenTotal, 20_000);
        assert.deepEqual(await store.countChildren({ id: r.id }), counts({ queued: 20_000 }));
        assert.equal((await get((children[19_999] as NewJob).id)).parentId, r.id);
      });
    });

    describe('saveWorkflow', () => {
      it('saves the journal of a running job under its lease; false once the lease is gone', async () => {
        const r = await running();
        assert.equal(await store.saveWorkflow({ id: r.id, lease: r.lease, workflow: journal('a'), now: T0 }), true);
        assert.deepEqual((await get(r.id)).workflow, journal('a'));
        assert.equal(await store.saveWorkflow({ id: r.id, lease: r.lease + 1, workflow: journal('b'), now: T0 }), false);
        assert.ok(await apply(succeed(r, 'w1', T0 + 1, null, 1000)));
        assert.equal(await store.saveWorkflow({ id: r.id, lease: r.lease, workflow: journal('c'), now: T0 + 2 }), false);
        assert.deepEqual((await get(r.id)).workflow, journal('a'));
        assert.equal(await store.saveWorkflow({ id: uuidv7(), lease: 1, workflow: journal('d'), now: T0 }), false);
      });
    });

    describe('a saga whose worker died on its last attempt', () => {
      it('its stale candidate carries its journal; the reaper requeues it; the next claim is an attempt beyond maxAttempts with the lost worker’s error and the journal', async () => {
        const r = await running({ maxAttempts: 1, heartbeatTimeoutMs: 1_000 });
        const steps: WorkflowState = { ...emptyWorkflow(), steps: [{ name: 's1', output: { id: 'c1' } }, { name: 's2', output: 2 }] };
        assert.equal(await store.saveWorkflow({ id: r.id, lease: r.lease, workflow: steps, now: T0 }), true);
        const stale = await store.sweepCandidates({ kind: 'stale', now: T0 + 5_000, limit: 10 });
        assert.deepEqual(
          stale.map((j) => [j.id, j.attempts, j.maxAttempts, j.workflow]),
          [[r.id, 1, 1, steps]],
        );
        const reap = reapLostWorker(stale[0] as JobRecord, T0 + 5_000);
        assert.equal(reap.to, 'retrying', 'its completed steps are owed compensation');
        assert.ok(await apply(reap));
        await store.promoteDue({ now: T0 + 5_001, limit: 10 });
        const again = await claimOne({ types: [{ type: r.type }], now: T0 + 5_001 });
        assert.equal(again.id, r.id);
        assert.deepEqual([again.attempts, again.maxAttempts, compensationOnly(again.attempts, again.maxAttempts)], [2, 1, true]);
        assert.deepEqual(again.error, reap.patch?.error);
        assert.equal(again.error?.code, 'HEARTBEAT_TIMEOUT');
        assert.deepEqual(again.workflow, steps);
        const entries = await log(r.id);
        assert.deepEqual(
          entries.slice(-3).map((e) => `${e.from}>${e.to}:${e.attempt}`),
          ['running>retrying:1', 'retrying>queued:1', 'queued>running:2'],
        );
        assert.equal(entries.at(-3)?.reason, 'heartbeat lost; requeued');
        assertLogReplays(entries, again);
      });
    });

    describe('resumeParents', () => {
      it('queues the parent once no child is open ("children done"), not while one is', async () => {
        const { parent, children } = await parentWith(2);
        const [a, b] = children as [NewJob, NewJob];
        await succeedChild(a);
        assert.deepEqual(await store.resumeParents({ parents: [{ id: parent.id, childFailed: false }], at: T0 + 11 }), []);
        assert.equal((await get(parent.id)).state, 'waiting');
        // A cancelled child is done too; without failFast, childFailed does not wake the parent early.
        await cancelChild(b, T0 + 12);
        const resumed = await store.resumeParents({ parents: [{ id: parent.id, childFailed: true }], at: T0 + 13 });
        assert.deepEqual(resumed, [{ id: parent.id, tenant: parent.tenant, type: parent.type, reason: 'children done' }]);
        const q = await get(parent.id);
        assert.equal(q.state, 'queued');
        assert.equal(q.runAt, T0 + 13);
        const l = await log(parent.id);
        assert.deepEqual(l.at(-1), { from: 'waiting', to: 'queued', at: T0 + 13, reason: 'children done', attempt: 0, workerId: null });
        assertLogReplays(l, q);
        assert.deepEqual(await store.resumeParents({ parents: [{ id: parent.id, childFailed: false }], at: T0 + 14 }), [], 'once');
      });

      it('a child still waiting, pending or running is open', async () => {
        const r = await running();
        const children = [...childrenOf(r, 1, { state: 'pending', runAt: T0 + 1_000_000 }), ...childrenOf(r, 1)];
        await suspendJob(r, { kind: 'children', failFast: false }, { children });
        const child = await claimOne({ types: [{ type: (children[1] as NewJob).type }], now: T0 + 2 });
        assert.deepEqual(await store.resumeParents({ parents: [{ id: r.id, childFailed: false }], at: T0 + 3 }), []);
        await suspendJob(child, { kind: 'sleep' }, { runAt: T0 + 500 });
        assert.equal((await get(child.id)).state, 'waiting');
        await apply({ id: (children[0] as NewJob).id, from: 'pending', to: 'cancelled', reason: 'cancelled by user', at: T0 + 4 });
        assert.deepEqual(await store.resumeParents({ parents: [{ id: r.id, childFailed: false }], at: T0 + 5 }), [], 'the waiting child is open');
        assert.equal((await get(r.id)).state, 'waiting');
      });

      it('failFast: a failed child wakes the parent ("child failed") while others are open, only when childFailed', async () => {
        const { parent, children } = await parentWith(3, true);
        await cancelChild(children[0] as NewJob);
        assert.deepEqual(await store.resumeParents({ parents: [{ id: parent.id, childFailed: false }], at: T0 + 11 }), []);
        assert.equal((await get(parent.id)).state, 'waiting');
        const resumed = await store.resumeParents({ parents: [{ id: parent.id, childFailed: true }], at: T0 + 12 });
        assert.deepEqual(
          resumed.map(({ stopped, ...r }) => ({ ...r, stopped: stopped?.length })),
          [{ id: parent.id, tenant: parent.tenant, type: parent.type, reason: 'child failed', stopped: 2 }],
        );
        assert.equal((await log(parent.id)).at(-1)?.reason, 'child failed');
        // Its open siblings are cancelled with it (fail-fast.ts has the details).
        assert.deepEqual(await store.countChildren({ id: parent.id }), counts({ cancelled: 3 }));
      });

      it('without failFast, childFailed does not wake a parent with open children', async () => {
        const { parent, children } = await parentWith(2, false);
        await cancelChild(children[0] as NewJob);
        assert.deepEqual(await store.resumeParents({ parents: [{ id: parent.id, childFailed: true }], at: T0 + 11 }), []);
        assert.equal((await get(parent.id)).state, 'waiting');
      });

      it('leaves alone parents that are not waiting for children, and unknown ids', async () => {
        const r = await running();
        const sleeper = await running();
        await suspendJob(sleeper, { kind: 'sleep' }, { runAt: T0 + 100 });
        const signalled = await running();
        await suspendJob(signalled, { kind: 'signal', name: 'go', key: 'k' });
        const resumed = await store.resumeParents({
          parents: [r, sleeper, signalled].map((j) => ({ id: j.id, childFailed: true })).concat([{ id: uuidv7(), childFailed: false }, { id: 'not-a-uuid', childFailed: false }]),
          at: T0 + 5,
        });
        assert.deepEqual(resumed, []);
        assert.deepEqual([(await get(r.id)).state, (await get(sleeper.id)).state, (await get(signalled.id)).state], ['running', 'waiting', 'waiting']);
        assert.deepEqual(await store.resumeParents({ parents: [], at: T0 }), []);
      });

      it('resumes a parent once when it is listed twice, or by two calls at once', async () => {
        const a = await parentWith(1);
        const b = await parentWith(1);
        await succeedChild(a.children[0] as NewJob);
        await succeedChild(b.children[0] as NewJob);
        const twice = await store.resumeParents({
          parents: [
            { id: a.parent.id, childFailed: false },
            { id: a.parent.id, childFailed: false },
          ],
          at: T0 + 20,
        });
        assert.deepEqual(
          twice.map((r) => r.id),
          [a.parent.id],
        );
        const calls = await Promise.all(Array.from({ length: 4 }, () => store.resumeParents({ parents: [{ id: b.parent.id, childFailed: false }], at: T0 + 21 })));
        assert.equal(calls.flat().length, 1, 'exactly one call resumed it');
        const l = await log(b.parent.id);
        assert.equal(l.filter((e) => e.reason === 'children done').length, 1);
        assertLogReplays(l, await get(b.parent.id));
      });
    });

    describe('resumeStrandedParents', () => {
      it('resumes every waiting parent whose children are done, or whose failFast wait has a failed child, up to the limit', async () => {
        const done = await parentWith(2);
        for (const c of done.children) await succeedChild(c);
        const open = await parentWith(2);
        await succeedChild(open.children[0] as NewJob);
        const failed = await parentWith(2, true);
        await cancelChild(failed.children[0] as NewJob);
        const failedNoFast = await parentWith(2, false);
        await cancelChild(failedNoFast.children[0] as NewJob);
        const sleeper = await running();
        await suspendJob(sleeper, { kind: 'sleep' }, { runAt: T0 + 1_000_000 });

        const first = await store.resumeStrandedParents({ at: T0 + 30, limit: 1 });
        assert.equal(first.length, 1);
        const rest = await store.resumeStrandedParents({ at: T0 + 31, limit: 10 });
        const all = [...first, ...rest].map(({ stopped: _, ...r }) => r).sort((x, y) => (x.id < y.id ? -1 : 1));
        const expected = [
          { id: done.parent.id, tenant: done.parent.tenant, type: done.parent.type, reason: 'children done' },
          { id: failed.parent.id, tenant: failed.parent.tenant, type: failed.parent.type, reason: 'child failed' },
        ].sort((x, y) => (x.id < y.id ? -1 : 1));
        assert.deepEqual(all, expected);
        assert.deepEqual(await store.resumeStrandedParents({ at: T0 + 32, limit: 10 }), []);
        assert.equal((await get(done.parent.id)).state, 'queued');
        assert.equal((await get(failed.parent.id)).state, 'queued');
        assert.equal((await log(failed.parent.id)).at(-1)?.reason, 'child failed');
        for (const j of [open.parent, failedNoFast.parent, sleeper]) assert.equal((await get(j.id)).state, 'waiting');
        assert.deepEqual(await store.resumeStrandedParents({ at: T0 + 33, limit: 0 }), []);
      });
    });

    describe('signals', () => {
      it('signals sent before the wait are kept and consumed oldest first, one per wait, by name', async () => {
        const r = await running();
        const send = (name: string, payload: unknown, at: number) => store.sendSignal({ id: r.id, name, payload, at });
        const job = { id: r.id, tenant: r.tenant, type: r.type };
        assert.deepEqual(await send('approve', { n: 1 }, T0 + 1), { kind: 'accepted', job, resumed: false, reason: 'signal approve' });
        assert.equal((await send('other', 'x', T0 + 2)).kind, 'accepted');
        assert.equal((await send('approve', { n: 2 }, T0 + 3)).kind, 'accepted');

        const first = await suspendJob(r, { kind: 'signal', name: 'approve', key: 'main#0' }, { workflow: journal('s0') });
        assert.deepEqual(first, { kind: 'signalled', payload: { n: 1 } });
        const still = await get(r.id);
        assert.equal(still.state, 'running', 'the handler goes on');
        assert.equal(still.attempts, 1);
        assert.deepEqual(still.workflow, journal('s0'), 'the journal is saved');
        assert.deepEqual(await store.consumedSignal({ id: r.id, key: 'main#0' }), { payload: { n: 1 } });

        assert.deepEqual(await suspendJob(r, { kind: 'signal', name: 'approve', key: 'main#1' }), { kind: 'signalled', payload: { n: 2 } });
        const third = await suspendJob(r, { kind: 'signal', name: 'approve', key: 'main#2' }, { runAt: T0 + 5_000 });
        assert.deepEqual(third, { kind: 'suspended' });
        const w = await get(r.id);
        assert.equal(w.state, 'waiting');
        assert.deepEqual(w.wait, { kind: 'signal', name: 'approve', failFast: false });
        assert.equal(w.runAt, T0 + 5_000);
        assert.equal(await store.consumedSignal({ id: r.id, key: 'main#2' }), null);
        assert.deepEqual(await store.consumedSignal({ id: r.id, key: 'main#1' }), { payload: { n: 2 } });
      });

      it('a signal the job waits for wakes it at once ("signal <name>"); another name is kept for later', async () => {
        const r = await running();
        await suspendJob(r, { kind: 'signal', name: 'approve', key: 'main#0' }, { runAt: T0 + 5_000 });
        const other = await store.sendSignal({ id: r.id, name: 'other', payload: 1, at: T0 + 10 });
        assert.deepEqual(other, { kind: 'accepted', job: { id: r.id, tenant: r.tenant, type: r.type }, resumed: false, reason: 'signal other' });
        assert.equal((await get(r.id)).state, 'waiting');

        const sent = await store.sendSignal({ id: r.id, tenant: r.tenant, name: 'approve', payload: { by: 'ann' }, at: T0 + 20 });
        assert.deepEqual(sent, { kind: 'accepted', job: { id: r.id, tenant: r.tenant, type: r.type }, resumed: true, reason: 'signal approve' });
        const q = await get(r.id);
        assert.equal(q.state, 'queued');
        assert.equal(q.runAt, T0 + 20);
        const l = await log(r.id);
        assert.deepEqual(l.at(-1), { from: 'waiting', to: 'queued', at: T0 + 20, reason: 'signal approve', attempt: 0, workerId: null });
        assertLogReplays(l, q);
        assert.deepEqual(await store.consumedSignal({ id: r.id, key: 'main#0' }), { payload: { by: 'ann' } });

        // A second 'approve' is not consumed by the wait that is over: kept for the next one.
        assert.equal((await store.sendSignal({ id: r.id, name: 'approve', payload: 2, at: T0 + 21 })).kind, 'accepted');
        const again = await claimOne({ types: [{ type: r.type }], now: T0 + 30 });
        assert.deepEqual(await suspendJob(again, { kind: 'signal', name: 'other', key: 'main#1' }), { kind: 'signalled', payload: 1 });
        assert.deepEqual(await suspendJob(again, { kind: 'signal', name: 'approve', key: 'main#2' }), { kind: 'signalled', payload: 2 });
      });

      it('a wait that timed out does not consume a signal sent after: the next wait does', async () => {
        const r = await running();
        await suspendJob(r, { kind: 'signal', name: 'approve', key: 'main#0' }, { runAt: T0 + 100 });
        assert.equal(await store.promoteDue({ now: T0 + 100, limit: 10 }), 1);
        assert.equal((await log(r.id)).at(-1)?.reason, 'wait over');
        const late = await store.sendSignal({ id: r.id, name: 'approve', payload: 'late', at: T0 + 101 });
        assert.equal(late.kind === 'accepted' && late.resumed, false);
        assert.equal(await store.consumedSignal({ id: r.id, key: 'main#0' }), null);
        const again = await claimOne({ types: [{ type: r.type }], now: T0 + 102 });
        assert.deepEqual(await suspendJob(again, { kind: 'signal', name: 'approve', key: 'main#1' }), { kind: 'signalled', payload: 'late' });
      });

      it('a job that ended refuses signals and stores none', async () => {
        const done = await running();
        assert.ok(await apply(succeed(done, 'w1', T0 + 1, null, 1000)));
        assert.deepEqual(await store.sendSignal({ id: done.id, name: 'go', payload: 1, at: T0 + 2 }), { kind: 'ended', state: 'succeeded' });

        const c = await insert();
        assert.ok(await apply({ id: c.id, from: 'queued', to: 'cancelled', reason: 'cancelled by user', at: T0 + 1, patch: { finishedAt: T0 + 1 } }));
        assert.deepEqual(await store.sendSignal({ id: c.id, name: 'go', payload: 1, at: T0 + 2 }), { kind: 'ended', state: 'cancelled' });
        // Run again: the refused signal was not kept for it.
        assert.ok(await apply(manualRetry({ ...c, state: 'cancelled' }, T0 + 3)));
        const again = await claimOne({ types: [{ type: c.type }], now: T0 + 4 });
        assert.deepEqual(await suspendJob(again, { kind: 'signal', name: 'go', key: 'main#0' }), { kind: 'suspended' });
      });

      it('an unknown job, or another tenant’s, is not found', async () => {
        const r = await running({ tenant: 'acme' });
        assert.deepEqual(await store.sendSignal({ id: uuidv7(), name: 'go', payload: 1, at: T0 }), { kind: 'not-found' });
        assert.deepEqual(await store.sendSignal({ id: 'not-a-uuid', name: 'go', payload: 1, at: T0 }), { kind: 'not-found' });
        assert.deepEqual(await store.sendSignal({ id: r.id, tenant: 'globex', name: 'go', payload: 1, at: T0 }), { kind: 'not-found' });
        // Nothing was stored by the refused one.
        assert.deepEqual(await suspendJob(r, { kind: 'signal', name: 'go', key: 'main#0' }), { kind: 'suspended' });
        assert.equal(await store.consumedSignal({ id: 'not-a-uuid', key: 'main#0' }), null);
      });
    });

    describe('children: counts and listing', () => {
      it('countChildren counts by state, every state present', async () => {
        const { parent, children } = await parentWith(4);
        await succeedChild(children[0] as NewJob);
        await cancelChild(children[1] as NewJob);
        await claimOne({ types: [{ type: (children[2] as NewJob).type }], now: T0 + 20 });
        assert.deepEqual(await store.countChildren({ id: parent.id }), counts({ succeeded: 1, cancelled: 1, running: 1, queued: 1 }));
        assert.deepEqual(await store.countChildren({ id: uuidv7() }), counts({}));
      });

      it('listJobs({ parentId }) lists only that job’s children, newest first, in pages, with the other filters', async () => {
        const { parent, children } = await parentWith(5);
        await parentWith(2); // another parent's children
        await insert();
        const ids = children.map((c) => c.id).sort().reverse();
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const page = await store.listJobs({ parentId: parent.id, limit: 2, cursor });
          seen.push(...page.items.map((j) => j.id));
          for (const j of page.items) assert.equal(j.parentId, parent.id);
          cursor = page.nextCursor;
          pages++;
        } while (cursor !== null);
        assert.deepEqual(seen, ids);
        assert.equal(pages, 3);
        await cancelChild(children[0] as NewJob);
        const cancelled = await store.listJobs({ parentId: parent.id, states: ['cancelled'], limit: 10 });
        assert.deepEqual(
          cancelled.items.map((j) => j.id),
          [(children[0] as NewJob).id],
        );
        assert.equal((await store.listJobs({ parentId: parent.id, type: (children[0] as NewJob).type, tenant: 'acme', limit: 10 })).items.length, 5);
        assert.equal((await store.listJobs({ parentId: parent.id, tenant: 'globex', limit: 10 })).items.length, 0);
        assert.equal((await store.listJobs({ parentId: parent.id, type: 'nope', limit: 10 })).items.length, 0);
      });
    });

    describe('status fast path', () => {
      it('writes a waiting job’s snapshot (waitingFor, children null) as toSnapshot does; a parent takes the general path', async (t) => {
        const read = store.getSnapshotJson?.bind(store);
        if (!read) {
          t.skip('this store has no snapshot fast path');
          return;
        }
        const sleeper = await running();
        await suspendJob(sleeper, { kind: 'sleep' }, { runAt: T0 + 60_000 });
        const signal = await running();
        await suspendJob(signal, { kind: 'signal', name: 'approve "it"\n', key: 'main#0' }, { runAt: T0 + 60_000 });
        for (const id of [sleeper.id, signal.id]) {
          const snap = await read({ id });
          const job = await get(id);
          assert.ok(snap?.json, 'fast path');
          assert.equal(snap.json, JSON.stringify(toSnapshot(job)));
          assert.deepEqual(JSON.parse(snap.json).waitingFor, job.wait);
        }
        const { parent } = await parentWith(1);
        // A finite wake-up time, so only the children send it to the general path.
        assert.ok(await apply({ id: parent.id, from: 'waiting', to: 'queued', reason: 'test', at: T0 + 5, patch: { runAt: T0 + 5 } }));
        const p = await read({ id: parent.id });
        assert.equal(p?.state, 'queued');
        assert.equal(p?.json, null);
        const plain = await insert();
        const fast = await read({ id: plain.id });
        assert.equal(fast?.json, JSON.stringify(toSnapshot(await get(plain.id))));
      });
    });
  });
}
