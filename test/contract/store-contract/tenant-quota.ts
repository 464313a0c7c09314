/**
 * Per-tenant backlog limits of the job queue contract (InsertJobParams.maxTenantBacklog,
 * InsertJobsParams.wholeBatch): a new job is refused ('tenant-full') once its tenant has that
 * many jobs pending, queued or retrying; other tenants are not touched; a job found again by its
 * idempotency key is answered whatever the limit; a whole batch is inserted entirely or not at all.
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { Store } from '../../../src/store/store.js';
import { contractHelpers, newJob, T0 } from './fixtures.js';

export function runTenantQuotaContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (tenant backlog limits): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, running, apply } = contractHelpers(() => store);
    const backlogOf = async (tenant: string) => {
      const c = await store.countByState({ tenant });
      return c.pending + c.queued + c.retrying;
    };

    it("refuses a tenant's job once its pending+queued+retrying jobs reach the limit; other tenants go on", async () => {
      await insert();
      await insert({ state: 'pending', runAt: T0 + 10_000 });
      const limits = { acme: 2 };
      const full = await store.insertJob({ job: newJob(), maxTenantBacklog: limits });
      assert.deepEqual(full, { kind: 'tenant-full', tenant: 'acme', backlog: 2, limit: 2 });
      assert.equal(await backlogOf('acme'), 2);
      // A tenant without a limit of its own is not limited, and another tenant's jobs do not count.
      assert.equal((await store.insertJob({ job: newJob({ tenant: 'beta' }), maxTenantBacklog: limits })).kind, 'created');
      assert.equal((await store.insertJob({ job: newJob({ tenant: 'beta' }), maxTenantBacklog: { acme: 2, beta: 1 } })).kind, 'tenant-full');
      assert.equal((await store.insertJob({ job: newJob(), maxTenantBacklog: { acme: 3 } })).kind, 'created');
    });

    it('running and ended jobs do not count; retrying ones do', async () => {
      const r = await running();
      const done = await running();
      assert.ok(await apply({ id: done.id, from: 'running', to: 'succeeded', lease: done.lease, reason: 'done', at: T0 }));
      assert.equal(r.state, 'running');
      assert.equal((await store.insertJob({ job: newJob(), maxTenantBacklog: { acme: 1 } })).kind, 'created');
      assert.equal((await store.insertJob({ job: newJob(), maxTenantBacklog: { acme: 1 } })).kind, 'tenant-full');
      const retrying = await running();
      assert.ok(await apply({ id: retrying.id, from: 'running', to: 'retrying', lease: retrying.lease, reason: 'retry', at: T0, patch: { runAt: T0 + 60_000 } }));
      assert.equal((await store.insertJob({ job: newJob(), maxTenantBacklog: { acme: 2 } })).kind, 'tenant-full');
    });

    it('a limit of 0 refuses every new job of the tenant', async () => {
      assert.deepEqual(await store.insertJob({ job: newJob(), maxTenantBacklog: { acme: 0 } }), { kind: 'tenant-full', tenant: 'acme', backlog: 0, limit: 0 });
      assert.equal(await backlogOf('acme'), 0);
    });

    it('an idempotent replay is answered (existing, or conflict) even when the tenant is over its limit', async () => {
      const first = await store.insertJob({ job: newJob({ idempotencyKey: 'k', requestHash: 'h' }) });
      assert.equal(first.kind, 'created');
      const again = await store.insertJob({ job: newJob({ idempotencyKey: 'k', requestHash: 'h' }), maxTenantBacklog: { acme: 1 } });
      assert.equal(again.kind, 'existing');
      assert.equal((again as { job: { id: string } }).job.id, (first as { job: { id: string } }).job.id);
      assert.equal((await store.insertJob({ job: newJob({ idempotencyKey: 'k', requestHash: 'other' }), maxTenantBacklog: { acme: 0 } })).kind, 'conflict');
      assert.equal((await store.insertJob({ job: newJob({ idempotencyKey: 'k2', requestHash: 'h' }), maxTenantBacklog: { acme: 1 } })).kind, 'tenant-full');
    });

    it('applies job by job within a bulk insert (the group commit of unrelated submissions), each tenant on its own', async () => {
      const results = await store.insertJobs({
        jobs: [newJob(), newJob({ tenant: 'beta' }), newJob(), newJob(), newJob({ tenant: 'beta' })],
        maxTenantBacklog: { acme: 2, beta: 1 },
      });
      assert.deepEqual(
        results.map((r) => r.kind),
        ['created', 'created', 'created', 'tenant-full', 'tenant-full'],
      );
      assert.deepEqual(results[3], { kind: 'tenant-full', tenant: 'acme', backlog: 2, limit: 2 });
      assert.equal(await backlogOf('acme'), 2);
      assert.equal(await backlogOf('beta'), 1);
    });

    it('a whole batch over the limit inserts nothing; one that fits inserts every job', async () => {
      await insert();
      const over = await store.insertJobs({ jobs: [newJob(), newJob(), newJob()], maxTenantBacklog: { acme: 3 }, wholeBatch: true });
      assert.deepEqual(
        over.map((r) => r.kind),
        ['tenant-full', 'tenant-full', 'tenant-full'],
      );
      // The refusal names the backlog before the batch.
      assert.deepEqual(over[0], { kind: 'tenant-full', tenant: 'acme', backlog: 1, limit: 3 });
      assert.equal(await backlogOf('acme'), 1);
      assert.equal((await store.listJobs({ tenant: 'acme', limit: 10 })).items.length, 1);
      const fits = await store.insertJobs({ jobs: [newJob(), newJob()], maxTenantBacklog: { acme: 3 }, wholeBatch: true });
      assert.deepEqual(
        fits.map((r) => r.kind),
        ['created', 'created'],
      );
      assert.equal(await backlogOf('acme'), 3);
    });

    it('a refused whole batch keeps the answers of its jobs found by key, and leaves their keys in place', async () => {
      const kept = await store.insertJob({ job: newJob({ idempotencyKey: 'b#0', requestHash: 'h' }) });
      assert.equal(kept.kind, 'created');
      const results = await store.insertJobs({
        jobs: [newJob({ idempotencyKey: 'b#0', requestHash: 'h' }), newJob({ idempotencyKey: 'b#1', requestHash: 'h' }), newJob({ idempotencyKey: 'b#1', requestHash: 'h' })],
        maxTenantBacklog: { acme: 1 },
        wholeBatch: true,
      });
      assert.deepEqual(
        results.map((r) => r.kind),
        ['existing', 'tenant-full', 'tenant-full'],
      );
      // Nothing was inserted: the key b#1 is still free, and the same batch under a higher limit goes in.
      assert.equal(await backlogOf('acme'), 1);
      const later = await store.insertJobs({
        jobs: [newJob({ idempotencyKey: 'b#0', requestHash: 'h' }), newJob({ idempotencyKey: 'b#1', requestHash: 'h' })],
        maxTenantBacklog: { acme: 2 },
        wholeBatch: true,
      });
      assert.deepEqual(
        later.map((r) => r.kind),
        ['existing', 'created'],
      );
    });
  });
}
