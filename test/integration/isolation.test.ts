/**
 * Handlers in worker threads (`isolation: 'thread'`, docs/isolation.md), on SQLite and
 * PostgreSQL: a busy loop is stopped by its timeout while the server in the same process keeps
 * answering; the handler's ctx works in the thread as in-process (progress, a checkpoint
 * resumed by the retry, a stage, result files, an upload, the log, the signal on cancel); a
 * thread that crashes (an uncaught exception, out of memory, process.exit) fails only its
 * attempt, with a retryable error and a code, and the worker goes on.
 *
 * The tasks are in test/fixtures/isolation-tasks.ts (a thread imports their module).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { defineTask } from '../../src/task-api/define.js';
import { ThreadPool } from '../../src/worker/isolation/pool.js';
import * as isolationTasks from '../fixtures/isolation-tasks.js';
import { pollUntil } from '../support/poll.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const dir = mkdtempSync(join(tmpdir(), 'longhaul-isolation-'));
const databases: TestDatabase[] = [];
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const db of databases) await db.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, `iso-${Math.random().toString(36).slice(2)}.db`) },
  {
    name: 'PostgreSQL',
    async database() {
      const db = await createTestDatabase('lh_isolation');
      databases.push(db);
      return db.url;
    },
  },
];

/** Names a module that does not export it: its thread cannot find it. */
const misplaced = defineTask({
  type: 'iso.misplaced',
  module: new URL('../fixtures/isolation-tasks.ts', import.meta.url),
  isolation: 'thread',
  maxAttempts: 3,
  run: () => 'never runs',
});

/** Its module never finishes loading in a thread: its timeout must still end it. */
const slowLoad = defineTask({
  type: 'iso.slow-load',
  module: new URL('../fixtures/isolation-hanging-module.ts', import.meta.url),
  isolation: { kind: 'thread', graceMs: 200 },
  maxAttempts: 1,
  timeoutMs: 500,
  run: () => 'never runs',
});

interface Setup {
  lh: Longhaul;
  base: string;
  lines: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

async function setup(database: string, blobDir: string): Promise<Setup> {
  const lines: Array<Record<string, unknown>> = [];
  const lh = await Longhaul.open({
    database,
    tasks: isolationTasks,
    logger: pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) }),
    sweepIntervalMs: 50,
    files: { urlSigningSecret: 'isolation-url-signing-secret-0123456789abcdef', blobs: await FsBlobStore.open(blobDir) },
  });
  lh.register(misplaced, slowLoad);
  const app = await buildServer({ lh, logger: false });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  const worker = await lh.startWorker({ concurrency: 3, pollIntervalMs: 10 });
  return {
    lh,
    base,
    lines,
    async close() {
      await worker.stop({ drainMs: 2000 });
      await app.close();
      await lh.close();
    },
  };
}

/**
 * For jobs of iso.spin that do not spin: its 1 s timeout is for the loop, and a new thread's
 * start (its module loaded under tsx) took longer than that on a loaded machine (a full run).
 */
const CALM = { timeoutMs: 60_000 };

async function ended(lh: Longhaul, id: string, timeoutMs = 20_000): Promise<JobSnapshot> {
  return pollUntil(
    async () => {
      const s = await lh.get(id);
      return s && ['succeeded', 'failed', 'cancelled'].includes(s.status) ? s : undefined;
    },
    `job ${id} to end`,
    timeoutMs,
  );
}

