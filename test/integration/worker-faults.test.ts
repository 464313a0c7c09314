/**
 * Fault injection: a store that refuses one job's write (as PostgreSQL refused a value it could
 * not hold) must fail that job alone, with a clear error, never the worker's loop, the group
 * commit it shares with other jobs, or shutdown. Run on SQLite and on PostgreSQL, with the real
 * store behind a wrapper that refuses writes carrying a marked value (SQLSTATE 22023, a data
 * error: not an outage, so it is never retried as one).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { NewJob, Store, TransitionParams } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { OUTCOME_REFUSED } from '../../src/worker/outcome-isolation.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { pollUntil as until } from '../support/poll.js';

const REFUSAL = 'value refused by the test store';

/** What the wrapper refuses, and what it saw. */
interface Faults {
  /** Job ids whose hand-back at shutdown is refused. */
  refuseHandBack: Set<string>;
  /** Refused writes, with how many jobs each carried. */
  refused: Array<{ method: string; items: number }>;
}

function refusal(): Error {
  return Object.assign(new Error(REFUSAL), { code: '22023' });
}

const marked = (v: unknown, mark: string) => JSON.stringify(v ?? null).includes(mark);

/** The real store, refusing any write that carries a marked result or input, or a refused hand-back. */
function faulty(store: Store, faults: Faults): Store {
  const refusesTransition = (p: TransitionParams) => marked(p.patch?.result, 'POISON-RESULT') || (p.reason === 'shutdown' && faults.refuseHandBack.has(p.id));
  const guard: Record<string, (params: never) => boolean> = {
    completeAndClaim: (p: { complete: TransitionParams[] }) => p.complete.some(refusesTransition),
    transition: (p: { items: TransitionParams[] }) => p.items.some(refusesTransition),
    insertJobs: (p: { jobs: NewJob[] }) => p.jobs.some((j) => marked(j.input, 'POISON-INPUT')),
    insertJob: (p: { job: NewJob }) => marked(p.job.input, 'POISON-INPUT'),
  };
  const size = (p: { complete?: unknown[]; items?: unknown[]; jobs?: unknown[] }) => (p.complete ?? p.items ?? p.jobs ?? [1]).length;
  return new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== 'function') return value;
      const check = guard[prop as string];
      if (!check) return value.bind(target);
      return async (params: never) => {
        if (check(params)) {
          faults.refused.push({ method: String(prop), items: size(params) });
          throw refusal();
        }
        return value.call(target, params);
      };
    },
  });
}

let release: () => void = () => {};
let gate = Promise.resolve();
function closeGate(): void {
  gate = new Promise<void>((r) => {
    release = r;
  });
}

const tasks = [
  defineTask({
    type: 'f.echo',
    maxAttempts: 3,
    async run(input) {
      await gate;
      return { echoed: (input as { mark?: string } | null)?.mark ?? 'ok' };
    },
  }),
  defineTask({
    type: 'f.block',
    async run(_input, ctx) {
      await new Promise<void>((_, reject) => {
        if (ctx.signal.aborted) reject(ctx.signal.reason);
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
      });
    },
  }),
];

