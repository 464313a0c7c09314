/**
 * The stats part of the storage contract: countByState, countByTypeAndState, activity and
 * compactStats read counters the store keeps as jobs change, never a count of the jobs table.
 * This suite drives a random mix of inserts, claims, ends, retries, cancels, promotions, expiries,
 * deletions and compactions, and after each round compares the counters with a real count of
 * the jobs (listed page by page through the store), and the rates and run-time buckets with
 * what the operations did. (A database's counters start with its baseline schema, so there is
 * no backfill to test: test/contract/*-upgrade.test.ts check the counters after an upgrade.)
 *
 *   runStatsContract('postgres', makeStore);
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { JobRecord } from '../../../src/core/job.js';
import { JOB_STATES, type JobState } from '../../../src/core/states.js';
import { durationBucket } from '../../../src/core/stats-window.js';
import { afterFailure, cancelNow, expireResult, flagStalled, manualRetry, reapLostWorker, succeed, ZOMBIE_REASONS } from '../../../src/core/transitions.js';
import { seededRandom } from '../../../src/core/seeded-random.js';
import type { Store } from '../../../src/store/store.js';
import { contractHelpers, newJob } from './fixtures.js';

const TENANTS = ['acme', 'globex'];
const TYPES = ['a', 'b', 'c'];


/** Every job of the store, page by page: the real count the counters must equal. */
async function allJobs(store: Store): Promise<JobRecord[]> {
  const out: JobRecord[] = [];
  let cursor: string | null = null;
  do {
    const page = await store.listJobs({ limit: 1000, cursor });
    out.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

async function assertCountsMatch(store: Store, note: string): Promise<void> {
  const jobs = await allJobs(store);
  const expect = (filter: (j: JobRecord) => boolean) => {
    const out = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    for (const j of jobs) if (filter(j)) out[j.state]++;
    return out;
  };
  assert.deepEqual(await store.countByState({}), expect(() => true), `${note}: all tenants`);
  for (const t of [...TENANTS, 'nobody']) assert.deepEqual(await store.countByState({ tenant: t }), expect((j) => j.tenant === t), `${note}: tenant ${t}`);
  const byType = new Map<string, number>();
  for (const j of jobs) byType.set(`${j.type}/${j.state}`, (byType.get(`${j.type}/${j.state}`) ?? 0) + 1);
  const got = new Map((await store.countByTypeAndState({})).map((r) => [`${r.type}/${r.state}`, r.count]));
  assert.deepEqual(got, byType, `${note}: by type and state`);
  const acme = new Map((await store.countByTypeAndState({ tenant: 'acme' })).map((r) => [`${r.type}/${r.state}`, r.count]));
  const acmeExpected = new Map<string, number>();
  for (const j of jobs) if (j.tenant === 'acme') acmeExpected.set(`${j.type}/${j.state}`, (acmeExpected.get(`${j.type}/${j.state}`) ?? 0) + 1);
  assert.deepEqual(acme, acmeExpected, `${note}: by type and state, tenant acme`);
}

export function runStatsContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (stats): ${name}`, () => {
    const open: Store[] = [];
    afterEach(async () => {
      for (const s of open.splice(0)) await s.close();
    });

    it('counters equal a real count after a random mix of operations; rates and run times match what was done', async () => {
      const store = await makeStore();
      open.push(store);
      const seed = Number(process.env.STATS_SEED ?? Date.now() % 100_000);
      const rnd = seededRandom(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
      const base = Date.now();
      let now = base;
      let submitted = 0;
      let finished = 0;
      const runTimes = new Map<string, number[]>();
      const ids: string[] = [];
      const jobsIn = async (states: JobState[]) => {
        const out: JobRecord[] = [];
        for (const id of ids) {
          const j = await store.getJob({ id });
          if (j && states.includes(j.state)) out.push(j);
        }
        return out;
      };

      for (let round = 0; round < 8; round++) {
        for (let op = 0; op < 25; op++) {
          now += 1 + Math.floor(rnd() * 40);
          const r = rnd();
          if (r < 0.3 || ids.length < 5) {
            const pending = rnd() < 0.25;
            const nj = newJob({ tenant: pick(TENANTS), type: pick(TYPES), createdAt: now, runAt: pending ? now + 1000 : now, state: pending ? 'pending' : 'queued' });
            const res = await store.insertJobs({ jobs: [nj] });
            assert.equal(res[0]?.kind, 'created');
            ids.push(nj.id);
            submitted++;
          } else if (r < 0.45) {
            await store.claimJobs({ workerId: 'w', types: TYPES.map((type) => ({ type })), limit: 1 + Math.floor(rnd() * 4), now });
          } else if (r < 0.65) {
            const [job] = await jobsIn(['running']);
            if (!job) continue;
            const end = rnd();
            const write =
              end < 0.6
                ? succeed(job, 'w', now, { ok: true }, rnd() < 0.5 ? 1 : 3_600_000)
                : end < 0.8
                  ? afterFailure(job, 'w', now, { to: 'failed', error: { message: 'no', code: 'E', retryable: false } })
                  : afterFailure(job, 'w', now, { to: 'retrying', error: { message: 'again', code: 'E', retryable: true }, runAt: now + 500 });
            const [ok] = await store.transition({ items: [write] });
            if (ok && write.to !== 'retrying') {
              finished++;
              const list = runTimes.get(job.type) ?? [];
              list.push(now - (job.startedAt ?? now));
              runTimes.set(job.type, list);
            }
          } else if (r < 0.72) {
            const [job] = await jobsIn(['queued', 'pending', 'retrying']);
            if (job && (await store.transition({ items: [cancelNow(job, now)] }))[0]) finished++;
          } else if (r < 0.78) {
            const [job] = await jobsIn(['failed', 'cancelled']);
            if (job) await store.transition({ items: [manualRetry(job, now)] });
          } else if (r < 0.85) {
            await store.promoteDue({ now: now + 2000, limit: 3 });
          } else if (r < 0.9) {
            const expired = await store.sweepCandidates({ kind: 'expired', now: now + 10, limit: 5 });
            await store.transition({ items: expired.map((j) => expireResult(j, now)) });
          } else if (r < 0.96) {
            const ended = await store.endedJobs({ filter: { states: ['succeeded', 'expired', 'failed', 'cancelled'] }, limit: 1 + Math.floor(rnd() * 3) });
            await store.deleteJobs({ ids: ended.map((e) => e.id) });
          } else {
            await store.compactStats({ before: base - 16 * 60_000 });
          }
        }
        await assertCountsMatch(store, `seed ${seed}, round ${round}`);
        const a = await store.activity({ since: base - 1000, durationsSince: base - 60_000 });
        assert.equal(a.submitted, submitted, `seed ${seed}: submitted`);
        assert.equal(a.finished, finished, `seed ${seed}: finished`);
        const buckets = new Map<string, number>();
        for (const d of a.durations) buckets.set(`${d.type}/${d.bucket}`, (buckets.get(`${d.type}/${d.bucket}`) ?? 0) + d.count);
        const expected = new Map<string, number>();
        for (const [type, list] of runTimes) for (const ms of list) expected.set(`${type}/${durationBucket(ms)}`, (expected.get(`${type}/${durationBucket(ms)}`) ?? 0) + 1);
        assert.deepEqual(buckets, expected, `seed ${seed}: run-time buckets`);
      }
      // The window: nothing was submitted or ended an hour from now; compaction keeps the figures.
      assert.deepEqual(await store.activity({ since: now + 3_600_000, durationsSince: now + 3_600_000 }), { submitted: 0, finished: 0, durations: [] });
      await store.compactStats({ before: base - 16 * 60_000 });
      await assertCountsMatch(store, `seed ${seed}, compacted`);
      assert.equal((await store.activity({ since: base - 1000, durationsSince: base - 60_000 })).submitted, submitted);
      // Buckets older than `before` go; the counters stay.
      await store.compactStats({ before: now + 120_000 });
      assert.deepEqual(await store.activity({ since: base - 1000, durationsSince: base - 60_000 }), { submitted: 0, finished: 0, durations: [] });
      await assertCountsMatch(store, `seed ${seed}, after the window`);
    });

    it('sweepHealth: running jobs flagged stalled now, and zombies reaped per minute, which outlive their job', async () => {
      const store = await makeStore();
      open.push(store);
      const { running, apply } = contractHelpers(() => store);
      const base = Date.now();
      const health = (tenant?: string, since = base - 60_000) => store.sweepHealth({ ...(tenant === undefined ? {} : { tenant }), reapedSince: since });
      assert.deepEqual(await health(), { stalled: 0, zombiesReaped: 0 });

      const slow = await running({ tenant: 'acme' }, base);
      assert.ok(await apply(flagStalled(slow, base + 10)));
      const lost = await running({ tenant: 'globex', maxAttempts: 3 }, base);
      const reap1 = reapLostWorker(lost, base + 20);
      assert.ok(ZOMBIE_REASONS.includes(reap1.reason));
      assert.ok(await apply(reap1));
      const spent = await running({ tenant: 'acme', maxAttempts: 1 }, base);
      const reap2 = reapLostWorker(spent, base + 30);
      assert.equal(reap2.to, 'failed');
      assert.ok(ZOMBIE_REASONS.includes(reap2.reason));
      assert.ok(await apply(reap2));
      // An attempt that ends otherwise is no reap.
      const flaky = await running({ tenant: 'acme', maxAttempts: 3 }, base);
      assert.ok(await apply({ id: flaky.id, from: 'running', to: 'retrying', lease: flaky.lease, reason: 'retry scheduled', at: base + 40, patch: { runAt: base + 40, error: { message: 'x', code: 'X', retryable: true } } }));

      assert.deepEqual(await health(), { stalled: 1, zombiesReaped: 2 });
      assert.deepEqual(await health('acme'), { stalled: 1, zombiesReaped: 1 });
      assert.deepEqual(await health('globex'), { stalled: 0, zombiesReaped: 1 });
      assert.deepEqual(await health('initech'), { stalled: 0, zombiesReaped: 0 });
      assert.deepEqual(await health(undefined, base + 120_000), { stalled: 1, zombiesReaped: 0 }, 'reaps before the window are not counted');

      // A stalled job that ends is stalled no longer; a reaped job deleted later stays counted.
      assert.ok(await apply({ id: slow.id, from: 'running', to: 'succeeded', lease: slow.lease, reason: 'completed', at: base + 50, patch: { result: 1, finishedAt: base + 50 } }));
      assert.equal((await store.deleteJobs({ ids: [spent.id] })).jobs, 1);
      assert.deepEqual(await health(), { stalled: 0, zombiesReaped: 2 });
      // The stats upkeep drops the minutes before its bound.
      await store.compactStats({ before: base + 120_000 });
      assert.deepEqual(await health(), { stalled: 0, zombiesReaped: 0 });
    });
  });
}
