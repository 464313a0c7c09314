/**
 * The upgrade path of a store's schema, store-neutral (issue 35): a database left at an older
 * schema version, holding jobs in every state, is migrated to the latest, and every job then
 * ends as it should. Each store's test calls it with a way to make its databases:
 *
 *   runUpgradeScenario({
 *     name: 'sqlite',
 *     latest: SqliteStore.latestVersion,
 *     newDatabase: async () => ({ open: async () => new SqliteStore({ path }), drop: async () => rmSync(dir, ...) }),
 *   });
 *
 * For every start version from 1 to latest - 1 (only 1 while 0001 is the only file; migrating
 * is then a no-op, and the scenario still runs), on a new database:
 * 1. At the start version (store.migrate(from); Longhaul instances over a store held at that
 *    version): queued, pending-delayed, cancelled, retrying, failed (a dead letter) and expired
 *    jobs; a succeeded job with a result and a result file; a job with a webhook; a task type
 *    with retention 0; a workflow parent waiting for its children (one ended, two waiting for a
 *    signal); a sleeping job; a job waiting for a signal; a schedule; two running jobs claimed through the store contract, one
 *    whose worker still holds its lease and one whose worker is gone. Every state of JOB_STATES
 *    is checked to be there.
 * 2. A new store over the database migrates: { from, to: latest }.
 * 3. A Longhaul instance over it (worker, sweeper) finishes everything: the open jobs run to
 *    their end, the sleep wakes, the signal is delivered and consumed, the children's end wakes
 *    the parent, the lease holder heartbeats and completes, the lost worker's job is reaped and
 *    run again, the webhook is delivered, the retention-0 job is deleted, the schedule fires,
 *    the dead letter and the cancelled job run again on retry, the result file is still there,
 *    the expired job stays expired; and the stats counters equal a count of the jobs.
 *
 * The rows at the old version are written by today's code (the store contract and Longhaul) on
 * the older schema. That holds while later files only add (tables, columns with defaults,
 * indexes, functions); a migration after which today's code can no longer write an older
 * schema must also give this scenario a way to write that version's rows.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { FatalError, RetryableError } from '../../src/core/errors.js';
import type { JobRecord } from '../../src/core/job.js';
import { JOB_STATES, type JobState } from '../../src/core/states.js';
import { succeed } from '../../src/core/transitions.js';
import { Longhaul } from '../../src/longhaul.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import { logOf, settled } from './jobs.js';
import { pollUntil } from './poll.js';
import { receiver } from './webhook-receiver.js';

export interface UpgradeDatabase {
  /** A new store over this database, not migrated (each call a new one; the scenario closes it). */
  open(): Promise<Store>;
  /** Removes the database once the scenario is done. */
  drop(): Promise<void>;
}

export interface UpgradeTarget {
  /** The store's name in the test titles. */
  name: string;
  /** The newest schema version this store's code has (its number of migration files). */
  latest: number;
  /** A new, empty database. */
  newDatabase(): Promise<UpgradeDatabase>;
}

/** How far in the future the jobs that must still be pending, retrying or asleep at the upgrade are due. */
const MARGIN_MS = 5_000;
const FINISH_MS = 30_000;
const quiet = pino({ level: 'silent' });

/** The start versions: each one before the latest, or 1 when it is the only one. */
export function startVersions(latest: number): number[] {
  return latest > 1 ? Array.from({ length: latest - 1 }, (_, i) => i + 1) : [1];
}

/** The store, except that migrate() goes to `version` and no further (what an older Longhaul did). */
function heldAt(store: Store, version: number): Store {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'migrate') return () => target.migrate(version);
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

