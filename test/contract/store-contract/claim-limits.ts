/**
 * The claim rules of core/claim-plan.ts as every store must apply them: priority aging,
 * fairness between tenants, tenant running caps, per-key concurrency and per-type rate limits
 * (ClaimParams in src/store/store.ts). Exactness across processes is tested with real worker
 * processes in test/e2e/claim-limits-processes.test.ts.
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { JobRecord } from '../../../src/core/job.js';
import type { ClaimParams, Store } from '../../../src/store/store.js';
import { contractHelpers, newJob, T0 } from './fixtures.js';

const MIN = 60_000;

export function runClaimLimitsContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (claim limits and fairness): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, apply } = contractHelpers(() => store);
    const claim = (p: Partial<ClaimParams> & { types: ClaimParams['types'] }) => store.claimJobs({ workerId: 'w1', limit: 10, now: T0, ...p });
    const cycle = async (p: Partial<ClaimParams> & { types: ClaimParams['types'] }) =>
      store.completeAndClaim({ complete: [], claim: { workerId: 'w1', limit: 10, now: T0, ...p } });
    const finish = (j: JobRecord, at = T0) => apply({ id: j.id, from: 'running', to: 'succeeded', lease: j.lease, reason: 'done', at, patch: { finishedAt: at } });
    const ids = (jobs: readonly JobRecord[]) => jobs.map((j) => j.id);

    it('priority aging: a job gains one level per agingMs waited; null keeps priority strict', async () => {
      const low = await insert({ type: 'a', priority: 'low', runAt: T0 });
      const normalEarly = await insert({ type: 'a', priority: 'normal', runAt: T0 + 4 * MIN });
      const normalLate = await insert({ type: 'a', priority: 'normal', runAt: T0 + 6 * MIN });
      const critical = await insert({ type: 'a', priority: 'critical', runAt: T0 + 6 * MIN });
      // Places with 5 min per level: critical 6, normal 4+10 = 14, low 0+15 = 15, normal 6+10 = 16.
      const aged = await claim({ types: [{ type: 'a' }], now: T0 + 7 * MIN, agingMs: 5 * MIN });
      assert.deepEqual(ids(aged), [critical.id, normalEarly.id, low.id, normalLate.id]);
      const b = [
        await insert({ type: 'b', priority: 'low', runAt: T0 }),
        await insert({ type: 'b', priority: 'normal', runAt: T0 + 4 * MIN }),
        await insert({ type: 'b', priority: 'normal', runAt: T0 + 6 * MIN }),
      ];
      const strict = await claim({ types: [{ type: 'b' }], now: T0 + 7 * MIN, agingMs: null });
      assert.deepEqual(ids(strict), [b[1]?.id, b[2]?.id, b[0]?.id]);
    });

    it('aging applies across types in one claim too', async () => {
      const low = await insert({ type: 'x', priority: 'low', runAt: T0 });
      const high = await insert({ type: 'y', priority: 'high', runAt: T0 + 20 * MIN });
      const jobs = await claim({ types: [{ type: 'x' }, { type: 'y' }], now: T0 + 21 * MIN, agingMs: 5 * MIN });
      // low: 0 + 15 = 15 min; high: 20 + 5 = 25 min.
      assert.deepEqual(ids(jobs), [low.id, high.id]);
    });

    it('fairness: a tenant with one job is served before the next job of a tenant with a burst', async () => {
      await store.insertJobs({ jobs: Array.from({ length: 200 }, (_, i) => newJob({ tenant: 'bulk', type: 'f', runAt: T0 + i })) });
      const single = await insert({ tenant: 'small', type: 'f', runAt: T0 + 5000 });
      const first = await claim({ types: [{ type: 'f' }], limit: 1 });
      assert.equal(first[0]?.tenant, 'bulk', 'equal loads: the earlier job first');
      const second = await claim({ types: [{ type: 'f' }], limit: 1 });
      assert.equal(second[0]?.id, single.id, 'bulk has one running now: the other tenant goes next');
      // In one batch the tenants alternate until one runs out.
      await insert({ tenant: 'small', type: 'f', runAt: T0 + 6000 });
      const batch = await claim({ types: [{ type: 'f' }], limit: 6 });
      assert.deepEqual(
        batch.map((j) => j.tenant),
        ['bulk', 'small', 'bulk', 'bulk', 'bulk', 'bulk'],
        'loads: bulk has 1 running (2, 3, ...), small has 1 (2): bulk 2 goes first on place, then small 2, then bulk 3...',
      );
    });

    it('tenant caps: a capped tenant runs at most its cap, others run freely; `others` caps the tenants not named', async () => {
      await store.insertJobs({ jobs: Array.from({ length: 5 }, (_, i) => newJob({ tenant: 'capped', type: 'c', runAt: T0 + i })) });
      await store.insertJobs({ jobs: Array.from({ length: 5 }, (_, i) => newJob({ tenant: 'free', type: 'c', runAt: T0 + 10 + i })) });
      const caps = { byTenant: { capped: 2 } };
      const jobs = await claim({ types: [{ type: 'c' }], tenantCaps: caps });
      assert.equal(jobs.filter((j) => j.tenant === 'capped').length, 2);
      assert.equal(jobs.filter((j) => j.tenant === 'free').length, 5);
      assert.equal((await claim({ types: [{ type: 'c' }], tenantCaps: caps })).length, 0, 'capped tenant full');
      const done = jobs.find((j) => j.tenant === 'capped') as JobRecord;
      assert.ok(await finish(done));
      assert.equal((await claim({ types: [{ type: 'c' }], tenantCaps: caps })).length, 1, 'one place freed');
      // The cap counts the tenant's running jobs of every type.
      await insert({ tenant: 'other', type: 'd' });
      await insert({ tenant: 'other', type: 'e' });
      assert.equal((await claim({ types: [{ type: 'd' }], tenantCaps: { byTenant: {}, others: 1 } })).length, 1);
      assert.equal((await claim({ types: [{ type: 'e' }], tenantCaps: { byTenant: {}, others: 1 } })).length, 0, 'the type-d job counts');
    });

    it('a cap applies to a lone tenant too (no fast path around it)', async () => {
      await store.insertJobs({ jobs: Array.from({ length: 4 }, () => newJob({ tenant: 'solo', type: 's' })) });
      assert.equal((await claim({ types: [{ type: 's' }], tenantCaps: { byTenant: { solo: 3 } } })).length, 3);
    });

    it('concurrency keys: at most keyConcurrency running per key; other keys run freely, even behind a long backlog', async () => {
      await store.insertJobs({ jobs: Array.from({ length: 300 }, (_, i) => newJob({ type: 'k', concurrencyKey: 'big', runAt: T0 + i })) });
      const other = await insert({ type: 'k', concurrencyKey: 'other', runAt: T0 + 1000 });
      const third = await insert({ type: 'k', concurrencyKey: 'third', runAt: T0 + 1001 });
      const types = [{ type: 'k', keyConcurrency: 2 }];
      const jobs = await claim({ types });
      assert.equal(jobs.length, 4);
      assert.equal(jobs.filter((j) => j.id === other.id || j.id === third.id).length, 2, 'the keys behind the backlog are claimed');
      assert.equal((await claim({ types })).length, 0, 'every key is at its limit');
      const big = jobs.find((j) => j.id !== other.id && j.id !== third.id) as JobRecord;
      assert.ok(await finish(big));
      const next = await claim({ types });
      assert.equal(next.length, 1, 'the key that freed a place gets one job');
      assert.equal((await claim({ types })).length, 0);
    });

    it('a capped tenant’s queued job does not hold a key’s place that another tenant’s job can take', async () => {
      await insert({ tenant: 'full', type: 'busy' });
      assert.equal((await claim({ types: [{ type: 'busy' }] })).length, 1);
      await insert({ tenant: 'full', type: 'kc', concurrencyKey: 'shared', runAt: T0 });
      const other = await insert({ tenant: 'other', type: 'kc', concurrencyKey: 'shared', runAt: T0 + 1 });
      const jobs = await claim({ types: [{ type: 'kc', keyConcurrency: 1 }], tenantCaps: { byTenant: { full: 1 } } });
      assert.deepEqual(ids(jobs), [other.id]);
    });

    it('rate limits: at most max starts in any window of perMs; a held-back claim says when the window frees', async () => {
      await store.insertJobs({ jobs: Array.from({ length: 20 }, (_, i) => newJob({ type: 'r', runAt: T0 + i })) });
      const types = [{ type: 'r', rateLimit: { max: 3, perMs: 1000 } }];
      const a = await cycle({ types, now: T0 + 100 });
      assert.equal(a.jobs.length, 3);
      assert.equal(a.wakeAt, undefined);
      const b = await cycle({ types, now: T0 + 600 });
      assert.equal(b.jobs.length, 0);
      assert.equal(b.wakeAt, T0 + 1100, 'the first start leaves the window 1000 ms after it');
      assert.equal((await cycle({ types, now: T0 + 1099 })).jobs.length, 0);
      const c = await cycle({ types, now: T0 + 1100, limit: 2 });
      assert.equal(c.jobs.length, 2, 'a place per start that left the window (limit 2 here)');
      const d = await cycle({ types, now: T0 + 1200 });
      assert.equal(d.jobs.length, 1, 'the third place');
      const e = await cycle({ types, now: T0 + 1300 });
      assert.deepEqual([e.jobs.length, e.wakeAt], [0, T0 + 2100], 'full again until the starts at 1100 leave');
      // Another type is not held back by this one's limit.
      await insert({ type: 'free' });
      assert.equal((await cycle({ types: [...types, { type: 'free' }], now: T0 + 1300 })).jobs.length, 1);
    });

    it('rate limits: a claim whose clock is behind the last logged start counts the window from that start, and starts its jobs then', async () => {
      // Across processes, a claim can read its clock, wait for the type's lock, and run after a
      // claim that read a later time (and deleted the starts older than its own window).
      await store.insertJobs({ jobs: Array.from({ length: 10 }, (_, i) => newJob({ type: 'r', runAt: T0 + i })) });
      const types = [{ type: 'r', rateLimit: { max: 3, perMs: 1000 } }];
      const first = await cycle({ types, now: T0 + 1000, limit: 2 });
      const later = await claim({ types, now: T0 + 2001, limit: 1 });
      const behind = await cycle({ types, now: T0 + 1999 });
      assert.deepEqual(
        [first.jobs.length, later.length, behind.jobs.length],
        [2, 1, 2],
        'the starts at 1000 are out of the window at 2001, so two places are left, not three',
      );
      assert.deepEqual(
        behind.jobs.map((j) => j.startedAt),
        [T0 + 2001, T0 + 2001],
        'started at the last logged start, not before it',
      );
      const claimed = [...first.jobs, ...later, ...behind.jobs];
      const stored = await Promise.all(claimed.map(async (j) => (await store.getJob({ id: j.id }))?.startedAt));
      assert.deepEqual(stored, claimed.map((j) => j.startedAt), 'the stored start is the returned one');
      const starts = stored.map(Number);
      for (const s of starts) {
        const inWindow = starts.filter((t) => t >= s && t < s + 1000).length;
        assert.ok(inWindow <= 3, `${inWindow} starts in the 1000 ms from ${s - T0} (${starts.map((t) => t - T0).join(', ')})`);
      }
      const full = await cycle({ types, now: T0 + 2500 });
      assert.deepEqual([full.jobs.length, full.wakeAt], [0, T0 + 3001], 'the window is full until the starts at 2001 leave');
    });

    it('more tenants than one claim looks at are all served within a few claims', async () => {
      await store.insertJobs({ jobs: Array.from({ length: 70 }, (_, i) => newJob({ tenant: `t${String(i).padStart(3, '0')}`, type: 'm' })) });
      const seen = new Set<string>();
      for (let i = 0; i < 3 && seen.size < 70; i++) for (const j of await claim({ types: [{ type: 'm' }], limit: 100 })) seen.add(j.tenant);
      assert.equal(seen.size, 70);
    });
  });
}