const dir = mkdtempSync(join(tmpdir(), 'longhaul-faults-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; open(): Promise<Store> }> = [
  {
    name: 'SQLite',
    async open() {
      const s = new SqliteStore({ path: join(dir, 'faults.db') });
      await s.migrate();
      return s;
    },
  },
  {
    name: 'PostgreSQL',
    async open() {
      pgDb = await createTestDatabase('lh_faults');
      const s = new PostgresStore({ connectionString: pgDb.url });
      await s.migrate();
      return s;
    },
  },
];

for (const target of TARGETS) {
  describe(`a store write refused for one job's data, on ${target.name}`, () => {
    it('fails that job alone with a clear error; the worker goes on claiming; the group commit and shutdown complete', async () => {
      const real = await target.open();
      const faults: Faults = { refuseHandBack: new Set(), refused: [] };
      const lh = await Longhaul.open({ store: faulty(real, faults), tasks, channel: false, logger: pino({ level: 'silent' }), sweepIntervalMs: 100 });
      const stateOf = (id: string) => lh.get(id) as Promise<JobSnapshot>;
      const ended = (id: string) =>
        until(async () => {
          const s = await stateOf(id);
          return ['succeeded', 'failed', 'cancelled'].includes(s.status) ? s : undefined;
        }, `job ${id} to end`);
      try {
        // 1. The group commit: six submissions in one transaction, one of them refused.
        const submits = await Promise.allSettled(
          ['a', 'b', 'POISON-INPUT', 'c', 'd', 'e'].map((mark) => lh.submit('f.echo', { mark: mark === 'POISON-INPUT' ? mark : `pre-${mark}` })),
        );
        assert.deepEqual(
          submits.map((r) => r.status),
          ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled'],
        );
        assert.equal(((submits[2] as PromiseRejectedResult).reason as Error).message, REFUSAL);
        assert.ok(
          faults.refused.some((r) => r.method === 'insertJobs' && r.items === 6),
          `the six went together first: ${JSON.stringify(faults.refused)}`,
        );

        // 2. The worker's cycle: eight outcomes written together, one of them refused.
        closeGate();
        const worker = await lh.startWorker({ concurrency: 16, pollIntervalMs: 20, claimAhead: 0 });
        const batch: JobSnapshot[] = [];
        for (let i = 0; i < 8; i++) batch.push(await lh.submit('f.echo', { mark: i === 3 ? 'POISON-RESULT' : `job-${i}` }));
        await until(async () => ((await lh.list({ status: 'running' })).items.length === 8 + 5 ? true : undefined), 'every job running');
        release();
        const ends = await Promise.all(batch.map((j) => ended(j.id)));
        const poisoned = ends[3] as JobSnapshot;
        assert.equal(poisoned.status, 'failed');
        assert.equal(poisoned.error?.code, OUTCOME_REFUSED);
        assert.equal(poisoned.error?.retryable, false);
        assert.equal(poisoned.error?.message, `the store refused to record this attempt's outcome (succeeded): ${REFUSAL} (22023)`);
        assert.equal(poisoned.result, null);
        assert.equal(poisoned.attempts, 1, 'not retried');
        for (const [i, e] of ends.entries()) if (i !== 3) assert.deepEqual([e.status, e.result], ['succeeded', { echoed: `job-${i}` }]);
        assert.ok(
          faults.refused.some((r) => r.method === 'completeAndClaim' && r.items > 1),
          `the refused outcome shared a cycle with others: ${JSON.stringify(faults.refused)}`,
        );
        const log = await lh.transitions(poisoned.id);
        assert.equal(log.at(-1)?.reason, 'outcome refused by the store');

        // 3. The worker claims what comes next.
        const more: JobSnapshot[] = [];
        for (let i = 0; i < 5; i++) more.push(await lh.submit('f.echo', { mark: `after-${i}` }));
        for (const j of more) assert.equal((await ended(j.id)).status, 'succeeded');

        // 4. Shutdown: one hand-back refused. The job fails with the store's reason, the other
        // goes back to the queue, and stop() completes.
        const blocked = [await lh.submit('f.block', null), await lh.submit('f.block', null)];
        await until(async () => ((await Promise.all(blocked.map((b) => stateOf(b.id)))).every((s) => s.status === 'running') ? true : undefined), 'blocked jobs running');
        faults.refuseHandBack.add((blocked[0] as JobSnapshot).id);
        const stopped = await Promise.race([worker.stop({ drainMs: 100 }).then(() => true), new Promise((r) => setTimeout(() => r(false), 15_000).unref())]);
        assert.equal(stopped, true, 'stop() completed');
        const [refusedBack, handedBack] = await Promise.all(blocked.map((b) => stateOf(b.id)));
        assert.equal(refusedBack?.status, 'failed');
        assert.equal(refusedBack?.error?.code, OUTCOME_REFUSED);
        assert.match(refusedBack?.error?.message ?? '', /^the store refused to record this attempt's outcome \(retrying\): /);
        // Handed back due at once: 'retrying', or already 'queued' if the sweeper promoted it.
        assert.ok(['retrying', 'queued'].includes(handedBack?.status ?? ''), `handed back, not ${handedBack?.status}`);
      } finally {
        await lh.close({ drainMs: 0 });
        await real.close();
      }
    });
  });
}