for (const target of TARGETS) {
  describe(`isolation: 'thread', on ${target.name}`, () => {
    it('a busy-looping handler is stopped by its timeout (its thread terminated) while /healthz keeps answering; the next job gets a new thread', async () => {
      const s = await setup(await target.database(), join(dir, `blobs-spin-${target.name}`));
      try {
        // A first job loads the task's thread (pool of one), so the loop below is all that runs.
        const warm = await ended(s.lh, (await s.lh.submit('iso.spin', { spin: false }, CALM)).id);
        assert.equal(warm.status, 'succeeded');

        // The loop starts within milliseconds of the submit and runs until its thread is
        // terminated, about 1300 ms later: /healthz is asked every 50 ms for 1200 ms from the submit.
        const job = await s.lh.submit('iso.spin', { spin: true });
        const startedAt = Date.now();
        const latencies: number[] = [];
        while (Date.now() - startedAt < 1200) {
          const t0 = performance.now();
          const res = await fetch(`${s.base}/healthz`);
          latencies.push(performance.now() - t0);
          assert.equal(res.status, 200);
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.ok(Math.max(...latencies) < 300, `/healthz answered within 300 ms during the loop (slowest ${Math.round(Math.max(...latencies))} ms)`);
        assert.ok(latencies.length >= 8, `about every 50 ms (${latencies.length} answers)`);
        assert.equal((await s.lh.get(job.id))?.status, 'running', 'the loop ran all along');

        // Timeout 1000 ms, then 300 ms of grace for the signal, then the thread is terminated.
        const end = await ended(s.lh, job.id, 10_000);
        assert.equal(end.status, 'cancelled');
        assert.equal(end.error?.code, 'TIMEOUT');
        const [attempt] = (await s.lh.attempts(job.id)).items;
        assert.match(attempt?.stack ?? '', /THREAD_TERMINATED|ThreadError: the handler's thread was terminated/);
        assert.ok(s.lines.some((l) => l.msg === 'terminating a handler thread: its handler ignored its signal' && l.jobId === job.id && l.abort === 'timeout'));

        // The pool's one thread was terminated: the next job runs, in a new thread.
        const next = await ended(s.lh, (await s.lh.submit('iso.spin', { spin: false }, CALM)).id);
        assert.equal(next.status, 'succeeded');
        const before = warm.result as { threadId: number; isMainThread: boolean };
        const after = next.result as { threadId: number; isMainThread: boolean };
        assert.equal(before.isMainThread, false);
        assert.equal(after.isMainThread, false);
        assert.notEqual(after.threadId, before.threadId);
      } finally {
        await s.close();
      }
    });

    it('ctx works in the thread: progress, a checkpoint resumed after a retry, a journaled stage, result files, an upload, the log, durable waits, children; the signal fires on cancel', async () => {
      const s = await setup(await target.database(), join(dir, `blobs-ctx-${target.name}`));
      try {
        const upload = (await (await fetch(`${s.base}/v1/uploads`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'uploaded bytes' })).json()) as { id: string };
        const job = await s.lh.submit('iso.parity', { uploadId: upload.id });
        const done = await ended(s.lh, job.id);
        assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
        assert.equal(done.attempts, 2);
        const result = done.result as Record<string, unknown>;
        assert.equal(result.isMainThread, false);
        assert.deepEqual(result.saved, { done: 3, attempt: 1 }, 'attempt 2 started from the checkpoint attempt 1 saved');
        assert.deepEqual(result.first, { ranIn: 1 }, "the stage's output was journaled by attempt 1 and not run again");
        assert.deepEqual(result.job, { id: job.id, type: 'iso.parity', maxAttempts: 3 });
        assert.equal(result.attempt, 2);
        assert.equal(result.readBack, 'part 0\npart 1\npart 2\n', 'a streamed result file, read back in the thread');
        assert.equal(result.upload, `${'uploaded bytes'.length}:uploaded bytes`);
        assert.deepEqual(result.files, ['parts.txt', 'report.txt']);

        // Progress: attempt 1's message reached the store, attempt 2's items moved it on.
        assert.equal(done.progress.message, 'three of ten');
        assert.equal(done.progress.itemsDone, 10);
        assert.equal(done.progress.percent, 100);

        const files = await s.lh.resultFiles(job.id, null);
        const report = files?.files.find((f) => f.name === 'report.txt');
        assert.equal(report?.contentType, 'text/plain');
        assert.equal(report?.sha256, createHash('sha256').update('resumed from 3 on attempt 2\n').digest('hex'));

        // The failed first attempt is recorded as in-process: its error, code and retryable.
        const [first] = (await s.lh.attempts(job.id)).items;
        assert.deepEqual(first?.error, { message: 'first attempt stops after its checkpoint', code: 'PARITY_FIRST', retryable: true });

        // Log lines written in the thread, logged by the job's logger (its fields, its level).
        const started = s.lines.filter((l) => l.msg === 'parity handler started' && l.jobId === job.id);
        assert.equal(started.length, 2);
        assert.equal(started[0]?.level, 30);
        assert.equal(started[0]?.isMainThread, false);
        assert.deepEqual(started[1]?.saved, { done: 3, attempt: 1 });
        const wrote = s.lines.find((l) => l.msg === 'parity handler wrote its files' && l.jobId === job.id);
        assert.equal(wrote?.level, 40);
        assert.deepEqual(wrote?.files, ['report.txt', 'parts.txt']);

        // Durable waits from a thread: the job waits without its thread, and its handler runs again.
        const waits = await s.lh.submit('iso.waits', null);
        await pollUntil(async () => ((await s.lh.get(waits.id))?.waitingFor?.kind === 'signal' ? true : undefined), 'the handler to wait for its signal');
        await s.lh.signal(waits.id, 'go', { go: true });
        const woke = await ended(s.lh, waits.id);
        assert.equal(woke.status, 'succeeded', JSON.stringify(woke.error));
        const wokeResult = woke.result as { before: { threadId: number }; payload: unknown; isMainThread: boolean };
        assert.deepEqual(wokeResult.payload, { go: true });
        assert.equal(wokeResult.isMainThread, false);
        assert.equal(typeof wokeResult.before.threadId, 'number');
        assert.deepEqual(
          (await s.lh.transitions(waits.id)).map((t) => t.to).filter((to) => to === 'waiting'),
          ['waiting', 'waiting'],
          'it waited twice: the sleep, then the signal',
        );

        // Fan-out from a thread: the job waits for its children, then reads them.
        const parent = await ended(s.lh, (await s.lh.submit('iso.fan-out', null)).id);
        assert.equal(parent.status, 'succeeded', JSON.stringify(parent.error));
        assert.deepEqual(parent.result, {
          succeeded: 2,
          total: 2,
          children: [
            { status: 'succeeded', isMainThread: false },
            { status: 'succeeded', isMainThread: false },
          ],
          isMainThread: false,
        });

        // Cancel: the thread's ctx.signal fires with the same reason as in-process.
        const waiting = await s.lh.submit('iso.wait-signal', null);
        await pollUntil(async () => ((await s.lh.get(waiting.id))?.progress.percent === 5 ? true : undefined), 'the handler to wait');
        await s.lh.cancel(waiting.id);
        const cancelled = await ended(s.lh, waiting.id);
        assert.equal(cancelled.status, 'cancelled');
        const saw = s.lines.find((l) => l.msg === 'handler saw its signal' && l.jobId === waiting.id);
        assert.equal(saw?.kind, 'cancelled');
        assert.equal(saw?.name, 'AbortError');
        assert.equal(saw?.isMainThread, false);
        assert.ok(!s.lines.some((l) => l.msg === 'terminating a handler thread: its handler ignored its signal' && l.jobId === waiting.id), 'it returned within its grace');
      } finally {
        await s.close();
      }
    });

    it('a crashed thread (uncaught exception, out of memory, process.exit) fails only its attempt, retryable with a code; the next attempt and the next job run', async () => {
      const s = await setup(await target.database(), join(dir, `blobs-crash-${target.name}`));
      try {
        const expected = { 'throw-async': 'THREAD_CRASHED', oom: 'THREAD_OUT_OF_MEMORY', exit: 'THREAD_EXITED' } as const;
        for (const [how, code] of Object.entries(expected)) {
          const job = await s.lh.submit('iso.crash', { how });
          const done = await ended(s.lh, job.id);
          const [first, second] = (await s.lh.attempts(job.id)).items;
          assert.equal(first?.error?.code, code, `${how}: ${JSON.stringify(first?.error)}`);
          assert.equal(first?.error?.retryable, true);
          assert.equal(first?.outcome, 'retrying');
          assert.equal(second?.outcome, 'succeeded');
          assert.equal(done.status, 'succeeded');
          assert.deepEqual((done.result as { survived: string; attempt: number }).attempt, 2);
        }
        const crashLine = s.lines.find((l) => l.code === 'THREAD_CRASHED');
        assert.match(String((crashLine?.err as { message?: string })?.message), /uncaught exception in the handler's thread: TypeError: thrown from a timer/);
        const next = await ended(s.lh, (await s.lh.submit('iso.spin', { spin: false }, CALM)).id);
        assert.equal(next.status, 'succeeded');
        assert.equal((next.result as { isMainThread: boolean }).isMainThread, false);

        // A task its module does not export cannot run in a thread: failed at once, not retried.
        const lost = await ended(s.lh, (await s.lh.submit('iso.misplaced', null)).id);
        assert.equal(lost.status, 'failed');
        assert.equal(lost.attempts, 1);
        assert.equal(lost.error?.code, 'THREAD_TASK_NOT_FOUND');
        assert.equal(lost.error?.retryable, false);
        assert.match(lost.error?.message ?? '', /could not be loaded in its thread: module file:.*isolation-tasks\.ts exports no task "iso\.misplaced"/);

        // A module that never finishes loading: the attempt still ends at its timeout, its thread terminated.
        const stuck = await ended(s.lh, (await s.lh.submit('iso.slow-load', null)).id, 10_000);
        assert.equal(stuck.status, 'cancelled', JSON.stringify(stuck.error));
        assert.equal(stuck.error?.code, 'TIMEOUT');
        assert.match((await s.lh.attempts(stuck.id)).items[0]?.stack ?? '', /its module was still loading 200 ms after the attempt's signal \(timeout\)/);
      } finally {
        await s.close();
      }
    });
  });
}

describe('a stopped worker closes its thread pools', () => {
  it('ends the idle threads at once, not after their idle time', async () => {
    const pool = new ThreadPool(
      { module: new URL('../fixtures/isolation-tasks.ts', import.meta.url).href, type: 'iso.noop', logLevel: 'silent' },
      { max: 2, idleMs: 600_000, resourceLimits: undefined },
    );
    const thread = await pool.acquire(new AbortController().signal);
    pool.release(thread);
    assert.equal(pool.size, 1, 'an idle thread waits for the next attempt');
    pool.close();
    await pollUntil(async () => (pool.size === 0 ? true : undefined), 'the idle thread to end', 5000);
  });
});