export function runUpgradeScenario(target: UpgradeTarget): void {
  for (const from of startVersions(target.latest)) {
    describe(`upgrade on ${target.name}: a database at version ${from} with jobs in every state, migrated to ${target.latest}`, () => {
      const dir = mkdtempSync(join(tmpdir(), 'longhaul-upgrade-'));
      const hook = receiver((_req, res) => {
        res.writeHead(200);
        res.end();
      });
      const secret = generateWebhookSecret();
      let db: UpgradeDatabase;
      let hookUrl: string;
      const fixed = { value: false };
      const closing: Array<() => Promise<unknown>> = [];
      after(async () => {
        for (const close of closing.reverse()) await close().catch(() => undefined);
        await hook.close();
        await db?.drop();
        rmSync(dir, { recursive: true, force: true });
      });

      const tasks = {
        ok: defineTask({ type: 'up.ok', run: (input: unknown) => ({ n: (input as { n: number }).n }) }),
        child: defineTask({
          type: 'up.child',
          async run(input: unknown, ctx) {
            const { n, wait } = input as { n: number; wait: boolean };
            if (wait) await ctx.waitFor('go');
            return { square: n ** 2 };
          },
        }),
        parent: defineTask({
          type: 'up.parent',
          maxAttempts: 1,
          async run(input: unknown, ctx) {
            await ctx.spawn(
              (input as { children: number[] }).children.map((n) => ({ type: 'up.child', input: { n, wait: n > 1 } })),
              { failurePolicy: 'collect' },
            );
            let sum = 0;
            for await (const child of ctx.children) sum += (child.result as { square: number }).square;
            return { sum };
          },
        }),
        sleeper: defineTask({
          type: 'up.sleeper',
          async run(input: unknown, ctx) {
            await ctx.sleep((input as { ms: number }).ms);
            return 'woke';
          },
        }),
        approval: defineTask({ type: 'up.approval', run: (_input: unknown, ctx) => ctx.waitFor<{ by: string }>('approve') }),
        files: defineTask({
          type: 'up.files',
          async run(_input: unknown, ctx) {
            await ctx.results.write('out.txt', 'hello');
            return { written: true };
          },
        }),
        fatal: defineTask({
          type: 'up.fatal',
          maxAttempts: 1,
          run: () => {
            if (!fixed.value) throw new FatalError('broken on purpose', { code: 'BROKEN' });
            return 'fixed';
          },
        }),
        retry: defineTask({
          type: 'up.retry',
          maxAttempts: 3,
          run: (_input: unknown, ctx) => {
            if (ctx.attempt === 1) throw new RetryableError('later', { delayMs: MARGIN_MS });
            return { attempt: ctx.attempt };
          },
        }),
        expiring: defineTask({ type: 'up.expiring', resultTtlMs: 100, run: () => 'short-lived' }),
        held: defineTask({ type: 'up.held', heartbeatTimeoutMs: 60_000, run: () => 'run by a worker' }),
        orphan: defineTask({ type: 'up.orphan', heartbeatIntervalMs: 100, heartbeatTimeoutMs: 500, run: (_input: unknown, ctx) => ({ attempt: ctx.attempt }) }),
        zero: defineTask({ type: 'up.zero', retention: { succeeded: 0 }, run: () => 'gone soon' }),
      };
      const all = Object.values(tasks);
      /** What runs at the old version: the rest stays queued until the upgrade. */
      const runAtOld = [tasks.parent, tasks.child, tasks.sleeper, tasks.approval, tasks.files, tasks.fatal, tasks.retry, tasks.expiring];

      let blobs: FsBlobStore;
      async function instance(store: Store, which: typeof all): Promise<Longhaul> {
        const lh = await Longhaul.open({
          store,
          tasks: which,
          logger: quiet,
          channel: false,
          sweepIntervalMs: 50,
          files: { blobs, urlSigningSecret: 'upgrade-scenario-url-signing-secret' },
          webhooks: { secret, allowlist: '127.0.0.1', retrySchedule: [100, 100] },
        });
        closing.push(() => lh.close({ drainMs: 0 }));
        return lh;
      }
      /** A store, closed by the scenario's end unless closed before (by `closeStore`). */
      const closed = new WeakSet<Store>();
      async function openStore(): Promise<Store> {
        const store = await db.open();
        closing.push(() => closeStore(store));
        return store;
      }
      async function closeStore(store: Store): Promise<void> {
        if (closed.has(store)) return;
        closed.add(store);
        await store.close();
      }

      const ids: Record<string, string> = {};
      let holder: JobRecord;
      let pendingRunAt = 0;
      let store: Store;
      let lh: Longhaul;

      it(`at version ${from}: jobs in every state`, async () => {
        db = await target.newDatabase();
        hookUrl = await hook.start();
        blobs = await FsBlobStore.open(join(dir, 'blobs'));
        const old = await openStore();
        assert.deepEqual(await old.migrate(from), { from: 0, to: from });
        const submitter = await instance(heldAt(old, from), all);
        const runnerStore = await openStore();
        const runner = await instance(heldAt(runnerStore, from), runAtOld);

        ids.queued = (await submitter.submit('up.ok', { n: 1 })).id;
        const pending = await submitter.submit('up.ok', { n: 2 }, { delayMs: MARGIN_MS });
        ids.pending = pending.id;
        pendingRunAt = Date.parse(pending.runAt);
        ids.webhook = (await submitter.submit('up.ok', { n: 3 }, { webhook: { url: `${hookUrl}/hook` } })).id;
        ids.cancelled = (await submitter.submit('up.ok', { n: 4 })).id;
        await submitter.cancel(ids.cancelled);
        ids.zero = (await submitter.submit('up.zero')).id;
        ids.held = (await submitter.submit('up.held')).id;
        ids.orphan = (await submitter.submit('up.orphan')).id;
        ids.parent = (await submitter.submit('up.parent', { children: [1, 2, 3] })).id;
        ids.sleeper = (await submitter.submit('up.sleeper', { ms: MARGIN_MS })).id;
        ids.approval = (await submitter.submit('up.approval')).id;
        ids.files = (await submitter.submit('up.files')).id;
        ids.fatal = (await submitter.submit('up.fatal')).id;
        ids.retry = (await submitter.submit('up.retry')).id;
        ids.expiring = (await submitter.submit('up.expiring')).id;
        await submitter.schedules.create({ name: 'minutely', task: 'up.ok', cron: '* * * * *', input: { n: 5 } });

        await runner.startWorker({ concurrency: 8, pollIntervalMs: 20 });
        const reach = async (name: string, state: JobState) =>
          pollUntil(async () => ((await old.getJob({ id: ids[name] as string }))?.state === state ? true : undefined), `${name} to be ${state} at version ${from}`, FINISH_MS);
        await reach('parent', 'waiting');
        await pollUntil(
          async () => {
            const states = (await old.listJobs({ parentId: ids.parent as string, limit: 10 })).items.map((c) => c.state).sort();
            return states.join() === 'succeeded,waiting,waiting' ? true : undefined;
          },
          'the children to be succeeded, waiting, waiting',
          FINISH_MS,
        );
        await reach('sleeper', 'waiting');
        await reach('approval', 'waiting');
        await reach('files', 'succeeded');
        await reach('fatal', 'failed');
        await reach('retry', 'retrying');
        await reach('expiring', 'expired');
        // The old processes stop (their connections, and any lock they held, go with them).
        await runner.close({ drainMs: 0 });
        await closeStore(runnerStore);
        await submitter.close({ drainMs: 0 });

        // Two running jobs, claimed as a worker does: one whose worker lives on, one whose worker is gone.
        [holder] = (await old.claimJobs({ workerId: 'holder', types: [{ type: 'up.held' }], limit: 1, now: Date.now() })) as [JobRecord];
        assert.equal(holder?.id, ids.held);
        const [orphan] = await old.claimJobs({ workerId: 'vanished', types: [{ type: 'up.orphan' }], limit: 1, now: Date.now() });
        assert.equal(orphan?.id, ids.orphan);

        const children = (await old.listJobs({ parentId: ids.parent, limit: 10 })).items;
        const waitingChildren = children.filter((c) => c.state === 'waiting');
        assert.equal(waitingChildren.length, 2, 'two children wait for a signal, one ended');
        ids.child2 = waitingChildren[0]?.id as string;
        ids.child3 = waitingChildren[1]?.id as string;
        const states = new Set<JobState>();
        for (const id of Object.values(ids)) states.add((await old.getJob({ id }))?.state as JobState);
        assert.deepEqual([...states].sort(), [...JOB_STATES].sort(), 'every state is there');
        assert.equal((await old.getJob({ id: ids.pending }))?.state, 'pending');
        assert.equal((await old.getJob({ id: ids.cancelled }))?.state, 'cancelled');
        assert.equal((await old.getJob({ id: ids.queued }))?.state, 'queued');
        assert.equal((await old.getJob({ id: ids.zero }))?.state, 'queued');
        await closeStore(old);
      });

      it(`migrates from ${from} to ${target.latest}`, async () => {
        store = await openStore();
        assert.deepEqual(await store.migrate(), { from, to: target.latest });
        lh = await instance(store, all);
        await lh.startWorker({ concurrency: 8, pollIntervalMs: 20 });
      });

      it('the lease holder heartbeats and completes its job', async () => {
        const now = Date.now();
        assert.deepEqual(
          (await store.heartbeat({ items: [{ id: holder.id, lease: holder.lease }], now })).map((h) => h.ok),
          [true],
        );
        assert.deepEqual(await store.transition({ items: [succeed(holder, 'holder', now, { by: 'holder' }, 60_000)] }), [true]);
        const done = await lh.get(holder.id);
        assert.equal(done?.status, 'succeeded');
        assert.deepEqual(done?.result, { by: 'holder' });
      });

      it("the lost worker's job is reaped and runs again", async () => {
        const done = await settled(lh, ids.orphan as string, FINISH_MS);
        assert.equal(done.status, 'succeeded');
        assert.deepEqual(done.result, { attempt: 2 });
        assert.ok((await logOf(lh, ids.orphan as string)).includes('running>retrying:heartbeat lost; requeued'));
        assert.ok((await store.sweepHealth({ reapedSince: Date.now() - 120_000 })).zombiesReaped >= 1, 'the reap is counted');
      });

      it('queued, pending-delayed and retrying jobs run to their end', async () => {
        assert.deepEqual((await settled(lh, ids.queued as string, FINISH_MS)).result, { n: 1 });
        const pending = await settled(lh, ids.pending as string, FINISH_MS);
        assert.deepEqual(pending.result, { n: 2 });
        assert.ok(Date.parse(pending.startedAt as string) >= pendingRunAt, 'not before its time');
        const retried = await settled(lh, ids.retry as string, FINISH_MS);
        assert.deepEqual([retried.status, retried.result], ['succeeded', { attempt: 2 }]);
      });

      it('the sleeping job wakes; the waiting job takes its signal', async () => {
        const slept = await settled(lh, ids.sleeper as string, FINISH_MS);
        assert.deepEqual([slept.status, slept.result], ['succeeded', 'woke']);
        assert.ok((await logOf(lh, ids.sleeper as string)).includes('waiting>queued:wait over'));
        assert.equal((await lh.get(ids.approval as string))?.status, 'waiting');
        assert.equal((await lh.signal(ids.approval as string, 'approve', { by: 'alice' })).resumed, true);
        const approved = await settled(lh, ids.approval as string, FINISH_MS);
        assert.deepEqual([approved.status, approved.result], ['succeeded', { by: 'alice' }]);
      });

      it("the waiting parent's children take their signals, and their end wakes it", async () => {
        for (const child of [ids.child2, ids.child3]) assert.equal((await lh.signal(child as string, 'go')).resumed, true);
        const done = await settled(lh, ids.parent as string, FINISH_MS);
        assert.deepEqual([done.status, done.result], ['succeeded', { sum: 14 }]);
        assert.equal(done.children?.byState.succeeded, 3);
        assert.ok((await logOf(lh, ids.parent as string)).includes('waiting>queued:children done'));
      });

      it('the webhook is delivered; the retention-0 job is deleted after its end', async () => {
        assert.equal((await settled(lh, ids.webhook as string, FINISH_MS)).status, 'succeeded');
        const deliveries = await pollUntil(async () => {
          const d = await lh.webhookDeliveries(ids.webhook as string);
          return d.some((x) => x.ok) ? d : undefined;
        }, 'the webhook delivery');
        assert.equal(deliveries.filter((d) => d.ok).length, 1);
        assert.ok(hook.received.some((r) => r.path === '/hook' && r.body.includes(ids.webhook as string)));
        await pollUntil(async () => ((await lh.get(ids.zero as string)) === null ? true : undefined), 'the retention-0 job to be deleted', FINISH_MS);
      });

      it('the schedule fires', async () => {
        const report = await lh.schedules.tick(Date.now() + 120_000);
        assert.ok(report.fired + report.lost >= 1, JSON.stringify(report));
        const job = await pollUntil(async () => {
          const page = await lh.list({ type: 'up.ok', limit: 100 });
          return page.items.find((j) => j.metadata?.schedule === 'minutely' && j.status === 'succeeded');
        }, 'a run of the schedule to succeed', FINISH_MS);
        assert.deepEqual(job.result, { n: 5 });
      });

      it('the result and its file are kept; the expired job stays expired', async () => {
        const files = await lh.get(ids.files as string);
        assert.deepEqual([files?.status, files?.result], ['succeeded', { written: true }]);
        const stored = await lh.resultFiles(ids.files as string, null);
        assert.deepEqual(
          stored?.files.map((f) => [f.name, f.size]),
          [['out.txt', 5]],
        );
        await lh.countDownload(ids.files as string, 'out.txt');
        assert.equal((await store.listResults({ ids: [ids.files as string] })).get(ids.files as string)?.[0]?.downloads, 1);
        const expired = await lh.get(ids.expiring as string);
        assert.deepEqual([expired?.status, expired?.result], ['expired', null]);
      });

      it('the dead letter and the cancelled job run again on retry', async () => {
        const groups = await lh.deadLetterGroups({});
        assert.ok(groups.some((g) => g.type === 'up.fatal' && g.code === 'BROKEN' && g.count === 1), JSON.stringify(groups));
        fixed.value = true;
        await lh.retry(ids.fatal as string);
        const fatal = await settled(lh, ids.fatal as string, FINISH_MS);
        assert.deepEqual([fatal.status, fatal.result], ['succeeded', 'fixed']);
        assert.equal((await lh.get(ids.cancelled as string))?.status, 'cancelled');
        await lh.retry(ids.cancelled as string);
        assert.deepEqual((await settled(lh, ids.cancelled as string, FINISH_MS)).result, { n: 4 });
      });

      it('the stats counters equal a count of the jobs', async () => {
        const counted = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
        let cursor: string | null = null;
        do {
          const page = await store.listJobs({ limit: 500, cursor });
          for (const j of page.items) counted[j.state]++;
          cursor = page.nextCursor;
        } while (cursor);
        assert.deepEqual(await store.countByState({}), counted);
      });
    });
  }
}
