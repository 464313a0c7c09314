/**
 * Retention and erasure through a real Longhaul instance, on SQLite and on PostgreSQL: the
 * sweeper deletes ended jobs whose period is over with every dependent row and their files on
 * disk (counted per table and per file before and after); `0` deletes on completion; a task's
 * own period overrides the instance's; a purge erases a tenant's ended jobs and reports the open
 * ones it left; idempotency keys name a new job after failure, after cancel and after expiry.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { FatalError } from '../../src/core/errors.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul, type OpenOptions } from '../../src/longhaul.js';
import { FeedHub } from '../../src/server/hub.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { INTERNAL_TENANT } from '../../src/webhooks/service.js';
import { settled } from '../support/jobs.js';
import { createTestDatabase } from '../support/postgres.js';

/**
 * The webhook targets saved below make the instance enqueue delivery jobs (internal tenant, to
 * an unreachable host: they stay open); the job counts leave them out.
 */
const OURS = `WHERE tenant <> '${INTERNAL_TENANT}'`;
/** The same for attempt rows: those of internal jobs are left out, those of deleted jobs are counted. */
const OUR_ATTEMPTS = (jobs: string) => `WHERE job_id NOT IN (SELECT id FROM ${jobs} WHERE tenant = '${INTERNAL_TENANT}')`;
const where = (table: string, jobs: string) => (table === 'jobs' ? OURS : table === 'job_attempts' ? OUR_ATTEMPTS(jobs) : '');

const TABLES = ['jobs', 'job_progress', 'job_results', 'job_webhooks', 'webhook_deliveries', 'job_signals', 'job_attempts'] as const;
type Counts = Record<(typeof TABLES)[number], number> & { files: number };

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'longhaul-retention-'));
  dirs.push(d);
  return d;
}
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function filesUnder(dir: string): number {
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).length;
}

const tasks = [
  defineTask({
    type: 't.files',
    async run(_input, ctx) {
      ctx.progress({ percent: 50, message: 'half' });
      await ctx.results.write('out.txt', 'result\n');
      await ctx.results.write('more.txt', 'more\n');
      return { ok: true };
    },
  }),
  defineTask({
    type: 't.fail',
    maxAttempts: 1,
    async run() {
      throw new FatalError('broken on purpose', { code: 'BROKEN' });
    },
  }),
  defineTask({ type: 't.keep', retention: { succeeded: 'forever' }, async run() {
    return 1;
  } }),
  defineTask({ type: 't.idle', async run() {
    return 1;
  } }),
  defineTask({
    type: 't.gated',
    async run(input: { gate: string }, ctx) {
      ctx.progress({ percent: 40, message: 'waiting for the gate' });
      await new Promise<void>((resolve) => gates.set(input.gate, resolve));
      return { done: input.gate };
    },
  }),
];

/** Handlers of t.gated waiting to be let go, by gate name. */
const gates = new Map<string, () => void>();

interface Backend {
  name: string;
  open(): Promise<{ store: Store; count: (table: string) => Promise<number> }>;
}

const pgDb = await createTestDatabase();
after(() => pgDb.drop());
let schemas = 0;

const backends: Backend[] = [
  {
    name: 'sqlite',
    async open() {
      const path = join(tempDir(), 'jobs.db');
      const store = new SqliteStore({ path });
      const reader = new DatabaseSync(path);
      return {
        store,
        count: async (table) => Number((reader.prepare(`SELECT count(*) AS n FROM ${table} ${where(table, 'jobs')}`).get() as { n: number }).n),
      };
    },
  },
  {
    name: 'postgres',
    async open() {
      const schema = `ret${++schemas}`;
      const store = new PostgresStore({ connectionString: pgDb.url, schema });
      const table = (t: string) => (t === 'job_progress' ? 'progress' : t);
      return {
        store,
        count: async (t) => Number((await store.pool.query(`SELECT count(*)::integer AS n FROM "${schema}".${table(t)} ${where(t, `"${schema}".jobs`)}`)).rows[0].n),
      };
    },
  },
];

