/**
 * The dead-letter part of the storage contract (DeadLetterStore in src/store/dead-letter-store.ts):
 * the attempt history each transition that ends an attempt writes with it (by a single
 * transition, a batch, or the worker's completeAndClaim), and the failed jobs by group, page
 * and filter.
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { JobError } from '../../../src/core/errors.js';
import type { JobRecord } from '../../../src/core/job.js';
import type { Store, TransitionParams } from '../../../src/store/store.js';
import { contractHelpers, newJob, T0 } from './fixtures.js';

const boom: JobError = { message: 'boom', code: 'E_BOOM', retryable: true };

export function runDeadLetterContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (dead letters): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, running, apply, get, claimOne } = contractHelpers(() => store);
    const attempts = async (id: string, more: { tenant?: string; afterLease?: number; limit?: number } = {}) => {
      const list = await store.listAttempts({ id, limit: more.limit ?? 100, ...more });
      assert.ok(list, `attempts of ${id}`);
      return list;
    };

    /** A job of `type` claimed and failed at `at` with `error` (one attempt recorded). */
    async function failed(type: string, code: string, at: number, overrides: Parameters<typeof insert>[0] = {}): Promise<JobRecord> {
      const r = await running({ type, ...overrides });
      assert.ok(await apply({ id: r.id, from: 'running', to: 'failed', lease: r.lease, workerId: 'w1', reason: 'fatal', at, patch: { error: { message: code, code, retryable: false }, finishedAt: at } }));
      return get(r.id);
    }

    describe('attempt history', () => {
      it('records every attempt that ends without succeeding, with its error, stack, worker and times; a success is not recorded', async () => {
        const r1 = await running({ maxAttempts: 5 }, T0);
        const type = r1.type;
        assert.ok(
          await apply({
            id: r1.id,
            from: 'running',
            to: 'retrying',
            lease: r1.lease,
            workerId: 'w1',
            reason: 'retry scheduled',
            at: T0 + 10,
            patch: { error: boom, runAt: T0 + 20, stack: 'Error: boom\n    at run (task.js:1:1)' },
          }),
        );
        assert.equal((await get(r1.id)).error?.code, 'E_BOOM');
        assert.ok(!('stack' in ((await get(r1.id)).error ?? {})), 'the stack is not on the job');
        await store.promoteDue({ now: T0 + 20, limit: 10 });
        const r2 = await claimOne({ types: [{ type }], now: T0 + 30, workerId: 'w2' });
        // A reaped worker: the sweeper's write, no stack.
        const lost: JobError = { message: 'worker stopped heartbeating', code: 'HEARTBEAT_TIMEOUT', retryable: true };
        assert.ok(await apply({ id: r1.id, from: 'running', to: 'retrying', lease: r2.lease, workerId: 'w2', reason: 'heartbeat lost; requeued', at: T0 + 40, patch: { error: lost, runAt: T0 + 40 } }));
        await store.promoteDue({ now: T0 + 40, limit: 10 });
        const r3 = await claimOne({ types: [{ type }], now: T0 + 50, workerId: 'w3' });
        assert.equal(r3.attempts, 3);
        // A hand-back at shutdown: the attempt is refunded and keeps its number.
        assert.ok(await apply({ id: r1.id, from: 'running', to: 'retrying', lease: r3.lease, workerId: 'w3', reason: 'shutdown', at: T0 + 60, patch: { runAt: T0 + 60, refundAttempt: true } }));
        await store.promoteDue({ now: T0 + 60, limit: 10 });
        const r4 = await claimOne({ types: [{ type }], now: T0 + 70, workerId: 'w4' });
        assert.equal(r4.attempts, 3);
        assert.ok(await apply({ id: r1.id, from: 'running', to: 'succeeded', lease: r4.lease, workerId: 'w4', reason: 'completed', at: T0 + 80, patch: { result: 1, finishedAt: T0 + 80 } }));

        const list = await attempts(r1.id);
        assert.deepEqual(list, [
          {
            attempt: 1,
            lease: r1.lease,
            workerId: 'w1',
            startedAt: T0,
            endedAt: T0 + 10,
            outcome: 'retrying',
            reason: 'retry scheduled',
            error: boom,
            stack: 'Error: boom\n    at run (task.js:1:1)',
          },
          { attempt: 2, lease: r2.lease, workerId: 'w2', startedAt: T0 + 30, endedAt: T0 + 40, outcome: 'retrying', reason: 'heartbeat lost; requeued', error: lost, stack: null },
          { attempt: 3, lease: r3.lease, workerId: 'w3', startedAt: T0 + 50, endedAt: T0 + 60, outcome: 'retrying', reason: 'shutdown', error: null, stack: null },
        ]);
      });

      it('pages by lease, and is scoped to the tenant like the job', async () => {
        const r = await running({ maxAttempts: 10, tenant: 't1' });
        let lease = r.lease;
        for (let i = 0; i < 3; i++) {
          assert.ok(await apply({ id: r.id, from: 'running', to: 'retrying', lease, reason: 'retry scheduled', at: T0 + i, patch: { error: boom, runAt: T0 } }));
          await store.promoteDue({ now: T0, limit: 10 });
          lease = (await claimOne({ types: [{ type: r.type }] })).lease;
        }
        const all = await attempts(r.id, { tenant: 't1' });
        assert.deepEqual(
          all.map((a) => a.attempt),
          [1, 2, 3],
        );
        const page1 = await attempts(r.id, { limit: 2 });
        assert.equal(page1.length, 2);
        const page2 = await attempts(r.id, { limit: 2, afterLease: page1[1]?.lease as number });
        assert.deepEqual(
          page2.map((a) => a.attempt),
          [3],
        );
        assert.equal(await store.listAttempts({ id: r.id, tenant: 't2', limit: 10 }), null, "another tenant's job is not found");
        assert.equal(await store.listAttempts({ id: newJob().id, limit: 10 }), null, 'unknown job');
        assert.equal(await store.listAttempts({ id: 'not-a-uuid', limit: 10 }), null, 'unknown job');
        assert.deepEqual(await attempts((await insert()).id), [], 'a job that never ran has none');
      });

      it('nothing for a lost compare-and-swap, a note on a running job, or a cancel before the job ran', async () => {
        const r = await running();
        assert.equal(await apply({ id: r.id, from: 'running', to: 'failed', lease: r.lease + 1, reason: 'fatal', at: T0, patch: { error: boom, finishedAt: T0 } }), false);
        assert.ok(await apply({ id: r.id, from: 'running', to: 'running', lease: r.lease, reason: 'stalled: no progress', at: T0, patch: { stalled: true } }));
        assert.deepEqual(await attempts(r.id), []);
        const q = await insert();
        assert.ok(await apply({ id: q.id, from: 'queued', to: 'cancelled', reason: 'cancelled by user', at: T0, patch: { finishedAt: T0, error: { message: 'cancelled', code: 'CANCELLED', retryable: false } } }));
        assert.deepEqual(await attempts(q.id), []);
      });

      it("is written by the worker's completeAndClaim, and by a batch naming one job twice, in order", async () => {
        const r = await running({ maxAttempts: 5 });
        const fail: TransitionParams = { id: r.id, from: 'running', to: 'cancelled', lease: r.lease, workerId: 'w1', reason: 'timeout', at: T0 + 5, patch: { error: { message: 'timed out', code: 'TIMEOUT', retryable: false }, finishedAt: T0 + 5, stack: 'S' } };
        const out = await store.completeAndClaim({ complete: [fail], claim: { workerId: 'w1', types: [{ type: r.type }], limit: 1, now: T0 + 6 } });
        assert.deepEqual(out.applied, [true]);
        const [a] = await attempts(r.id);
        assert.deepEqual([a?.outcome, a?.error?.code, a?.stack, a?.endedAt], ['cancelled', 'TIMEOUT', 'S', T0 + 5]);

        const b = await running({ maxAttempts: 5 });
        const [applied1, applied2] = await store.transition({
          items: [
            { id: b.id, from: 'running', to: 'waiting', lease: b.lease, cancelRequested: false, reason: 'waiting for children', at: T0 + 1, patch: { runAt: T0 + 1, refundAttempt: true } },
            { id: b.id, from: 'waiting', to: 'cancelled', reason: 'cancelled by user', at: T0 + 2, patch: { finishedAt: T0 + 2, error: { message: 'cancelled', code: 'CANCELLED', retryable: false } } },
          ],
        });
        assert.deepEqual([applied1, applied2], [true, true]);
        const list = await attempts(b.id);
        assert.deepEqual(
          list.map((x) => [x.attempt, x.outcome, x.reason, x.error]),
          [[1, 'waiting', 'waiting for children', null]],
        );
      });

      it('is deleted with its job, counted', async () => {
        const f = await failed('x', 'E1', T0 + 1);
        const keep = await failed('x', 'E1', T0 + 2);
        assert.equal((await attempts(f.id)).length, 1);
        const deleted = await store.deleteJobs({ ids: [f.id] });
        assert.equal(deleted.jobs, 1);
        assert.equal(deleted.attempts, 1);
        assert.equal(await store.listAttempts({ id: f.id, limit: 10 }), null);
        assert.equal((await attempts(keep.id)).length, 1, "another job's attempts stay");
      });
    });

    describe('failed jobs', () => {
      it('groups by tenant, task type and error code, with counts and the newest failure, newest group first', async () => {
        await failed('a', 'E1', T0 + 1);
        await failed('a', 'E1', T0 + 5);
        await failed('a', 'E2', T0 + 3);
        await failed('b', 'E1', T0 + 2);
        await failed('a', 'E1', T0 + 9, { tenant: 'other' });
        const ok = await running({ type: 'a' });
        assert.ok(await apply({ id: ok.id, from: 'running', to: 'cancelled', lease: ok.lease, reason: 'cancelled', at: T0 + 10, patch: { finishedAt: T0 + 10, error: { message: 'c', code: 'E1', retryable: false } } }));
        assert.deepEqual(await store.deadLetterGroups({ filter: { tenant: 'acme' }, limit: 10 }), [
          { tenant: 'acme', type: 'a', code: 'E1', count: 2, lastFailedAt: T0 + 5 },
          { tenant: 'acme', type: 'a', code: 'E2', count: 1, lastFailedAt: T0 + 3 },
          { tenant: 'acme', type: 'b', code: 'E1', count: 1, lastFailedAt: T0 + 2 },
        ]);
        const everyone = await store.deadLetterGroups({ filter: {}, limit: 10 });
        assert.deepEqual(everyone[0], { tenant: 'other', type: 'a', code: 'E1', count: 1, lastFailedAt: T0 + 9 });
        assert.equal(everyone.length, 4);
        assert.equal((await store.deadLetterGroups({ filter: {}, limit: 2 })).length, 2);
        assert.deepEqual(
          (await store.deadLetterGroups({ filter: { tenant: 'acme', code: 'E1', failedFrom: T0 + 2 }, limit: 10 })).map((g) => [g.type, g.count]),
          [
            ['a', 1],
            ['b', 1],
          ],
        );
      });

      it("follows a job's latest error: failed again with another code, it moves to that group", async () => {
        const f = await failed('m', 'FIRST', T0 + 1);
        assert.ok(await apply({ id: f.id, from: 'failed', to: 'queued', reason: 'manual retry', at: T0 + 2, patch: { resetAttempts: true, finishedAt: null } }));
        assert.deepEqual(await store.deadLetterGroups({ filter: { type: 'm' }, limit: 10 }), [], 'a retried job is no dead letter');
        const again = await claimOne({ types: [{ type: 'm' }] });
        assert.ok(await apply({ id: f.id, from: 'running', to: 'failed', lease: again.lease, reason: 'fatal', at: T0 + 3, patch: { error: { message: 'x', code: 'SECOND', retryable: false }, finishedAt: T0 + 3 } }));
        assert.deepEqual(await store.deadLetterGroups({ filter: { type: 'm' }, limit: 10 }), [{ tenant: 'acme', type: 'm', code: 'SECOND', count: 1, lastFailedAt: T0 + 3 }]);
        assert.equal((await store.failedJobs({ filter: { code: 'FIRST' }, limit: 10, order: 'asc' })).length, 0);
        // A failure without an error is a group of its own, code null.
        const bare = await running({ type: 'n' });
        assert.ok(await apply({ id: bare.id, from: 'running', to: 'failed', lease: bare.lease, reason: 'fatal', at: T0 + 4, patch: { finishedAt: T0 + 4 } }));
        assert.deepEqual(await store.deadLetterGroups({ filter: { type: 'n' }, limit: 10 }), [{ tenant: 'acme', type: 'n', code: null, count: 1, lastFailedAt: T0 + 4 }]);
      });

      it('code null selects the group of jobs that failed without an error code', async () => {
        const withCode = await failed('n', 'E1', T0 + 1);
        const bare: JobRecord[] = [];
        for (const [i, tenant] of (['acme', 'acme', 'other'] as const).entries()) {
          const r = await running({ type: 'n', tenant });
          assert.ok(await apply({ id: r.id, from: 'running', to: 'failed', lease: r.lease, reason: 'fatal', at: T0 + 2 + i, patch: { finishedAt: T0 + 2 + i } }));
          bare.push(await get(r.id));
        }
        const ids = (list: JobRecord[]) => list.map((j) => j.id);
        assert.deepEqual(await store.deadLetterGroups({ filter: { tenant: 'acme', code: null }, limit: 10 }), [{ tenant: 'acme', type: 'n', code: null, count: 2, lastFailedAt: T0 + 3 }]);
        assert.deepEqual(ids(await store.failedJobs({ filter: { tenant: 'acme', type: 'n', code: null }, limit: 10, order: 'asc' })), ids(bare.slice(0, 2)));
        assert.deepEqual(ids(await store.failedJobs({ filter: { type: 'n', code: null }, limit: 10, order: 'desc' })), ids(bare).reverse(), 'every tenant');
        const page = await store.failedJobs({ filter: { type: 'n', code: null }, limit: 1, order: 'asc', cursor: { finishedAt: T0 + 2, id: bare[0]?.id as string } });
        assert.deepEqual(ids(page), [bare[1]?.id]);
        assert.deepEqual(ids(await store.failedJobs({ filter: { type: 'n', code: 'E1' }, limit: 10, order: 'asc' })), [withCode.id], 'a code still selects only its own');
      });

      it('lists failed jobs by filter, in pages over (finishedAt, id), either way', async () => {
        const jobs: JobRecord[] = [];
        for (let i = 0; i < 5; i++) jobs.push(await failed('a', i % 2 === 0 ? 'E1' : 'E2', T0 + 10 + (i < 2 ? 0 : i)));
        await failed('b', 'E1', T0 + 11);
        await failed('a', 'E1', T0 + 12, { tenant: 'other' });
        const ids = (list: JobRecord[]) => list.map((j) => j.id);
        const byEnd = [...jobs].sort((x, y) => (x.finishedAt as number) - (y.finishedAt as number) || (x.id < y.id ? -1 : 1));
        const all = await store.failedJobs({ filter: { tenant: 'acme', type: 'a' }, limit: 10, order: 'asc' });
        assert.deepEqual(ids(all), ids(byEnd));
        assert.equal(all[0]?.state, 'failed');
        // Pages of 2, walking the two jobs that share an end time.
        const seen: string[] = [];
        let cursor = null as { finishedAt: number; id: string } | null;
        for (;;) {
          const page = await store.failedJobs({ filter: { tenant: 'acme', type: 'a' }, limit: 2, order: 'desc', cursor });
          if (page.length === 0) break;
          seen.push(...ids(page));
          const last = page[page.length - 1] as JobRecord;
          cursor = { finishedAt: last.finishedAt as number, id: last.id };
        }
        assert.deepEqual(seen, ids(byEnd).reverse());
        assert.deepEqual(ids(await store.failedJobs({ filter: { tenant: 'acme', type: 'a', code: 'E2' }, limit: 10, order: 'asc' })), [jobs[1]?.id, jobs[3]?.id]);
        assert.deepEqual(
          ids(await store.failedJobs({ filter: { tenant: 'acme', failedFrom: T0 + 12, failedBefore: T0 + 14 }, limit: 10, order: 'asc' })),
          [jobs[2]?.id, jobs[3]?.id],
        );
        assert.deepEqual(ids(await store.failedJobs({ filter: { ids: [jobs[4]?.id as string, 'nope'] }, limit: 10, order: 'asc' })), [jobs[4]?.id]);
        // A job retried by hand leaves the set.
        assert.ok(await apply({ id: jobs[0]?.id as string, from: 'failed', to: 'queued', reason: 'manual retry', at: T0 + 20, patch: { resetAttempts: true, finishedAt: null } }));
        assert.equal((await store.failedJobs({ filter: { tenant: 'acme', type: 'a' }, limit: 10, order: 'asc' })).length, 4);
      });

      it('deleteJobs with states deletes only jobs in those states', async () => {
        const f = await failed('a', 'E1', T0 + 1);
        const c = await running({ type: 'a' });
        assert.ok(await apply({ id: c.id, from: 'running', to: 'cancelled', lease: c.lease, reason: 'cancelled', at: T0 + 2, patch: { finishedAt: T0 + 2 } }));
        const deleted = await store.deleteJobs({ ids: [f.id, c.id], states: ['failed'] });
        assert.equal(deleted.jobs, 1);
        assert.equal(await store.getJob({ id: f.id }), null);
        assert.ok(await store.getJob({ id: c.id }));
      });
    });
  });
}
