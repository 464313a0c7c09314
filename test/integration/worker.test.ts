/**
 * Fast in-process checks of the worker runtime, the sweeper and the library API on a temp SQLite
 * file: situations that are hard to stage across processes (a lease stolen while the same worker
 * still runs the old attempt, a failing store write in the worker loop) and the in-process paths
 * (bus-driven watch and cancel).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { Worker as Thread } from 'node:worker_threads';
import pino from 'pino';
import { defineTask, type JobSnapshot, Longhaul, type OpenOptions, type Task } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import { tempDir, waitFor } from '../fixtures/process-harness.js';
import { logOf, settled } from '../support/jobs.js';

async function withLonghaul(tasks: Task[], options: Partial<OpenOptions>, fn: (lh: Longhaul) => Promise<void>): Promise<void> {
  const tmp = tempDir('lh-wi-');
  const lh = await Longhaul.open({
    database: join(tmp.dir, 'longhaul.db'),
    tasks,
    logger: pino({ level: 'silent' }),
    heartbeatIntervalMs: 50,
    heartbeatTimeoutMs: 600,
    sweepIntervalMs: 50,
    cancelDrainMs: 200,
    ...options,
  });
  try {
    await fn(lh);
  } finally {
    await lh.close({ drainMs: 0 });
    tmp.remove();
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('worker runtime, in process', () => {
  it('a stale attempt finishing in the same worker does not evict the new attempt of the same job', async () => {
    const gate = deferred();
    const runs: { attempt: number; abortedWith: string | null }[] = [];
    const hold = defineTask({
      type: 'ip.hold',
      maxAttempts: 5,
      async run(_input, ctx) {
        const run = { attempt: ctx.attempt, abortedWith: null as string | null };
        runs.push(run);
        if (ctx.attempt === 1) {
          await gate.promise; // ignores its signal: a stale attempt that finishes late
        } else {
          await sleep(1500); // longer than the 600 ms heartbeat timeout: only heartbeats keep it
        }
        run.abortedWith = ctx.signal.aborted ? String((ctx.signal.reason as { kind?: string }).kind) : null;
        return { attempt: ctx.attempt };
      },
    });
    await withLonghaul([hold], {}, async (lh) => {
      const worker = await lh.startWorker({ concurrency: 2, pollIntervalMs: 10, cancelPollMs: 5000 });
      const job = await lh.submit('ip.hold', {});
      await waitFor(() => runs.length === 1, 'attempt 1 to start');
      // Take the lease away as a sweeper of another process would: attempt 1 is now stale.
      const record = await lh.store.getJob({ id: job.id });
      assert.equal(record?.state, 'running');
      const [stolen] = await lh.store.transition({
        items: [
          {
            id: job.id,
            from: 'running',
            to: 'retrying',
            lease: record?.lease as number,
            reason: 'test: lease taken',
            at: Date.now(),
            patch: { runAt: Date.now() },
          },
        ],
      });
      assert.equal(stolen, true);
      await waitFor(() => runs.length === 2, 'attempt 2 to start in the same worker');
      gate.resolve();
      await waitFor(() => worker.stats.refused === 1, "attempt 1's outcome to be refused");
      const done = await settled(lh, job.id, 5000);
      assert.equal(done.status, 'succeeded', `${JSON.stringify(done.error)}\n${(await logOf(lh, job.id)).join('\n')}`);
      assert.deepEqual(done.result, { attempt: 2 });
      assert.equal(done.attempts, 2, 'attempt 2 kept heartbeating and was not reaped');
      assert.equal(runs.length, 2);
      const log = await logOf(lh, job.id);
      assert.ok(!log.some((l) => l.includes('heartbeat lost')), log.join('\n'));
      assert.equal(worker.stats.succeeded, 1);
      assert.equal(runs[0]?.abortedWith, 'lease-lost', 'the stale attempt was told its lease is gone');
      await worker.idle();
    });
  });

  it('a failed store write in the worker loop loses no completion', async () => {
    let runs = 0;
    const quick = defineTask({
      type: 'ip.quick',
      async run() {
        runs++;
        return 'done';
      },
    });
    await withLonghaul([quick], {}, async (lh) => {
      const store = lh.store as Store;
      const original = store.completeAndClaim.bind(store);
      let failures = 0;
      store.completeAndClaim = async (params) => {
        if (params.complete.length > 0 && failures === 0) {
          failures++;
          throw Object.assign(new Error('database is locked (simulated)'), { code: 'ERR_SQLITE_ERROR', errcode: 5, errstr: 'database is locked' });
        }
        return original(params);
      };
      const worker = await lh.startWorker({ concurrency: 2, pollIntervalMs: 10 });
      const job = await lh.submit('ip.quick', {});
      const done = await settled(lh, job.id, 3000);
      assert.equal(failures, 1, 'the write did fail once');
      assert.equal(done.status, 'succeeded');
      assert.equal(done.attempts, 1);
      assert.equal(runs, 1, 'the handler ran once: the outcome was written on the next pass, not redone');
      assert.ok(!(await logOf(lh, job.id)).some((l) => l.includes('heartbeat lost')));
      await Promise.race([worker.idle(), sleep(2000).then(() => assert.fail('the worker never became idle: a slot leaked'))]);
    });
  });

  it('watch(): current snapshot, progress pushed on the bus, terminal, then the end', async () => {
    const gate = deferred();
    const stepper = defineTask({
      type: 'ip.steps',
      async run(_input, ctx) {
        await gate.promise;
        for (let i = 1; i <= 4; i++) {
          ctx.progress({ itemsDone: i, itemsTotal: 5 });
          await sleep(80);
        }
        return 'ok';
      },
    });
    await withLonghaul([stepper], {}, async (lh) => {
      const job = await lh.submit('ip.steps', {});
      await lh.startWorker({ concurrency: 1, progressIntervalMs: 1000 });
      const seen: JobSnapshot[] = [];
      const guard = AbortSignal.timeout(5000);
      for await (const s of lh.watch(job.id, { signal: guard, pollMs: 5000 })) {
        seen.push(s);
        if (seen.length === 1) gate.resolve();
      }
      assert.equal(guard.aborted, false);
      assert.ok(['queued', 'running'].includes(seen[0]?.status as string));
      const percents = seen.filter((s) => s.status === 'running' && s.progress.percent !== null).map((s) => s.progress.percent);
      // The store is written at most once a second here: these came over the bus.
      assert.ok(percents.length >= 3, `progress snapshots: ${percents.join(', ')}`);
      assert.deepEqual(
        percents,
        [...percents].sort((x, y) => (x as number) - (y as number)),
      );
      const last = seen.at(-1);
      assert.equal(last?.status, 'succeeded');
      assert.equal(last?.progress.percent, 100);
    });
  });

  it('watch(): a progress older than the newest seen is never applied, whatever order the bus delivers them in', async () => {
    const gate = deferred();
    const held = defineTask({
      type: 'ip.held',
      async run() {
        await gate.promise;
        return 'ok';
      },
    });
    await withLonghaul([held], {}, async (lh) => {
      const job = await lh.submit('ip.held', {});
      await lh.startWorker({ concurrency: 1 });
      const seen: JobSnapshot[] = [];
      const guard = AbortSignal.timeout(5000);
      const progress = (percent: number, at: number) => ({
        percent,
        stage: null,
        itemsDone: null,
        itemsTotal: null,
        message: null,
        eta: null,
        updatedAt: new Date(at).toISOString(),
      });
      const t0 = Date.now() + 60_000; // later than anything the store holds
      // As two routes would deliver them: 20 %, 40 %, then a late copy of 20 %, then 60 %,
      // each while the watcher waits for the next change.
      const emitAll = async () => {
        for (const [percent, at] of [
          [20, t0],
          [40, t0 + 100],
          [20, t0],
          [60, t0 + 200],
        ] as const) {
          lh.bus.emit('job:progress', { id: job.id, tenant: 'default', progress: progress(percent, at) });
          await sleep(30);
        }
        gate.resolve();
      };
      let emitting: Promise<void> | null = null;
      for await (const s of lh.watch(job.id, { signal: guard, pollMs: 5000 })) {
        seen.push(s);
        if (s.status === 'running' && !emitting) emitting = emitAll();
      }
      await emitting;
      assert.equal(guard.aborted, false);
      const percents = seen.filter((s) => s.status === 'running' && s.progress.percent !== null).map((s) => s.progress.percent);
      assert.deepEqual(percents, [20, 40, 60]);
      assert.equal(seen.at(-1)?.status, 'succeeded');
    });
  });

  it('a cancel from the same process reaches the handler through the bus at once', async () => {
    const started = deferred();
    const wait = defineTask({
      type: 'ip.wait',
      async run(_input, ctx) {
        started.resolve();
        await new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }));
      },
    });
    await withLonghaul([wait], {}, async (lh) => {
      await lh.startWorker({ concurrency: 1, cancelPollMs: 60_000 });
      const job = await lh.submit('ip.wait', {});
      await started.promise;
      const t0 = Date.now();
      await lh.cancel(job.id);
      const done = await settled(lh, job.id, 2000);
      assert.ok(Date.now() - t0 < 1000, 'no cancel poll was needed');
      assert.equal(done.status, 'cancelled');
      assert.equal(done.error?.code, 'CANCELLED');
    });
  });

  it('a timeout announces its cancel request once (as a user cancel does), and aborts the handler once, with "timeout"', async () => {
    let aborts = 0;
    let reason: unknown;
    const slow = defineTask({
      type: 'ip.slow',
      timeoutMs: 150,
      async run(_input, ctx) {
        await new Promise((_, reject) =>
          ctx.signal.addEventListener('abort', () => {
            aborts++;
            reason = ctx.signal.reason;
            reject(ctx.signal.reason);
          }),
        );
      },
    });
    await withLonghaul([slow], {}, async (lh) => {
      const requests: { id: string; reason: string }[] = [];
      lh.bus.on('job:cancel-requested', (e) => requests.push(e));
      const worker = await lh.startWorker({ concurrency: 1, cancelPollMs: 60_000 });
      const job = await lh.submit('ip.slow', {});
      const done = await settled(lh, job.id, 3000);
      await sleep(100); // room for a second announcement or abort, if there were one
      assert.equal(done.status, 'cancelled');
      assert.equal(done.error?.code, 'TIMEOUT');
      assert.deepEqual(requests, [{ id: job.id, reason: 'timeout' }]);
      assert.equal(aborts, 1);
      assert.equal((reason as { kind?: string }).kind, 'timeout');
      assert.equal(worker.stats.cancelled, 1);
      assert.deepEqual((await logOf(lh, job.id)).slice(-2), ['running>running:cancel requested: timeout', 'running>cancelled:timeout']);
    });
  });

  it('stop() hands a running job back at once with its attempt refunded', async () => {
    const started = deferred();
    const stubborn = defineTask({
      type: 'ip.stubborn',
      async run() {
        started.resolve();
        await sleep(3000); // ignores its signal
        return 'late';
      },
    });
    await withLonghaul([stubborn], { heartbeatTimeoutMs: 60_000 }, async (lh) => {
      const worker = await lh.startWorker({ concurrency: 1 });
      const job = await lh.submit('ip.stubborn', {});
      await started.promise;
      const t0 = Date.now();
      await worker.stop({ drainMs: 100 });
      assert.ok(Date.now() - t0 < 1000);
      assert.equal(worker.stats.handedBack, 1);
      const snap = await lh.get(job.id);
      assert.ok(snap && ['retrying', 'queued'].includes(snap.status), snap?.status);
      assert.equal(snap?.attempts, 0);
      assert.equal((await logOf(lh, job.id)).at(-1), 'running>retrying:shutdown');
    });
  });
});

describe('sweeper, in process', () => {
  const idle = defineTask({
    type: 'ip.idle',
    maxAttempts: 1,
    async run() {
      return null;
    },
  });
  const idle3 = defineTask({
    type: 'ip.idle3',
    maxAttempts: 3,
    async run() {
      return null;
    },
  });

  /** Claims a job straight from the store, as a worker that then dies without a word. */
  async function claimAndAbandon(lh: Longhaul, type: string): Promise<string> {
    const job = await lh.submit(type, {});
    const [claimed] = await lh.store.claimJobs({ workerId: 'ghost', types: [{ type }], limit: 1, now: Date.now() });
    assert.equal(claimed?.id, job.id);
    return job.id;
  }

  it('reaps a job whose worker died: requeued while attempts remain, failed when spent', async () => {
    await withLonghaul([idle, idle3], { heartbeatTimeoutMs: 200 }, async (lh) => {
      const spent = await claimAndAbandon(lh, 'ip.idle');
      const again = await claimAndAbandon(lh, 'ip.idle3');
      lh.startSweeper();
      const failed = await settled(lh, spent, 3000);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error?.code, 'HEARTBEAT_TIMEOUT');
      await waitFor(async () => (await lh.get(again))?.status === 'queued', 'the other job to be requeued', 3000);
      assert.deepEqual((await logOf(lh, again)).slice(-2), ['running>retrying:heartbeat lost; requeued', 'retrying>queued:due']);
    });
  });

  it('a job whose worker died after a cancel was requested ends cancelled, not requeued or failed', async () => {
    await withLonghaul([idle, idle3], { heartbeatTimeoutMs: 200, cancelDrainMs: 60_000 }, async (lh) => {
      const a = await claimAndAbandon(lh, 'ip.idle');
      const b = await claimAndAbandon(lh, 'ip.idle3');
      for (const id of [a, b]) assert.equal((await lh.cancel(id)).cancelRequested, true);
      lh.startSweeper();
      for (const id of [a, b]) {
        const done = await settled(lh, id, 3000);
        assert.equal(done.status, 'cancelled', `${id}: ${(await logOf(lh, id)).join(' | ')}`);
        assert.equal(done.error?.code, 'CANCELLED');
        assert.equal(done.attempts, 1);
        assert.equal((await logOf(lh, id)).at(-1), 'running>cancelled:cancelled (heartbeat lost)');
      }
    });
  });
});

