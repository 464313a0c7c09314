/**
 * The retention part of the storage contract (RetentionStore in src/store/store.ts): which ended
 * jobs are found for deletion, and that deleting one removes every row it owns in every table
 * (counted per table before and after), and nothing of any other job. Also the idempotency keys'
 * lifetime and reuse (JobQueueStore.insertJob), which retention's design goes with.
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { JobRecord } from '../../../src/core/job.js';
import { runningNote, succeed as coreSucceed } from '../../../src/core/transitions.js';
import type { Store } from '../../../src/store/store.js';
import { contractHelpers, newJob, T0 } from './fixtures.js';

/** Every row a store holds for a job, per table, read through the contract. */
async function footprint(store: Store, id: string) {
  const job = await store.getJob({ id });
  return {
    job: job ? 1 : 0,
    progress: job?.progress.updatedAt ? 1 : 0,
    results: (await store.listResults({ ids: [id] })).get(id)?.length ?? 0,
    webhook: (await store.getWebhook({ jobId: id })) ? 1 : 0,
    deliveries: (await store.listWebhookDeliveries({ jobId: id, limit: 100 })).length,
    log: (await store.getTransitions({ id }))?.length ?? 0,
    attempts: (await store.listAttempts({ id, limit: 100 }))?.length ?? 0,
  };
}

