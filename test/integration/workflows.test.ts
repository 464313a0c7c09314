/**
 * Workflows through the library, on SQLite and PostgreSQL: durable sleep, signals (sent before
 * and during the wait, and a wait that times out), fan-out and fan-in (collect and fail-fast,
 * the children's results, cancelling a parent), pipelines (a stage retried alone, its output
 * kept) and sagas (compensation in reverse order). Crashes and several processes are in
 * test/e2e/workflow-processes.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { FatalError, RetryableError, WaitTimeoutError } from '../../src/core/errors.js';
import { requestCancel } from '../../src/core/transitions.js';
import { Longhaul } from '../../src/longhaul.js';
import { defineTask } from '../../src/task-api/define.js';
import { pollUntil as until } from '../support/poll.js';
import { logOf, settled } from '../support/jobs.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const runs = new Map<string, number>();
const count = (key: string) => runs.set(key, (runs.get(key) ?? 0) + 1);
const order: string[] = [];
const gates = new Map<string, () => void>();

const tasks = [
  defineTask({
    type: 'wf.sleeper',
    async run(input: unknown, ctx) {
      const { tag, ms } = input as { tag: string; ms: number };
      count(`${tag}:before`);
      await ctx.sleep(ms);
      count(`${tag}:after`);
      return { slept: ms };
    },
  }),
  defineTask({
    type: 'wf.approval',
    async run(input: unknown, ctx) {
      const { tag, timeoutMs, gate } = input as { tag: string; timeoutMs?: number; gate?: boolean };
      const prepared = await ctx.stage('prepare', () => {
        count(`${tag}:prepare`);
        return { at: 1 };
      });
      if (gate) await new Promise<void>((resolve) => gates.set(tag, resolve));
      try {
        const approval = await ctx.waitFor<{ by: string }>('approval', timeoutMs === undefined ? {} : { timeoutMs });
        return { prepared, approval };
      } catch (err) {
        if (err instanceof WaitTimeoutError) return { prepared, timedOut: err.code };
        throw err;
      }
    },
  }),
  defineTask({
    type: 'wf.child',
    maxAttempts: 1,
    async run(input: unknown, ctx) {
      const { n, fail, holdMs } = input as { n: number; fail?: boolean; holdMs?: number };
      if (holdMs) {
        await new Promise<void>((resolve, reject) => {
          const t = setTimeout(resolve, holdMs);
          ctx.signal.addEventListener('abort', () => {
            clearTimeout(t);
            reject(ctx.signal.reason);
          });
        });
      }
      if (fail) throw new FatalError(`child ${n} failed`, { code: 'CHILD_BROKE' });
      return { square: n * n };
    },
  }),
  defineTask({
    type: 'wf.parent',
    maxAttempts: 1,
    async run(input: unknown, ctx) {
      const { tag, children, policy } = input as { tag: string; children: Array<{ n: number; fail?: boolean; holdMs?: number }>; policy: 'fail-fast' | 'collect' };
      count(`${tag}:parent`);
      const summary = await ctx.spawn(
        children.map((c) => ({ type: 'wf.child', input: c })),
        { failurePolicy: policy },
      );
      let sum = 0;
      const errors: string[] = [];
      for await (const child of ctx.children) {
        if (child.status === 'succeeded') sum += (child.result as { square: number }).square;
        else errors.push(child.error?.code ?? '?');
      }
      return { summary: { total: summary.total, succeeded: summary.succeeded, failed: summary.failed }, sum, errors: errors.sort() };
    },
  }),
  defineTask({
    type: 'wf.pipeline',
    maxAttempts: 1,
    backoff: { baseMs: 10, maxMs: 20 },
    stages: [
      {
        name: 'extract',
        weight: 1,
        run: (input: unknown) => {
          count(`${(input as { tag: string }).tag}:extract`);
          return { rows: 3 };
        },
      },
      {
        name: 'transform',
        weight: 3,
        maxAttempts: 3,
        run: async (input: unknown, ctx, previous: { rows: number }) => {
          const tag = (input as { tag: string }).tag;
          count(`${tag}:transform`);
          ctx.progress(50);
          if ((runs.get(`${tag}:transform`) ?? 0) < 2) throw new RetryableError('transient');
          await new Promise((resolve) => setTimeout(resolve, 400)); // long enough for a watcher to see 50 %
          return { rows: previous.rows * 2 };
        },
      },
      { name: 'load', run: (_input: unknown, _ctx, previous: { rows: number }) => ({ loaded: previous.rows }) },
    ],
  }),
  defineTask({
    type: 'wf.stage-ctx',
    maxAttempts: 1,
    stages: [
      {
        name: 'reads',
        run: (_input: unknown, ctx) => {
          ctx.log.info('a stage logs through the job ctx');
          const { progress, stage } = ctx;
          progress(10);
          return {
            idMatches: typeof ctx.job.id === 'string' && ctx.job.id.length === 36,
            attempt: ctx.attempt,
            checkpoint: ctx.checkpoint.value ?? null,
            children: typeof ctx.children.counts,
            results: typeof ctx.results.write,
            sameStage: stage === ctx.stage,
          };
        },
      },
    ],
  }),
  defineTask({
    type: 'wf.staged-waits',
    maxAttempts: 1,
    stages: [
      {
        name: 'first',
        run: (input: unknown) => {
          count(`${(input as { tag: string }).tag}:first`);
          return 1;
        },
      },
      {
        name: 'second',
        run: async (input: unknown, ctx, previous: number) => {
          const tag = (input as { tag: string }).tag;
          count(`${tag}:second`);
          await ctx.sleep(200);
          const approval = await ctx.waitFor<{ ok: boolean }>('go');
          return { previous, approval };
        },
      },
    ],
  }),
  defineTask({
    type: 'wf.saga-waits',
    maxAttempts: 1,
    steps: [
      { name: 'hold', run: () => ({ held: true }), compensate: () => void order.push('unhold') },
      {
        name: 'confirm',
        run: async (_input: unknown, ctx) => {
          const answer = await ctx.waitFor<{ confirmed: boolean }>('confirm');
          if (!answer.confirmed) throw new FatalError('not confirmed', { code: 'NOT_CONFIRMED' });
          return answer;
        },
      },
    ],
  }),
  defineTask({
    type: 'wf.late-spawn',
    maxAttempts: 1,
    async run(input: unknown, ctx) {
      const { tag } = input as { tag: string };
      await new Promise<void>((resolve) => gates.set(tag, resolve));
      await ctx.spawn([{ type: 'wf.child', input: { n: 1 } }], { failurePolicy: 'collect' });
      return 'spawned';
    },
  }),
  defineTask({
    type: 'wf.saga',
    maxAttempts: 2,
    steps: [
      { name: 'charge', run: () => ({ charge: 'c1' }), compensate: (_i: unknown, _c, out: { charge: string }) => void order.push(`refund ${out.charge}`) },
      { name: 'reserve', run: () => ({ reservation: 'r1' }), compensate: (_i: unknown, _c, out: { reservation: string }) => void order.push(`release ${out.reservation}`) },
      {
        name: 'ship',
        run: () => {
          throw new FatalError('no courier', { code: 'NO_COURIER' });
        },
      },
    ],
  }),
];

const dir = mkdtempSync(join(tmpdir(), 'longhaul-workflows-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, 'workflows.db') },
  {
    name: 'PostgreSQL',
    database: async () => {
      pgDb = await createTestDatabase('lh_workflows');
      return pgDb.url;
    },
  },
];

for (const target of TARGETS) {
  describe(`workflows on ${target.name}`, () => {
    let lh: Longhaul;
    const T = target.name;

    it('opens', async () => {
      lh = await Longhaul.open({ database: await target.database(), tasks, logger: pino({ level: 'silent' }), sweepIntervalMs: 50 });
      await lh.startWorker({ concurrency: 8, pollIntervalMs: 10 });
    });

    it('a durable sleep frees the worker, waits in `waiting`, and resumes without using an attempt', async () => {
      const job = await lh.submit('wf.sleeper', { tag: `${T}-s`, ms: 400 });
      const waiting = await until(async () => {
        const s = await lh.get(job.id);
        return s?.status === 'waiting' ? s : undefined;
      }, 'the job to wait');
      assert.deepEqual(waiting.waitingFor, { kind: 'sleep', name: null, failFast: false });
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded');
      assert.deepEqual(done.result, { slept: 400 });
      assert.equal(done.attempts, 1, 'waiting is not a failed attempt');
      assert.equal(runs.get(`${T}-s:before`), 2, 'the handler runs again from the top after the wait');
      assert.equal(runs.get(`${T}-s:after`), 1);
      const log = await logOf(lh, job.id);
      assert.ok(log.some((l) => l.startsWith('running>waiting:sleeping until')), log.join('\n'));
      assert.ok(log.includes('waiting>queued:wait over'), log.join('\n'));
      assert.ok(Date.parse(done.finishedAt as string) - Date.parse(done.createdAt) >= 400);
    });

    it('a signal wakes a job waiting for it; its body is what waitFor resolves to; a saved stage does not run again', async () => {
      const tag = `${T}-a`;
      const job = await lh.submit('wf.approval', { tag });
      await until(async () => ((await lh.get(job.id))?.status === 'waiting' ? true : undefined), 'the job to wait for the signal');
      const snap = await lh.get(job.id);
      assert.deepEqual(snap?.waitingFor, { kind: 'signal', name: 'approval', failFast: false });
      const sent = await lh.signal(job.id, 'approval', { by: 'alice' });
      assert.equal(sent.resumed, true);
      const done = await settled(lh, job.id, 10_000);
      assert.deepEqual(done.result, { prepared: { at: 1 }, approval: { by: 'alice' } });
      assert.equal(runs.get(`${tag}:prepare`), 1, 'ctx.stage ran once across both runs');
      assert.ok((await logOf(lh, job.id)).includes('waiting>queued:signal approval'));
    });

    it('a signal sent before the wait is kept for it', async () => {
      const tag = `${T}-early`;
      const job = await lh.submit('wf.approval', { tag, gate: true });
      await until(async () => (gates.has(tag) ? true : undefined), 'the handler to reach its gate');
      const sent = await lh.signal(job.id, 'approval', { by: 'bob' });
      assert.equal(sent.resumed, false, 'kept: the job is not waiting yet');
      gates.get(tag)?.();
      const done = await settled(lh, job.id, 10_000);
      assert.deepEqual(done.result, { prepared: { at: 1 }, approval: { by: 'bob' } });
      assert.ok(!(await logOf(lh, job.id)).some((l) => l.includes('>waiting')), 'the signal was there: no suspension');
    });

    it('a wait that times out throws WaitTimeoutError in the handler', async () => {
      const job = await lh.submit('wf.approval', { tag: `${T}-t`, timeoutMs: 300 });
      const done = await settled(lh, job.id, 10_000);
      assert.deepEqual(done.result, { prepared: { at: 1 }, timedOut: 'WAIT_TIMEOUT' });
      // The job is over: a late signal is refused.
      await assert.rejects(lh.signal(job.id, 'approval', {}), (err: Error & { code?: string }) => err.code === 'JOB_ENDED');
    });

    it('collect: the parent waits for all its children, then reads their results and errors', async () => {
      const children = Array.from({ length: 20 }, (_, n) => ({ n, fail: n % 7 === 3 }));
      // Spawned children wake idle workers at once (an idle SQLite worker does not see its own
      // connection's writes in its change poll).
      const wakes: number[] = [];
      const off = lh.bus.on('jobs:promoted', (e) => wakes.push(e.count));
      const parent = await lh.submit('wf.parent', { tag: `${T}-c`, children, policy: 'collect' });
      const done = await settled(lh, parent.id, 20_000);
      off();
      assert.ok(wakes.includes(20), `a wake for the 20 children; saw ${JSON.stringify(wakes)}`);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      const expectSum = children.filter((c) => !c.fail).reduce((a, c) => a + c.n * c.n, 0);
      assert.deepEqual(done.result, { summary: { total: 20, succeeded: 17, failed: 3 }, sum: expectSum, errors: ['CHILD_BROKE', 'CHILD_BROKE', 'CHILD_BROKE'] });
      assert.equal(done.children?.total, 20);
      assert.equal(done.children?.byState.succeeded, 17);
      const listed = await lh.list({ parentId: parent.id, limit: 100 });
      assert.equal(listed.items.length, 20);
      assert.ok(listed.items.every((c) => c.parentId === parent.id));
      assert.ok((await logOf(lh, parent.id)).includes('waiting>queued:children done'));
    });

    it('fail-fast: the first failed child wakes the parent, its open siblings are cancelled, and the parent fails', async () => {
      const children = [{ n: 1, holdMs: 50 }, { n: 2, holdMs: 50 }, { n: 3, fail: true }, ...Array.from({ length: 5 }, (_, i) => ({ n: 10 + i, holdMs: 5_000 }))];
      const parent = await lh.submit('wf.parent', { tag: `${T}-ff`, children, policy: 'fail-fast' });
      const done = await settled(lh, parent.id, 20_000);
      assert.equal(done.status, 'failed');
      assert.equal(done.error?.code, 'CHILD_FAILED');
      await until(async () => {
        const s = await lh.get(parent.id);
        const open = s?.children ? s.children.total - s.children.byState.succeeded - s.children.byState.failed - s.children.byState.cancelled : 1;
        return open === 0 ? true : undefined;
      }, 'every child to end');
      const s = await lh.get(parent.id);
      assert.equal(s?.children?.byState.failed, 1);
      assert.ok((s?.children?.byState.cancelled ?? 0) >= 5, JSON.stringify(s?.children));
      assert.ok((await logOf(lh, parent.id)).includes('waiting>queued:child failed'));
    });

    it('cancelling a waiting parent cancels its children, running ones included', async () => {
      const children = Array.from({ length: 4 }, (_, i) => ({ n: i, holdMs: 30_000 }));
      const parent = await lh.submit('wf.parent', { tag: `${T}-cancel`, children, policy: 'collect' });
      await until(async () => {
        const s = await lh.get(parent.id);
        return s?.status === 'waiting' && (s.children?.byState.running ?? 0) > 0 ? true : undefined;
      }, 'the parent to wait with running children');
      const cancelled = await lh.cancel(parent.id);
      assert.equal(cancelled.status, 'cancelled');
      await until(async () => {
        const s = await lh.get(parent.id);
        return s?.children?.byState.cancelled === 4 ? true : undefined;
      }, 'all children cancelled', 15_000);
    });

    it('a pipeline retries a failing stage alone and keeps earlier outputs; progress is by weight', async () => {
      const tag = `${T}-p`;
      const seen: Array<{ percent: number | null; stage: string | null; stagePercent?: number | null }> = [];
      const job = await lh.submit('wf.pipeline', { tag });
      const watching = (async () => {
        for await (const s of lh.watch(job.id)) seen.push({ percent: s.progress.percent, stage: s.progress.stage, stagePercent: s.progress.stagePercent });
      })();
      const done = await settled(lh, job.id, 10_000);
      await watching;
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.deepEqual(done.result, { loaded: 6 });
      assert.equal(runs.get(`${tag}:extract`), 1);
      assert.equal(runs.get(`${tag}:transform`), 2);
      assert.equal(done.attempts, 1, 'the stage was retried within the attempt');
      assert.ok(
        seen.some((p) => p.stage === 'transform' && p.stagePercent === 50 && p.percent === 50),
        `extract (weight 1) done and half of transform (weight 3): 2.5/5 = 50 %; saw ${JSON.stringify(seen)}`,
      );
    });

    it('a saga compensates its completed steps in reverse order when a step fails for good', async () => {
      order.length = 0;
      const job = await lh.submit('wf.saga', null);
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'failed');
      assert.deepEqual(order, ['release r1', 'refund c1']);
      assert.equal(done.error?.code, 'NO_COURIER');
      assert.equal((done.error as { compensated?: boolean }).compensated, true);
      const log = await logOf(lh, job.id);
      const notes = log.filter((l) => l.includes('compensat'));
      assert.deepEqual(notes, ['running>running:step ship failed; compensating', 'running>running:compensated reserve', 'running>running:compensated charge']);
    });

    it("a stage's ctx is the job's: log, job, attempt, checkpoint, children, results and destructured methods work there", async () => {
      const job = await lh.submit('wf.stage-ctx', null);
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.deepEqual(done.result, { idMatches: true, attempt: 1, checkpoint: null, children: 'function', results: 'function', sameStage: true });
    });

    it('stages and saga steps may sleep and wait; a stage done before the wait is not run again', async () => {
      const tag = `${T}-sw`;
      const job = await lh.submit('wf.staged-waits', { tag });
      await until(async () => ((await lh.get(job.id))?.waitingFor?.kind === 'signal' ? true : undefined), 'the stage to wait for its signal');
      await lh.signal(job.id, 'go', { ok: true });
      const done = await settled(lh, job.id, 10_000);
      assert.deepEqual(done.result, { previous: 1, approval: { ok: true } });
      assert.equal(runs.get(`${tag}:first`), 1);
      assert.equal(runs.get(`${tag}:second`), 3, 'the stage ran again after its sleep and after its signal');

      order.length = 0;
      const saga = await lh.submit('wf.saga-waits', null);
      await until(async () => ((await lh.get(saga.id))?.status === 'waiting' ? true : undefined), 'the step to wait');
      await lh.signal(saga.id, 'confirm', { confirmed: false });
      const failed = await settled(lh, saga.id, 10_000);
      assert.equal(failed.error?.code, 'NOT_CONFIRMED');
      assert.equal((failed.error as { compensated?: boolean }).compensated, true);
      assert.deepEqual(order, ['unhold']);
    });

    it('a job whose cancel was recorded does not wait: it ends cancelled and spawns nothing', async () => {
      for (const how of ['seen', 'unseen'] as const) {
        const tag = `${T}-late-${how}`;
        const job = await lh.submit('wf.late-spawn', { tag });
        await until(async () => (gates.has(tag) ? true : undefined), 'the handler to reach its gate');
        if (how === 'seen') await lh.cancel(job.id);
        else {
          // Recorded straight in the store, as another process would: this worker has not heard of it.
          const rec = await lh.store.getJob({ id: job.id });
          assert.ok(rec);
          assert.deepEqual(await lh.store.transition({ items: [requestCancel(rec, Date.now())] }), [true]);
        }
        gates.get(tag)?.();
        const done = await settled(lh, job.id, 10_000);
        assert.equal(done.status, 'cancelled', how);
        assert.equal(done.children, null, `${how}: no child was created`);
        assert.equal((await lh.list({ parentId: job.id, limit: 10 })).items.length, 0);
      }
    });

    it('closes', async () => {
      await lh.close({ drainMs: 0 });
    });
  });
}

describe('the example workflow demo.export (longhaul dev)', () => {
  it('plans once, spawns a shard per child, and merges their parts into export.csv', async () => {
    const { exampleTasks } = await import('../../src/example-tasks/examples.js');
    const { FsBlobStore } = await import('../../src/blobs/fs-store.js');
    const lh = await Longhaul.open({
      database: join(dir, 'example.db'),
      tasks: exampleTasks,
      logger: pino({ level: 'silent' }),
      sweepIntervalMs: 50,
      files: { urlSigningSecret: 'workflow-example-url-signing-secret-0123', blobs: await FsBlobStore.open(join(dir, 'example-blobs')) },
    });
    try {
      await lh.startWorker({ concurrency: 4, pollIntervalMs: 10 });
      const job = await lh.submit('demo.export', { rows: 5_000, shards: 5, pauseMs: 0 });
      const done = await settled(lh, job.id, 20_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      const result = done.result as { rows: number; shards: number; bytes: number };
      assert.equal(result.rows, 5_000);
      assert.equal(result.shards, 5);
      assert.deepEqual(
        done.results.map((f) => [f.name, f.size]),
        [['export.csv', result.bytes]],
      );
      assert.equal(done.children?.total, 5);
      assert.equal(done.children?.byState.succeeded, 5);
    } finally {
      await lh.close({ drainMs: 0 });
    }
  });
});