for (const backend of backends) {
  describe(`retention and erasure: ${backend.name}`, () => {
    async function openInstance(options: Partial<OpenOptions> = {}) {
      const { store, count } = await backend.open();
      const blobDir = tempDir();
      const lh = await Longhaul.open({ store, tasks, logger: pino({ level: 'silent' }), files: { blobs: await FsBlobStore.open(blobDir) }, ...options });
      const counts = async (): Promise<Counts> => {
        const out = { files: filesUnder(blobDir) } as Counts;
        for (const t of TABLES) out[t] = await count(t);
        return out;
      };
      return { lh, store, counts };
    }

    /** A job run to its end, then given a webhook target, a delivery log entry and (before it ran) a kept signal. */
    async function endedJob(lh: Longhaul, store: Store, type: string, options: { tenant?: string } = {}) {
      const job = await lh.submit(type, {}, { ...options, runAt: new Date(Date.now() + 60_000) });
      const sent = await store.sendSignal({ id: job.id, name: 'nudge', payload: 1, at: Date.now() });
      assert.equal(sent.kind, 'accepted');
      await store.saveWebhook({ jobId: job.id, url: 'https://example.test/hook', secret: null });
      // Make it due now (the manual route: a retry of a pending job is not allowed, so promote through the store).
      await store.promoteDue({ now: Date.now() + 120_000, limit: 100 });
      const end = await settled(lh, job.id, 15_000);
      await store.recordWebhookDelivery({
        jobId: job.id,
        deliveryId: job.id,
        eventType: `job.${end.status}`,
        attempt: 1,
        at: Date.now(),
        url: 'https://example.test/hook',
        status: 200,
        ok: true,
        error: null,
        durationMs: 1,
        responseSnippet: null,
      });
      return end;
    }

    it('deletes ended jobs past their period with every row and file; a task keeping forever and an open job stay', async () => {
      const { lh, store, counts } = await openInstance({ retention: { succeeded: 0, failed: 0 } });
      try {
        // No sweeper until the rows are counted: it would delete the jobs as they end.
        await lh.startWorker({ concurrency: 4, sweeper: false });
        const ok = await endedJob(lh, store, 't.files');
        const failed = await endedJob(lh, store, 't.fail');
        const kept = await endedJob(lh, store, 't.keep');
        const open = await lh.submit('t.idle', {}, { runAt: new Date(Date.now() + 3_600_000) });
        assert.equal(ok.status, 'succeeded');
        assert.equal(failed.status, 'failed');
        const before = await counts();
        // The failed job's attempt is in the attempt history.
        assert.deepEqual(before, { jobs: 4, job_progress: 1, job_results: 2, job_webhooks: 3, webhook_deliveries: 3, job_signals: 3, job_attempts: 1, files: 2 });
        const sweeper = lh.startSweeper();
        await sweeper.stop();
        const report = await sweeper.sweep();
        // Ours, plus the ended webhook delivery jobs (internal tenant) the targets above caused.
        assert.ok(report.deleted >= 2, `deleted ${report.deleted}`);
        const afterSweep = await counts();
        assert.deepEqual(afterSweep, { jobs: 2, job_progress: 0, job_results: 0, webhook_deliveries: 1, job_webhooks: 1, job_signals: 1, job_attempts: 0, files: 0 });
        assert.equal(await lh.get(ok.id), null);
        assert.equal(await lh.get(failed.id), null);
        assert.equal((await lh.get(kept.id))?.status, 'succeeded', 'the task keeps its jobs forever');
        assert.equal((await lh.get(open.id))?.status, 'pending');
      } finally {
        await lh.close();
      }
    });

    it('retention 0 deletes a job right after it ends in this process, without waiting for a sweep', async () => {
      // A sweep interval of a minute: only the on-completion path can delete within the test.
      const { lh, counts } = await openInstance({ retention: { succeeded: 0 }, sweepIntervalMs: 60_000 });
      try {
        lh.startSweeper();
        await lh.startWorker();
        const job = await lh.submit('t.files', {});
        const deadline = Date.now() + 10_000;
        while ((await lh.get(job.id)) !== null) {
          assert.ok(Date.now() < deadline, 'the job was not deleted on completion');
          await new Promise((r) => setTimeout(r, 20));
        }
        const left = await counts();
        assert.equal(left.jobs, 0);
        assert.equal(left.files, 0);
        assert.equal(left.job_results, 0);
      } finally {
        await lh.close();
      }
    });

    it('retention 0: jobs deleted by the write that ended them start no webhook dispatch; an ended job with a webhook does, at once', async () => {
      // A sweep interval of a minute: after its first pass, the sweeper reads no webhook events itself.
      const { lh, store } = await openInstance({ retention: { succeeded: 0 }, sweepIntervalMs: 60_000 });
      try {
        let reads = 0;
        const read = store.pendingWebhookEvents.bind(store);
        store.pendingWebhookEvents = (p) => {
          reads++;
          return read(p);
        };
        lh.startSweeper();
        await lh.startWorker({ sweeper: false });
        await new Promise((r) => setTimeout(r, 300));
        const before = reads;
        const jobs = await Promise.all(Array.from({ length: 20 }, () => lh.submit('t.idle', {})));
        for (const job of jobs) {
          const deadline = Date.now() + 10_000;
          while ((await lh.get(job.id)) !== null) {
            assert.ok(Date.now() < deadline, 'the job was not deleted on completion');
            await new Promise((r) => setTimeout(r, 10));
          }
        }
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(reads, before, 'no webhook dispatch for jobs that could have none');
        // A webhook target saved while the job runs (submit checks that a target's host resolves).
        const gate = `g-${Date.now()}`;
        const hooked = await lh.submit('t.gated', { gate });
        for (const until = Date.now() + 5_000; !gates.has(gate); await new Promise((r) => setTimeout(r, 10))) assert.ok(Date.now() < until, 'the gated job did not start');
        await store.saveWebhook({ jobId: hooked.id, url: 'https://example.test/hook', secret: null });
        assert.equal(reads, before);
        const last = lh.wait(hooked.id);
        (gates.get(gate) as () => void)();
        const deadline = Date.now() + 5_000;
        while (reads === before) {
          assert.ok(Date.now() < deadline, 'the webhook of the ended job was not dispatched');
          await new Promise((r) => setTimeout(r, 10));
        }
        assert.equal((await last).status, 'succeeded');
      } finally {
        await lh.close();
      }
    });

    it("retention 0: the worker's own write deletes the job with every row it owns; a watcher still gets its last snapshot; files are left to the eraser", async () => {
      // No sweeper, no on-completion pass: only the worker's write can delete.
      const { lh, store, counts } = await openInstance({ retention: { succeeded: 0 } });
      try {
        await lh.startWorker({ sweeper: false, progressIntervalMs: 10 });
        const feed = new FeedHub(lh);
        const seen: JobSnapshot[] = [];
        feed.subscribe('default', (f) => seen.push(f));
        const gate = `g-${Date.now()}`;
        const job = await lh.submit('t.gated', { gate }, { runAt: new Date(Date.now() + 60_000) });
        assert.equal((await store.sendSignal({ id: job.id, name: 'nudge', payload: 1, at: Date.now() })).kind, 'accepted');
        await store.promoteDue({ now: Date.now() + 120_000, limit: 100 });
        const deadline = Date.now() + 10_000;
        while (!gates.has(gate) || (await counts()).job_progress === 0) {
          assert.ok(Date.now() < deadline, 'the job did not start and report progress');
          await new Promise((r) => setTimeout(r, 10));
        }
        const before = await counts();
        assert.deepEqual(before, { jobs: 1, job_progress: 1, job_results: 0, job_webhooks: 0, webhook_deliveries: 0, job_signals: 1, job_attempts: 0, files: 0 });
        const last = lh.wait(job.id);
        (gates.get(gate) as () => void)();
        const end = await last;
        assert.equal(end.status, 'succeeded');
        assert.deepEqual(end.result, { done: gate });
        // The tenant-wide feed (GET /v1/events) sent its end too.
        const fed = () => seen.find((f) => f.id === job.id && f.status === 'succeeded');
        for (const until = Date.now() + 5_000; !fed(); ) {
          assert.ok(Date.now() < until, 'the feed did not send the end of the deleted job');
          await new Promise((r) => setTimeout(r, 10));
        }
        assert.deepEqual(fed()?.result, { done: gate });
        feed.close();
        assert.deepEqual(await counts(), { jobs: 0, job_progress: 0, job_results: 0, job_webhooks: 0, webhook_deliveries: 0, job_signals: 0, job_attempts: 0, files: 0 });
        assert.equal(await lh.get(job.id), null);
        // A job with result files ends as usual: its files can only go through the eraser (blobs first).
        const withFiles = await lh.submit('t.files', {});
        const ended = await settled(lh, withFiles.id, 10_000);
        assert.equal(ended.status, 'succeeded');
        const kept = await counts();
        assert.equal(kept.jobs, 1);
        assert.equal(kept.job_results, 2);
        assert.equal(kept.files, 2);
        const sweeper = lh.startSweeper();
        await sweeper.stop();
        assert.equal((await sweeper.sweep()).deleted, 1);
        assert.deepEqual(await counts(), { jobs: 0, job_progress: 0, job_results: 0, job_webhooks: 0, webhook_deliveries: 0, job_signals: 0, job_attempts: 0, files: 0 });
      } finally {
        await lh.close();
      }
    });

    it('keeps everything without a retention policy (the default)', async () => {
      const { lh, store, counts } = await openInstance();
      try {
        await lh.startWorker();
        await endedJob(lh, store, 't.files');
        const before = await counts();
        const sweeper = lh.startSweeper();
        await sweeper.stop();
        assert.equal((await sweeper.sweep()).deleted, 0);
        assert.deepEqual(await counts(), before);
      } finally {
        await lh.close();
      }
    });

    it("purges a tenant's ended jobs with counts, skips its open jobs, leaves other tenants, refuses an unfiltered purge", async () => {
      const { lh, store, counts } = await openInstance();
      try {
        await lh.startWorker({ concurrency: 4 });
        await endedJob(lh, store, 't.files', { tenant: 'gone' });
        await endedJob(lh, store, 't.fail', { tenant: 'gone' });
        const other = await endedJob(lh, store, 't.files', { tenant: 'stays' });
        const open = await lh.submit('t.idle', {}, { tenant: 'gone', runAt: new Date(Date.now() + 3_600_000) });
        await assert.rejects(lh.purge({}), /needs a filter/);
        await assert.rejects(lh.purge({ tenant: 'gone', states: ['running'] }), /only ended jobs are purged/);
        const out = await lh.purge({ tenant: 'gone' });
        assert.deepEqual(out, {
          deleted: { jobs: 2, progress: 1, resultFiles: 2, webhooks: 2, deliveries: 2, signals: 2, attempts: 1, files: 2 },
          skipped: 1,
        });
        const left = await counts();
        assert.equal(left.jobs, 2);
        assert.equal(left.files, 2, "the other tenant's files");
        assert.equal(left.job_attempts, 0, "the failed job's attempt went with it");
        assert.equal((await lh.get(other.id))?.status, 'succeeded');
        assert.equal((await lh.get(open.id))?.status, 'pending');
        assert.deepEqual((await lh.purge({ tenant: 'gone' })).deleted.jobs, 0);
      } finally {
        await lh.close();
      }
    });

    it('an idempotency key names a new job after failure, after cancel, and after its lifetime', async () => {
      const { lh } = await openInstance({ idempotencyTtlMs: 300 });
      try {
        await lh.startWorker();
        const a = await lh.enqueue('t.fail', {}, { idempotencyKey: 'pay-1' });
        assert.equal((await settled(lh, a.job.id, 15_000)).status, 'failed');
        const a2 = await lh.enqueue('t.fail', {}, { idempotencyKey: 'pay-1' });
        assert.equal(a2.replayed, false, 'after failure: a new job');
        assert.notEqual(a2.job.id, a.job.id);
        await settled(lh, a2.job.id, 15_000);

        const later = { idempotencyKey: 'pay-2', delayMs: 3_600_000 };
        const c = await lh.enqueue('t.idle', {}, later);
        await lh.cancel(c.job.id);
        const c2 = await lh.enqueue('t.idle', {}, later);
        assert.equal(c2.replayed, false, 'after cancel: a new job');
        assert.notEqual(c2.job.id, c.job.id);
        const same = await lh.enqueue('t.idle', {}, later);
        assert.equal(same.replayed, true, 'a pending job keeps its key within its lifetime');
        assert.equal(same.job.id, c2.job.id);
        await new Promise((r) => setTimeout(r, 350));
        const c3 = await lh.enqueue('t.idle', {}, later);
        assert.equal(c3.replayed, false, 'after the lifetime: a new job');
        assert.notEqual(c3.job.id, c2.job.id);
      } finally {
        await lh.close();
      }
    });
  });
}