export function runRetentionContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (retention): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, running, apply, get } = contractHelpers(() => store);
    const endedIds = async (p: Parameters<Store['endedJobs']>[0]) => (await store.endedJobs(p)).map((j) => j.id);

    /** A job run to `to` at `at`, with progress, a result file record, a webhook target and a delivery log entry. */
    async function ended(to: 'succeeded' | 'failed' | 'cancelled', at: number, overrides: Parameters<typeof insert>[0] = {}): Promise<JobRecord> {
      const id = overrides?.id ?? newJob().id;
      await store.saveWebhook({ jobId: id, url: 'https://example.test/hook', secret: null });
      const r = await running({ ...overrides, id });
      const progress = { percent: 50, stage: null, itemsDone: null, itemsTotal: null, message: 'half', eta: null, updatedAt: new Date(T0).toISOString() };
      assert.ok(await store.saveProgress({ id, lease: r.lease, progress, now: T0 }));
      assert.ok(await store.recordResult({ id, lease: r.lease, file: { name: 'out.csv', size: 3, contentType: 'text/csv', sha256: 'ab'.repeat(32), key: `results/${id}/out.csv` }, now: T0 }));
      assert.ok(await apply({ id, from: 'running', to, lease: r.lease, reason: 'end', at, patch: { finishedAt: at } }));
      await store.recordWebhookDelivery({
        jobId: id,
        deliveryId: newJob().id,
        eventType: `job.${to}`,
        attempt: 1,
        at,
        url: 'https://example.test/hook',
        status: 200,
        ok: true,
        error: null,
        durationMs: 5,
        responseSnippet: null,
      });
      return get(id);
    }

    it('finds ended jobs by state, end time, tenant and type, oldest end first, and never open jobs', async () => {
      const a = await ended('succeeded', T0 + 20, { type: 'a' });
      const b = await ended('succeeded', T0 + 10, { type: 'b' });
      const f = await ended('failed', T0 + 5, { type: 'a', tenant: 'other' });
      await insert({ type: 'a' }); // queued: never found
      await running({ type: 'c' }); // running: never found
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'] }, limit: 10 }), [b.id, a.id]);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'] }, limit: 1 }), [b.id]);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'], finishedBefore: T0 + 20 }, limit: 10 }), [b.id]);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'], finishedFrom: T0 + 11 }, limit: 10 }), [a.id]);
      assert.deepEqual(await store.endedJobs({ filter: { states: ['succeeded'] }, limit: 1 }), [{ id: b.id, finishedAt: T0 + 10 }]);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'], types: ['a'] }, limit: 10 }), [a.id]);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'], excludeTypes: ['a'] }, limit: 10 }), [b.id]);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded', 'failed'], tenant: 'other' }, limit: 10 }), [f.id]);
      assert.deepEqual(await endedIds({ filter: { states: ['queued', 'running'] }, limit: 10 }), [], 'open states never match');
      assert.equal(await store.countOpenJobs({ tenant: 'acme' }), 2);
      assert.equal(await store.countOpenJobs({ tenant: 'other' }), 0);
      assert.equal(await store.countOpenJobs({ type: 'b' }), 0);
    });

    it('deletes a job with every row it owns, counted per table, and nothing of another job', async () => {
      const gone = await ended('failed', T0 + 1);
      const kept = await ended('failed', T0 + 1);
      const before = await footprint(store, gone.id);
      assert.deepEqual(before, { job: 1, progress: 1, results: 1, webhook: 1, deliveries: 1, log: 3, attempts: 1 });
      const keptBefore = await footprint(store, kept.id);
      assert.equal(keptBefore.attempts, 1);
      const deleted = await store.deleteJobs({ ids: [gone.id] });
      assert.deepEqual(deleted, { jobs: 1, progress: 1, resultFiles: 1, webhooks: 1, deliveries: 1, signals: 0, attempts: 1 });
      assert.deepEqual(await footprint(store, gone.id), { job: 0, progress: 0, results: 0, webhook: 0, deliveries: 0, log: 0, attempts: 0 });
      assert.deepEqual(await footprint(store, kept.id), keptBefore);
    });

    it('deletes the signals a job kept', async () => {
      const j = await insert();
      const sent = await store.sendSignal({ id: j.id, name: 'go', payload: { x: 1 }, at: T0 });
      assert.equal(sent.kind, 'accepted');
      assert.ok(await apply({ id: j.id, from: 'queued', to: 'cancelled', reason: 'cancelled', at: T0 + 1, patch: { finishedAt: T0 + 1 } }));
      const deleted = await store.deleteJobs({ ids: [j.id] });
      assert.equal(deleted.jobs, 1);
      assert.equal(deleted.signals, 1);
    });

    it('keeps open jobs and parents whose children are still there; the parent goes after its last child', async () => {
      const open = await insert();
      const parent = await ended('succeeded', T0 + 1);
      const child = await ended('succeeded', T0 + 2, { parentId: parent.id });
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'] }, limit: 10 }), [child.id], 'the parent is not due while its child is kept');
      const first = await store.deleteJobs({ ids: [open.id, parent.id, child.id] });
      assert.equal(first.jobs, 1, 'only the child: the job is open, the parent still had a child when checked');
      assert.ok(await store.getJob({ id: open.id }));
      assert.ok(await store.getJob({ id: parent.id }));
      assert.equal(await store.getJob({ id: child.id }), null);
      assert.deepEqual(await endedIds({ filter: { states: ['succeeded'] }, limit: 10 }), [parent.id]);
      assert.equal((await store.deleteJobs({ ids: [parent.id] })).jobs, 1);
    });

    it('keeps a job that left its ended state since it was selected (manual retry)', async () => {
      const f = await ended('failed', T0 + 1);
      const ids = await endedIds({ filter: { states: ['failed'] }, limit: 10 });
      assert.deepEqual(ids, [f.id]);
      assert.ok(await apply({ id: f.id, from: 'failed', to: 'queued', reason: 'manual retry', at: T0 + 2, patch: { finishedAt: null } }));
      assert.equal((await store.deleteJobs({ ids })).jobs, 0);
      assert.equal((await get(f.id)).state, 'queued');
    });

    describe('deleteOnEnd (retention 0: the job deleted by the write that ends it)', () => {
      const progress = { percent: 50, stage: null, itemsDone: null, itemsTotal: null, message: 'half', eta: null, updatedAt: new Date(T0).toISOString() };
      const claim = { workerId: 'w', types: [], limit: 0, now: T0 };
      const succeed = (j: JobRecord, extra: Partial<Parameters<Store['transition']>[0]['items'][number]> = {}) => ({
        id: j.id,
        from: 'running' as const,
        to: 'succeeded' as const,
        lease: j.lease,
        reason: 'completed',
        at: T0 + 5,
        patch: { result: { ok: true }, finishedAt: T0 + 5, clearCheckpoint: true },
        deleteOnEnd: true,
        ...extra,
      });

      it('completeAndClaim deletes the job with its progress and log, reports it, and touches no other job', async () => {
        const r = await running();
        assert.ok(await store.saveProgress({ id: r.id, lease: r.lease, progress, now: T0 }));
        assert.ok(await store.saveCheckpoint({ id: r.id, lease: r.lease, checkpoint: { version: 1, data: { at: 3 } }, now: T0 }));
        const other = await running();
        assert.ok(await store.saveProgress({ id: other.id, lease: other.lease, progress, now: T0 }));
        const otherBefore = await footprint(store, other.id);
        assert.deepEqual(await footprint(store, r.id), { job: 1, progress: 1, results: 0, webhook: 0, deliveries: 0, log: 2, attempts: 0 });
        const res = await store.completeAndClaim({ complete: [succeed(r)], claim });
        assert.deepEqual(res.applied, [true]);
        assert.deepEqual(res.deleted, [true]);
        assert.deepEqual(await footprint(store, r.id), { job: 0, progress: 0, results: 0, webhook: 0, deliveries: 0, log: 0, attempts: 0 });
        assert.deepEqual(await footprint(store, other.id), otherBefore);
        assert.equal((await store.countByState({})).running, 1);
      });

      it('the attempt history of a job deleted on its end goes with it', async () => {
        const r = await running();
        // A first attempt that failed and is retried (recorded in the history), then a second one.
        assert.ok(await apply({ id: r.id, from: 'running', to: 'retrying', lease: r.lease, reason: 'failed', at: T0 + 1, patch: { runAt: T0 + 1, error: { message: 'x', code: 'E', retryable: true } } }));
        assert.ok(await apply({ id: r.id, from: 'retrying', to: 'queued', reason: 'due', at: T0 + 2 }));
        const [again] = await store.claimJobs({ workerId: 'w', types: [{ type: r.type }], limit: 1, now: T0 + 3 });
        assert.equal(again?.id, r.id);
        assert.equal((await footprint(store, r.id)).attempts, 1);
        const res = await store.completeAndClaim({ complete: [succeed(again as JobRecord)], claim });
        assert.deepEqual(res.deleted, [true]);
        assert.deepEqual(await footprint(store, r.id), { job: 0, progress: 0, results: 0, webhook: 0, deliveries: 0, log: 0, attempts: 0 });
      });

      it('ends as usual, without deleting, a job that owns result files, a webhook, a parent or children: the eraser deletes those', async () => {
        const withFile = await running();
        assert.ok(await store.recordResult({ id: withFile.id, lease: withFile.lease, file: { name: 'out.csv', size: 3, contentType: 'text/csv', sha256: 'ab'.repeat(32), key: `results/${withFile.id}/out.csv` }, now: T0 }));
        const withHookId = newJob().id;
        await store.saveWebhook({ jobId: withHookId, url: 'https://example.test/hook', secret: null });
        const withHook = await running({ id: withHookId });
        const parent = await running();
        const child = await running({ parentId: parent.id });
        const items = [withFile, withHook, parent, child].map((j) => succeed(j));
        const res = await store.completeAndClaim({ complete: items, claim });
        assert.deepEqual(res.applied, [true, true, true, true]);
        assert.deepEqual(res.deleted, [false, false, false, false]);
        for (const j of [withFile, withHook, parent, child]) assert.equal((await get(j.id)).state, 'succeeded');
        assert.equal((await footprint(store, withFile.id)).results, 1);
        assert.equal((await footprint(store, withHook.id)).webhook, 1);
        // The eraser's way: the child first, then its parent.
        const deleted = await store.deleteJobs({ ids: [withFile.id, withHook.id, child.id] });
        assert.deepEqual(deleted, { jobs: 3, progress: 0, resultFiles: 1, webhooks: 1, deliveries: 0, signals: 0, attempts: 0 });
        assert.equal((await store.deleteJobs({ ids: [parent.id] })).jobs, 1);
      });

      it('a lost compare-and-swap deletes nothing; an end not in an ended state is applied as usual', async () => {
        const r = await running();
        const lost = await store.completeAndClaim({ complete: [succeed(r, { lease: r.lease + 1 })], claim });
        assert.deepEqual(lost.applied, [false]);
        assert.deepEqual(lost.deleted, [false]);
        assert.equal((await get(r.id)).state, 'running');
        const retry = await store.completeAndClaim({
          complete: [{ id: r.id, from: 'running', to: 'retrying', lease: r.lease, reason: 'retry', at: T0 + 1, patch: { runAt: T0 + 100 }, deleteOnEnd: true }],
          claim,
        });
        assert.deepEqual(retry.applied, [true]);
        assert.deepEqual(retry.deleted, [false]);
        assert.equal((await get(r.id)).state, 'retrying');
      });

      // The write the worker builds (core/transitions.ts succeed) by the worker that claimed: what
      // PostgreSQL's worker_cycle takes as arrays instead of JSON (migration 18). Same outcomes.
      const workerSuccess = (j: JobRecord, result: unknown = null, at = T0 + 5) => ({ ...coreSucceed(j, 'w1', at, result, 60_000), deleteOnEnd: true });

      it("the worker's own successes are deleted in a batch mixed with other writes; a job named twice applies in order", async () => {
        const [a, b, c, d] = [await running(), await running(), await running(), await running()];
        await store.saveProgress({ id: c.id, lease: c.lease, progress, now: T0 });
        const items = [
          workerSuccess(a),
          { id: b.id, from: 'running' as const, to: 'retrying' as const, lease: b.lease, reason: 'retry scheduled', workerId: 'w1', at: T0 + 5, patch: { runAt: T0 + 100 }, deleteOnEnd: true },
          workerSuccess(c, { rows: 3, note: 'a "quoted" \\ value, ünïcode' }),
          runningNote(d, 'w1', T0 + 4, 'almost done'),
          workerSuccess(d),
          // Another worker's success (its lease is this job's, the worker id is not the claim's).
          { ...workerSuccess(await running()), workerId: 'w2' },
        ];
        const res = await store.completeAndClaim({ complete: items, claim: { ...claim, workerId: 'w1' } });
        assert.deepEqual(res.applied, [true, true, true, true, true, true]);
        assert.deepEqual(res.deleted, [true, false, true, false, true, true]);
        for (const j of [a, c, d]) assert.deepEqual(await footprint(store, j.id), { job: 0, progress: 0, results: 0, webhook: 0, deliveries: 0, log: 0, attempts: 0 });
        assert.equal((await get(b.id)).state, 'retrying');
        assert.equal((await store.countByState({})).running, 0);
      });

      it("the worker's own successes of jobs that own rows are kept as succeeded, result and all; a lost lease is refused", async () => {
        const withFile = await running();
        assert.ok(await store.recordResult({ id: withFile.id, lease: withFile.lease, file: { name: 'out.csv', size: 3, contentType: 'text/csv', sha256: 'ab'.repeat(32), key: `results/${withFile.id}/out.csv` }, now: T0 }));
        assert.ok(await store.saveCheckpoint({ id: withFile.id, lease: withFile.lease, checkpoint: { version: 1, data: { at: 3 } }, now: T0 }));
        const parent = await running();
        const child = await running({ parentId: parent.id });
        const lost = await running();
        const plain = await running();
        const result = { rows: 3, note: 'a "quoted" \\ value, {braces}, commas, ünïcode \u2028', list: [1, null, 'x'] };
        const items = [workerSuccess(withFile, result, T0 + 7), workerSuccess(parent, 'done'), workerSuccess(child, null), { ...workerSuccess(lost), lease: lost.lease + 1 }, workerSuccess(plain)];
        const res = await store.completeAndClaim({ complete: items, claim: { ...claim, workerId: 'w1' } });
        assert.deepEqual(res.applied, [true, true, true, false, true]);
        assert.deepEqual(res.deleted, [false, false, false, false, true]);
        const kept = await get(withFile.id);
        assert.equal(kept.state, 'succeeded');
        assert.deepEqual(kept.result, result);
        assert.equal(kept.finishedAt, T0 + 7);
        assert.equal(kept.expiresAt, T0 + 7 + 60_000);
        assert.equal(kept.checkpoint, null);
        assert.equal(kept.workerId, 'w1');
        const entries = await store.getTransitions({ id: withFile.id });
        assert.deepEqual(
          entries?.slice(1).map((e) => [e.to, e.reason, e.workerId, e.at]),
          [
            ['running', 'claimed', 'w1', T0],
            ['succeeded', 'completed', 'w1', T0 + 7],
          ],
        );
        assert.equal((await get(parent.id)).result, 'done');
        assert.equal((await get(child.id)).state, 'succeeded');
        assert.equal((await get(lost.id)).state, 'running');
        assert.equal(await store.getJob({ id: plain.id }), null);
      });

      it('transition applies deleteOnEnd writes the same way (deleted jobs count as applied)', async () => {
        const a = await running();
        const b = await running();
        const applied = await store.transition({ items: [succeed(a), { ...succeed(b), deleteOnEnd: false }] });
        assert.deepEqual(applied, [true, true]);
        assert.equal(await store.getJob({ id: a.id }), null);
        assert.equal((await get(b.id)).state, 'succeeded');
      });
    });

    describe('idempotency keys', () => {
      const keyed = (key: string, at: number, hash = 'h1') => newJob({ idempotencyKey: key, requestHash: hash, createdAt: at, runAt: at });

      it('a key whose job failed or was cancelled names a new job; the old job keeps its row', async () => {
        for (const to of ['failed', 'cancelled'] as const) {
          const key = `k-${to}`;
          const first = await store.insertJob({ job: keyed(key, T0) });
          assert.equal(first.kind, 'created');
          const [claimed] = await store.claimJobs({ workerId: 'w', types: [{ type: 'report' }], limit: 1, now: T0 });
          assert.ok(claimed);
          assert.equal((await store.insertJob({ job: keyed(key, T0 + 1) })).kind, 'existing', 'running: the same job');
          assert.ok(await apply({ id: claimed.id, from: 'running', to, lease: claimed.lease, reason: 'end', at: T0 + 2 }));
          const again = await store.insertJob({ job: keyed(key, T0 + 3), idempotencyTtlMs: 86_400_000 });
          assert.ok(again.kind === 'created', `after ${to}: a new job`);
          assert.notEqual(again.job.id, claimed.id);
          assert.equal((await get(claimed.id)).idempotencyKey, null, 'the old job lost the key');
          const replay = await store.insertJob({ job: keyed(key, T0 + 4) });
          assert.ok(replay.kind === 'existing');
          assert.equal(replay.job.id, again.job.id);
        }
      });

      it('a succeeded job keeps its key for its lifetime, then the key names a new job', async () => {
        const ttl = 60_000;
        const first = await store.insertJob({ job: keyed('k', T0), idempotencyTtlMs: ttl });
        const [c] = await store.claimJobs({ workerId: 'w', types: [{ type: 'report' }], limit: 1, now: T0 });
        assert.ok(c);
        assert.ok(await apply({ id: c.id, from: 'running', to: 'succeeded', lease: c.lease, reason: 'done', at: T0 + 1 }));
        const inside = await store.insertJob({ job: keyed('k', T0 + ttl - 1, 'h2'), idempotencyTtlMs: ttl });
        assert.equal(inside.kind, 'conflict', 'within the lifetime a different request is a conflict');
        assert.ok(inside.kind === 'conflict' && first.kind === 'created');
        assert.equal(inside.job.id, first.job.id);
        const afterTtl = await store.insertJob({ job: keyed('k', T0 + ttl, 'h2'), idempotencyTtlMs: ttl });
        assert.equal(afterTtl.kind, 'created', 'the lifetime is over: a new job');
        const batch = await store.insertJobs({ jobs: [keyed('k', T0 + ttl + 1, 'h2'), keyed('b#0', T0 + ttl + 1)], idempotencyTtlMs: ttl });
        assert.deepEqual(
          batch.map((r) => r.kind),
          ['existing', 'created'],
        );
      });
    });
  });
}