describe('worker runtime, edge cases', () => {
  it('a timeoutMs beyond 2^31-1 ms (24.8 days) does not fire at once, nor does a drainMs that long', async () => {
    // Node runs a setTimeout longer than 2^31-1 ms after 1 ms.
    const slow = defineTask({
      type: 'ip.long-timeout',
      timeoutMs: 2 ** 31 + 60_000,
      async run(_input, ctx) {
        await sleep(150);
        return { aborted: ctx.signal.aborted };
      },
    });
    await withLonghaul([slow], {}, async (lh) => {
      const worker = await lh.startWorker({ concurrency: 2 });
      const job = await lh.submit('ip.long-timeout', {});
      const done = await settled(lh, job.id, 5000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.deepEqual(done.result, { aborted: false });

      const second = await lh.submit('ip.long-timeout', {}, { timeoutMs: 2 ** 32 });
      await waitFor(async () => (await lh.get(second.id))?.status === 'running', 'the second job to start');
      await worker.stop({ drainMs: 2 ** 31 + 1 }); // waits for the job, not for 1 ms
      const after = await lh.get(second.id);
      assert.equal(after?.status, 'succeeded', `${after?.status}: ${(await logOf(lh, second.id)).join(' | ')}`);
    });
  });

  it("a claim that waited for another connection's write lock starts its lease when it got the lock", async () => {
    const quick = defineTask({ type: 'ip.locked', async run() {
      return null;
    } });
    await withLonghaul([quick], {}, async (lh) => {
      const job = await lh.submit('ip.locked', {});
      const path = (lh.store as Store & { options: { path: string } }).options.path;
      // Another connection (a thread here, a process in production) holds the write lock for 400 ms.
      const holder = new Thread(
        `const { parentPort, workerData } = require('node:worker_threads');
         const db = new (require('node:sqlite').DatabaseSync)(workerData.path);
         db.prepare('BEGIN IMMEDIATE').run();
         parentPort.postMessage('locked');
         Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 400);
         const releasedAt = Date.now();
         db.prepare('COMMIT').run();
         db.close();
         parentPort.postMessage(releasedAt);`,
        { eval: true, execArgv: [], workerData: { path } },
      );
      const exited = once(holder, 'exit'); // listen now: the thread may be gone before the job settles
      const messages: unknown[] = [];
      holder.on('message', (m) => messages.push(m));
      await waitFor(() => messages.includes('locked'), 'the other connection to take the lock');
      await lh.startWorker({ concurrency: 1, sweeper: false });
      const done = await settled(lh, job.id, 5000);
      await exited;
      const releasedAt = messages.find((m) => typeof m === 'number') as number;
      assert.equal(done.status, 'succeeded');
      const startedAt = Date.parse(done.startedAt as string);
      assert.ok(startedAt >= releasedAt, `started ${releasedAt - startedAt} ms before the lock was released`);
    });
  });

  it('stop() ends a job with a pending cancel request as cancelled, not handed back to the queue', async () => {
    const started: string[] = [];
    const deaf = defineTask({
      type: 'ip.deaf',
      maxAttempts: 3,
      async run(_input, ctx) {
        started.push(ctx.job.id);
        await sleep(3000); // ignores its signal
        return 'late';
      },
    });
    await withLonghaul([deaf], { heartbeatTimeoutMs: 60_000, cancelDrainMs: 60_000 }, async (lh) => {
      const worker = await lh.startWorker({ concurrency: 2, cancelPollMs: 60_000, sweeper: false });
      const local = await lh.submit('ip.deaf', {});
      const remote = await lh.submit('ip.deaf', {});
      await waitFor(() => started.length === 2, 'both jobs to start');
      // Cancelled through this process: the handler's signal fired, and it ignored it.
      assert.equal((await lh.cancel(local.id)).cancelRequested, true);
      // Cancelled by another process: recorded in the store, not yet seen by this worker (no cancel poll before the stop).
      const record = await lh.store.getJob({ id: remote.id });
      const [requested] = await lh.store.transition({
        items: [
          {
            id: remote.id,
            from: 'running',
            to: 'running',
            lease: record?.lease as number,
            cancelRequested: false,
            reason: 'cancel requested by user',
            at: Date.now(),
            patch: { cancelRequest: { reason: 'user' } },
          },
        ],
      });
      assert.equal(requested, true);
      await worker.stop({ drainMs: 100 });
      for (const id of [local.id, remote.id]) {
        const snap = await lh.get(id);
        const log = await logOf(lh, id);
        assert.equal(snap?.status, 'cancelled', `${id}: ${log.join(' | ')}`);
        assert.equal(snap?.error?.code, 'CANCELLED');
        assert.equal(log.at(-1), 'running>cancelled:cancelled (worker stopping)');
      }
      assert.equal(worker.stats.cancelled, 2);
      assert.equal(worker.stats.handedBack, 0);
    });
  });

  it('a type at its concurrency limit holds back neither the other types nor the worker (no busy loop)', async () => {
    const gate = deferred();
    let limitedRunning = 0;
    let limitedPeak = 0;
    const limited = defineTask({
      type: 'ip.limited',
      concurrency: 1,
      async run() {
        limitedRunning++;
        limitedPeak = Math.max(limitedPeak, limitedRunning);
        await gate.promise;
        limitedRunning--;
        return 'limited';
      },
    });
    const free = defineTask({
      type: 'ip.free',
      async run() {
        return 'free';
      },
    });
    await withLonghaul([limited, free], {}, async (lh) => {
      // The limited type's jobs come first in the queue.
      const limitedJobs = [];
      for (let i = 0; i < 3; i++) limitedJobs.push(await lh.submit('ip.limited', {}));
      const freeJobs = [];
      for (let i = 0; i < 6; i++) freeJobs.push(await lh.submit('ip.free', {}));
      const store = lh.store as Store;
      const original = store.completeAndClaim.bind(store);
      let calls = 0;
      store.completeAndClaim = async (params) => {
        calls++;
        return original(params);
      };
      const worker = await lh.startWorker({ concurrency: 4, pollIntervalMs: 10 });
      for (const j of freeJobs) assert.equal((await settled(lh, j.id, 5000)).status, 'succeeded');
      const counts = (await lh.stats()).counts;
      assert.equal(counts.running, 1, 'one job of the limited type runs');
      assert.equal(counts.queued, 2, 'the other two wait for it');
      // Free slots and queued jobs of a type at its limit: the worker must sit still, not spin.
      const before = calls;
      await sleep(500);
      assert.ok(calls - before <= 3, `${calls - before} claim attempts in 500 ms while nothing could be claimed`);
      gate.resolve();
      for (const j of limitedJobs) assert.equal((await settled(lh, j.id, 5000)).status, 'succeeded');
      assert.equal(limitedPeak, 1);
      assert.equal(worker.stats.succeeded, 9);
    });
  });
});

describe('an attempt’s abort state (ctx.signal made on first read)', () => {
  it('a signal read after the abort starts aborted with the reason; one read before it fires; the first abort wins', async () => {
    const { AttemptAbort } = await import('../../src/worker/abort.js');
    const { JobAbortedError } = await import('../../src/core/abort.js');
    const late = new AttemptAbort();
    assert.equal(late.aborted, false);
    assert.equal(late.kind, null);
    late.abort('cancelled');
    late.abort('timeout');
    assert.equal(late.kind, 'cancelled');
    assert.equal(late.signal.aborted, true);
    assert.ok(late.signal.reason instanceof JobAbortedError);
    assert.equal((late.signal.reason as InstanceType<typeof JobAbortedError>).kind, 'cancelled');

    const early = new AttemptAbort();
    const signal = early.signal;
    let fired = 0;
    signal.addEventListener('abort', () => fired++);
    early.abort('lease-lost');
    early.abort('shutdown');
    assert.equal(fired, 1);
    assert.equal(early.signal, signal, 'one signal per attempt');
    assert.equal((signal.reason as InstanceType<typeof JobAbortedError>).kind, 'lease-lost');
  });
});
