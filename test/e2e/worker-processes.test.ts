/**
 * Worker integration tests with real child processes sharing one SQLite database file.
 *
 * Every test has its own temp dir: the Longhaul database, an effects database the fixture tasks
 * write their side effects to (test/fixtures/effects.ts), and one or more worker processes
 * (test/fixtures/worker-process.ts) that announce milestones as JSON lines on stdout. The test
 * process opens its own Longhaul instance on the same file (no worker, no sweeper) to submit,
 * read, cancel and retry. Timing is shortened through LONGHAUL_* variables (process-harness.ts).
 * Tests run a few at a time; every child is SIGKILLed in the test's finally and again in after().
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { DatabaseSync } from 'node:sqlite';
import pino from 'pino';
import { JobStateConflictError, type JobSnapshot, Longhaul, type OpenOptions } from '../../src/index.js';
import { type EffectRow, openEffects, readEffects, readGauge, release } from '../fixtures/effects.js';
import { killAllChildren, type SpawnOptions, spawnWorker, tempDir, type WorkerChild, waitFor } from '../fixtures/process-harness.js';
import fixtureTasks from '../fixtures/worker-tasks.js';
import { logOf, settled } from '../support/jobs.js';

interface Env {
  db: string;
  lh: Longhaul;
  effects: DatabaseSync;
  spawn(options?: Partial<SpawnOptions>): Promise<WorkerChild>;
  /** Effects of one job (or all), in the order they were committed. */
  effectsOf(jobId?: string): EffectRow[];
}

/** Runs `fn` with a fresh database, effects file and test-side Longhaul; cleans everything up whatever happens. */
async function withEnv(name: string, options: Partial<OpenOptions>, fn: (env: Env) => Promise<void>): Promise<void> {
  const tmp = tempDir(`lh-wp-${name}-`);
  const db = join(tmp.dir, 'longhaul.db');
  const effectsPath = join(tmp.dir, 'effects.db');
  const effects = openEffects(effectsPath);
  const lh = await Longhaul.open({
    database: db,
    tasks: fixtureTasks,
    logger: pino({ level: 'silent' }),
    heartbeatIntervalMs: 200,
    heartbeatTimeoutMs: 1500,
    sweepIntervalMs: 100,
    cancelDrainMs: 400,
    ...options,
  });
  const children: WorkerChild[] = [];
  const env: Env = {
    db,
    lh,
    effects,
    async spawn(o = {}) {
      const child = await spawnWorker({ db, effects: effectsPath, label: `${name}#${children.length + 1}`, ...o });
      children.push(child);
      return child;
    },
    effectsOf: (jobId) => readEffects(effects, jobId),
  };
  try {
    await fn(env);
  } catch (err) {
    for (const c of children) {
      if (c.stderr.trim()) (err as Error).message += `\n--- stderr of ${c.label} ---\n${c.stderr.slice(-4000)}`;
    }
    throw err;
  } finally {
    await Promise.all(children.map((c) => c.kill()));
    await lh.close({ drainMs: 0 });
    effects.close();
    tmp.remove();
  }
}

function count<T>(items: readonly T[], pred: (t: T) => boolean): number {
  return items.filter(pred).length;
}

after(async () => {
  await killAllChildren();
});

describe('worker processes sharing one SQLite file', { concurrency: 3 }, () => {
  it('success: result stored, one attempt, percent 100 on the final snapshot, queued → running → succeeded', async () => {
    await withEnv('success', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.ok', { x: 21, steps: 4, stepMs: 30 });
      assert.equal(job.status, 'queued');
      const w = await spawn();
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded');
      assert.deepEqual(done.result, { doubled: 42, pid: w.pid });
      assert.equal(done.attempts, 1);
      assert.equal(done.error, null);
      // The handler stopped at 4 of 5 items (80 %): 100 comes from the success itself.
      assert.equal(done.progress.percent, 100);
      assert.equal(done.progress.itemsDone, 4);
      assert.equal(done.progress.stage, 'counting');
      assert.ok(done.finishedAt && done.startedAt && done.finishedAt >= done.startedAt);
      const log = await lh.transitions(job.id);
      assert.deepEqual(
        log.map((t) => [t.from, t.to, t.reason, t.attempt]),
        [
          [null, 'queued', 'submitted', 0],
          ['queued', 'running', 'claimed', 1],
          ['running', 'succeeded', 'completed', 1],
        ],
      );
      const ready = w.events.find((e) => e.event === 'ready');
      assert.equal(log[1]?.workerId, ready?.workerId, 'the claim names the worker process');
      assert.deepEqual(
        effectsOf(job.id).map((e) => e.kind),
        ['start', 'done'],
      );
      // A worker-only process stays up with nothing else keeping its event loop busy.
      assert.equal(w.exitInfo, null, `the worker process is still running (stderr: ${w.stderr})`);
    });
  });

  it('retryable error twice, then success: attempts 3, the log shows retrying twice', async () => {
    await withEnv('retry', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.flaky', { failTimes: 2 });
      await spawn();
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.equal(done.attempts, 3);
      assert.deepEqual(done.result, { attempt: 3 });
      assert.equal(done.error, null);
      const log = await logOf(lh, job.id);
      assert.equal(
        count(log, (l) => l === 'running>retrying:retry scheduled'),
        2,
        log.join('\n'),
      );
      assert.equal(
        count(log, (l) => l === 'retrying>queued:due'),
        2,
        log.join('\n'),
      );
      assert.equal(
        count(log, (l) => l === 'queued>running:claimed'),
        3,
        log.join('\n'),
      );
      assert.equal(log.at(-1), 'running>succeeded:completed');
      assert.deepEqual(
        effectsOf(job.id).map((e) => e.attempt),
        [1, 2, 3],
      );
    });
  });

  it('a FatalError fails at once: attempts 1, failed, error.retryable false', async () => {
    await withEnv('fatal', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.fatal', {});
      assert.equal(job.maxAttempts, 5);
      await spawn();
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'failed');
      assert.equal(done.attempts, 1);
      assert.deepEqual(done.error, { message: 'the input can never work', code: 'BAD_INPUT', retryable: false });
      assert.equal((await logOf(lh, job.id)).at(-1), 'running>failed:fatal');
      assert.equal(effectsOf(job.id).length, 1, 'the handler ran once');
    });
  });

  it('attempts exhausted: failed after maxAttempts', async () => {
    await withEnv('exhausted', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.failRuns', { failRuns: 99 });
      assert.equal(job.maxAttempts, 2);
      await spawn();
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'failed');
      assert.equal(done.attempts, 2);
      assert.match(done.error?.message ?? '', /still broken.*attempts exhausted: 2\/2/);
      const log = await logOf(lh, job.id);
      assert.equal(
        count(log, (l) => l === 'running>retrying:retry scheduled'),
        1,
        log.join('\n'),
      );
      assert.equal(log.at(-1), 'running>failed:attempts exhausted');
      assert.equal(effectsOf(job.id).length, 2);
    });
  });

  it('timeout: a handler that honours ctx.signal ends cancelled with TIMEOUT', async () => {
    await withEnv('timeout-honour', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.timeoutHonour', {});
      await spawn();
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'cancelled');
      assert.equal(done.error?.code, 'TIMEOUT');
      assert.equal(done.error?.retryable, false);
      assert.equal(done.attempts, 1, 'a timeout is not retried');
      const log = await logOf(lh, job.id);
      assert.deepEqual(log.slice(-2), ['running>running:cancel requested: timeout', 'running>cancelled:timeout']);
      const ran = Date.parse(done.finishedAt as string) - Date.parse(done.startedAt as string);
      assert.ok(ran < 3000, `ended ${ran} ms after it started`);
      const fx = effectsOf(job.id);
      assert.deepEqual(
        fx.map((e) => [e.kind, (e.data as { reason?: string } | null)?.reason ?? null]),
        [
          ['start', null],
          ['aborted', 'timeout'],
        ],
      );
      // The timeout runs from entering `running` (the claim, DESIGN §2), which on a loaded machine
      // can be a little before the handler starts: measure from startedAt, not from the handler.
      const sinceClaim = (fx[1]?.at ?? 0) - Date.parse(done.startedAt as string);
      assert.ok(sinceClaim >= 290, `the signal fired ${sinceClaim} ms after the job entered running (timeoutMs 300)`);
      const afterMs = (fx[1]?.data as { afterMs?: number } | undefined)?.afterMs ?? -1;
      assert.ok(afterMs >= 0 && afterMs < 2000, `the signal fired ${afterMs} ms into the handler`);
    });
  });

  it('timeout: a handler that ignores ctx.signal is forced to cancelled by the sweeper after the drain', async () => {
    await withEnv('timeout-ignore', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.timeoutIgnore', { ms: 2500 });
      const w = await spawn({ env: { LONGHAUL_CANCEL_DRAIN_MS: '400' } });
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'cancelled');
      assert.equal(done.error?.code, 'TIMEOUT');
      assert.match(done.error?.message ?? '', /ignored cancellation/);
      const ran = Date.parse(done.finishedAt as string) - Date.parse(done.startedAt as string);
      assert.ok(ran < 2200, `forced ${ran} ms after it started, long before the handler's 2500 ms were up`);
      const log = await lh.transitions(job.id);
      assert.deepEqual(
        log.slice(-2).map((t) => `${t.from}>${t.to}:${t.reason}`),
        ['running>running:cancel requested: timeout', 'running>cancelled:timeout (forced after drain)'],
      );
      const drained = Date.parse(log.at(-1)?.at as string) - Date.parse(log.at(-2)?.at as string);
      assert.ok(drained >= 400 && drained < 1500, `forced ${drained} ms after the cancel request (drain 400)`);
      // The worker gives up on the handler one sweep after the drain and writes the same forced
      // cancel, which the lease refuses (the sweeper wrote it); the job stays cancelled.
      await waitFor(() => (w.stats?.refused ?? 0) >= 1, 'the late completion to be refused', 6000);
      // The abandoned handler runs on to its end all the same (JavaScript cannot stop it).
      await waitFor(() => effectsOf(job.id).some((e) => e.kind === 'end'), 'the abandoned handler to end', 6000);
      const end = effectsOf(job.id).find((e) => e.kind === 'end')?.data as { aborted: boolean; reason: string; abortedAfterMs: number } | undefined;
      assert.equal(end?.aborted, true);
      assert.equal(end?.reason, 'timeout');
      // The timeout runs from entering `running` (startedAt), which a loaded machine may put a little
      // before the handler's start: measure the abort from there (start effect + ms into the handler).
      const startAt = effectsOf(job.id).find((e) => e.kind === 'start')?.at ?? 0;
      const sinceClaim = startAt + (end?.abortedAfterMs ?? -1e9) - Date.parse(done.startedAt as string);
      assert.ok(sinceClaim >= 290 && sinceClaim < 1500, `the signal fired ${sinceClaim} ms after the job entered running (timeoutMs 300)`);
      const later = await lh.get(job.id);
      assert.equal(later?.status, 'cancelled');
      assert.equal(later?.result, null);
      assert.equal(later?.finishedAt, done.finishedAt);
      assert.equal(w.stats?.succeeded, 0);
    });
  });

  it('cancel while queued: cancelled at once and never runs', async () => {
    await withEnv('cancel-queued', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.waitSignal', { maxMs: 100 });
      const snap = await lh.cancel(job.id);
      assert.equal(snap.status, 'cancelled');
      assert.equal(snap.error?.code, 'CANCELLED');
      assert.ok(snap.finishedAt);
      // Start a worker and prove it is working before checking the cancelled job was left alone.
      await spawn();
      const marker = await lh.submit('t.ok', { x: 1 });
      assert.equal((await settled(lh, marker.id, 10_000)).status, 'succeeded');
      const later = await lh.get(job.id);
      assert.equal(later?.status, 'cancelled');
      assert.equal(later?.attempts, 0);
      assert.deepEqual(await logOf(lh, job.id), ['null>queued:submitted', 'queued>cancelled:cancelled by user']);
      assert.deepEqual(effectsOf(job.id), []);
    });
  });

  it('cancel while running: ctx.signal fires in the worker process and the job ends cancelled', async () => {
    await withEnv('cancel-running', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.waitSignal', { maxMs: 15_000 });
      const w = await spawn();
      await w.waitEvent((e) => e.event === 'task' && e.what === 'start' && e.id === job.id, 'the handler to start');
      const requested = await lh.cancel(job.id);
      assert.equal(requested.status, 'running');
      assert.equal(requested.cancelRequested, true);
      const t0 = Date.now();
      const done = await settled(lh, job.id, 10_000);
      assert.ok(Date.now() - t0 < 3000, 'the handler heard the cancel promptly');
      assert.equal(done.status, 'cancelled');
      assert.deepEqual(done.error, { message: 'cancelled', code: 'CANCELLED', retryable: false });
      const log = await logOf(lh, job.id);
      assert.deepEqual(log.slice(-2), ['running>running:cancel requested by user', 'running>cancelled:cancelled']);
      assert.deepEqual(
        effectsOf(job.id).map((e) => [e.kind, e.data]),
        [
          ['start', null],
          ['aborted', { reason: 'cancelled' }],
        ],
      );
    });
  });

  it('cancel of a terminal job throws JobStateConflictError and changes nothing', async () => {
    await withEnv('cancel-terminal', {}, async ({ lh, spawn }) => {
      const job = await lh.submit('t.ok', { x: 2 });
      await spawn();
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded');
      await assert.rejects(lh.cancel(job.id), (err: unknown) => {
        assert.ok(err instanceof JobStateConflictError);
        assert.equal(err.code, 'STATE_CONFLICT');
        assert.equal(err.status, 409);
        return true;
      });
      const cancelled = await lh.submit('t.waitSignal', { maxMs: 15_000, never: true }, { delayMs: 60_000 });
      assert.equal(cancelled.status, 'pending');
      assert.equal((await lh.cancel(cancelled.id)).status, 'cancelled');
      await assert.rejects(lh.cancel(cancelled.id), JobStateConflictError);
      const again = await lh.get(job.id);
      assert.equal(again?.status, 'succeeded');
      assert.equal(again?.updatedAt, done.updatedAt);
      assert.deepEqual(again?.result, done.result);
    });
  });

  it('manual retry of a failed job runs it again with a fresh attempt budget', async () => {
    await withEnv('manual-retry', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.failRuns', { failRuns: 2 });
      await spawn();
      const failed = await settled(lh, job.id, 10_000);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.attempts, 2);
      await assert.rejects(lh.retry((await lh.submit('t.ok', { x: 0 }, { delayMs: 60_000 })).id), JobStateConflictError, 'only failed or cancelled jobs');
      const requeued = await lh.retry(job.id);
      assert.equal(requeued.status, 'queued');
      assert.equal(requeued.attempts, 0);
      assert.equal(requeued.error, null);
      assert.equal(requeued.finishedAt, null);
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.equal(done.attempts, 1, 'a fresh budget: the retry is attempt 1 again');
      assert.deepEqual(done.result, { runs: 3, attempt: 1 });
      const log = await logOf(lh, job.id);
      const retryAt = log.indexOf('failed>queued:manual retry');
      assert.ok(retryAt > 0, log.join('\n'));
      assert.deepEqual(log.slice(retryAt), ['failed>queued:manual retry', 'queued>running:claimed', 'running>succeeded:completed']);
      assert.deepEqual(
        effectsOf(job.id).map((e) => e.attempt),
        [1, 2, 1],
      );
    });
  });

  it('kill -9 mid-job: another process reaps it and finishes from its last checkpoint', async () => {
    await withEnv('kill9', {}, async ({ lh, spawn, effectsOf }) => {
      const steps = 20;
      const job = await lh.submit('t.checkpointed', { steps, stepMs: 80 });
      const a = await spawn({ label: 'A' });
      await a.waitEvent((e) => e.event === 'task' && e.what === 'step' && Number(e.step) >= 5, 'A to pass step 5');
      a.signal('SIGKILL');
      assert.equal((await a.exited).signal, 'SIGKILL');
      const orphan = await lh.store.getJob({ id: job.id });
      assert.equal(orphan?.state, 'running', 'nobody has noticed yet');
      const saved = orphan?.checkpoint?.data as { next: number; acc: number };
      assert.ok(saved.next >= 6 && saved.next < steps, `checkpoint at step ${saved.next}`);

      const b = await spawn({ label: 'B' });
      const done = await settled(lh, job.id, 15_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      const expected = Array.from({ length: steps }, (_, i) => i * i).reduce((x, y) => x + y, 0);
      assert.deepEqual(done.result, { acc: expected, resumedFrom: saved.next, attempt: 2, pid: b.pid });
      assert.equal(done.attempts, 2);
      const log = await logOf(lh, job.id);
      assert.deepEqual(
        log.filter((l) => !l.startsWith('running>running')),
        [
          'null>queued:submitted',
          'queued>running:claimed',
          'running>retrying:heartbeat lost; requeued',
          'retrying>queued:due',
          'queued>running:claimed',
          'running>succeeded:completed',
        ],
      );
      const fx = effectsOf(job.id);
      const second = fx.filter((e) => e.attempt === 2);
      assert.equal(second[0]?.kind, 'resume');
      assert.equal(second[0]?.step, saved.next);
      assert.deepEqual(
        second.filter((e) => e.kind === 'step').map((e) => e.step),
        Array.from({ length: steps - saved.next }, (_, i) => saved.next + i),
        'attempt 2 did not redo the checkpointed steps',
      );
      assert.ok(second.every((e) => e.pid === b.pid));
      const covered = new Set(fx.filter((e) => e.kind === 'step').map((e) => e.step));
      assert.equal(covered.size, steps);
    });
  });

  it("a stale worker's late completion is refused: the job completes exactly once", async () => {
    await withEnv('stale', {}, async ({ lh, spawn, effectsOf }) => {
      // Frozen long enough that B (slow to start on a loaded machine) reaps and finishes the job
      // while A is still blocked, so attempt 2 cannot be claimed by A itself after it wakes.
      const job = await lh.submit('t.block', { blockMs: 8000 });
      const a = await spawn({ label: 'A' });
      await a.waitEvent((e) => e.event === 'task' && e.what === 'blocking' && e.id === job.id, 'A to block');
      // A's event loop is frozen: no heartbeats. B's sweeper reaps the job and B runs it again.
      const b = await spawn({ label: 'B' });
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded');
      assert.deepEqual(done.result, { attempt: 2, pid: b.pid });
      // A wakes up, its handler returns, and its completion must not take effect.
      await waitFor(() => (a.stats?.refused ?? 0) >= 1, 'A to have its completion refused', 12_000);
      assert.equal(a.stats?.succeeded, 0);
      const fx = effectsOf(job.id);
      assert.deepEqual(
        fx.filter((e) => e.kind === 'done').map((e) => [e.attempt, e.pid]),
        [
          [2, b.pid],
          [1, a.pid],
        ],
        'both handlers ran to the end; only one completion counted',
      );
      const final = await lh.get(job.id);
      assert.deepEqual(final?.result, { attempt: 2, pid: b.pid });
      assert.equal(final?.attempts, 2);
      assert.equal(final?.finishedAt, done.finishedAt);
      const log = await logOf(lh, job.id);
      assert.equal(
        count(log, (l) => l.endsWith('>succeeded:completed')),
        1,
        log.join('\n'),
      );
      assert.equal(
        count(log, (l) => l === 'running>retrying:heartbeat lost; requeued'),
        1,
        log.join('\n'),
      );
    });
  });

  it('per-task concurrency 2 holds across two processes of concurrency 5 each', async () => {
    await withEnv('concurrency', {}, async ({ lh, spawn, effects, effectsOf }) => {
      const a = await spawn({ label: 'A', concurrency: 5 });
      // Four of A's five slots are taken by other work, and its fifth by a limited job that holds
      // until released: B (five free slots) may then start only ONE limited job, because A's
      // running one counts against the limit of 2 although it lives in another process.
      const fillers = await lh.submitMany(Array.from({ length: 4 }, () => ({ type: 't.waitSignal', input: { maxMs: 20_000 } })));
      await waitFor(() => count(a.events, (e) => e.event === 'claimed' && e.type === 't.waitSignal') === 4, 'A to claim the fillers');
      const held = await lh.submit('t.limited', { ms: 100, hold: true });
      await a.waitEvent((e) => e.event === 'claimed' && e.id === held.id, 'A to claim the held job');
      const b = await spawn({ label: 'B', concurrency: 5 });
      const rest = await lh.submitMany(Array.from({ length: 11 }, () => ({ type: 't.limited', input: { ms: 150 } })));
      const jobs = [held, ...rest];
      await b.waitEvent((e) => e.event === 'claimed' && e.type === 't.limited', 'B to claim a limited job');
      await waitFor(() => count(effectsOf(), (e) => e.kind === 'end' && e.pid === b.pid) >= 2, 'B to finish two limited jobs');
      // B kept one slot, never two: A's held job was counted.
      assert.equal(readGauge(effects, 'limited')?.max, 2);
      release(effects, 'limited');
      const results = await Promise.all(jobs.map((j) => settled(lh, j.id, 20_000)));
      for (const r of results) assert.equal(r.status, 'succeeded', JSON.stringify(r.error));
      const gauge = readGauge(effects, 'limited');
      assert.equal(gauge?.cur, 0);
      assert.ok(gauge && gauge.max <= 2, `at most 2 at once, saw ${gauge?.max}`);
      assert.equal(gauge?.max, 2, 'the limit was reached');
      const starts = effectsOf().filter((e) => e.kind === 'start' && jobs.some((j) => j.id === e.jobId));
      assert.equal(starts.length, 12, 'each limited job ran once');
      assert.ok(
        starts.every((e) => (e.data as { running: number }).running <= 2),
        'no handler started beside two others',
      );
      const byPid = (pid: number) => count(results, (r) => (r.result as { pid: number }).pid === pid);
      assert.ok(byPid(a.pid) >= 2 && byPid(b.pid) >= 2, `both processes ran limited jobs (A ${byPid(a.pid)}, B ${byPid(b.pid)})`);
      assert.equal(byPid(a.pid) + byPid(b.pid), 12);
      for (const f of fillers) await lh.cancel(f.id);
    });
  });

  it('graceful shutdown hands a running job back at once; another process finishes it', async () => {
    // A heartbeat timeout of 30 s: if the hand-back relied on reaping, this test would time out.
    await withEnv('handback', { heartbeatTimeoutMs: 30_000 }, async ({ lh, spawn, effectsOf }) => {
      // 10 s of work: B must be up before A would finish on its own, even on a loaded machine.
      const steps = 250;
      const job = await lh.submit('t.steps', { steps, stepMs: 40 });
      const a = await spawn({ label: 'A', drainMs: 300 });
      await a.waitEvent((e) => e.event === 'task' && e.what === 'step' && Number(e.step) >= 3, 'A to be mid-job');
      const b = await spawn({ label: 'B' });
      assert.equal((await lh.get(job.id))?.status, 'running');
      const t0 = Date.now();
      a.signal('SIGTERM');
      const exit = await a.exited;
      assert.equal(exit.code, 0, `A exits 0 (stderr: ${a.stderr})`);
      assert.ok(Date.now() - t0 < 3000, 'A did not wait for the job to finish');
      const aExit = a.events.find((e) => e.event === 'exit');
      assert.equal((aExit?.stats as Record<string, number> | undefined)?.handedBack, 1, 'A handed the job back');
      await b.waitEvent((e) => e.event === 'claimed' && e.id === job.id, 'B to claim the handed-back job', 5000);
      // B has about 9.8 s of steps left: 10 s was too tight under load. Still well under the 30 s
      // heartbeat timeout plus that work, which a hand-back by reaping would need.
      const done = await settled(lh, job.id, 25_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.equal(done.attempts, 1, 'the interrupted attempt was refunded');
      const result = done.result as { acc: number; resumedFrom: number; attempt: number; pid: number };
      assert.equal(result.pid, b.pid);
      assert.equal(result.attempt, 1);
      assert.ok(result.resumedFrom >= 4, `B resumed from A's checkpoint (step ${result.resumedFrom})`);
      assert.equal(
        result.acc,
        Array.from({ length: steps }, (_, i) => i * i).reduce((x, y) => x + y, 0),
      );
      const log = await lh.transitions(job.id);
      const handBack = log.find((t) => t.reason === 'shutdown');
      assert.ok(handBack, JSON.stringify(log));
      assert.equal(handBack.from, 'running');
      assert.equal(handBack.to, 'retrying');
      assert.equal(handBack.attempt, 0, 'attempt refunded in the log entry');
      const handedAt = Date.parse(handBack.at);
      assert.ok(handedAt - t0 >= 250 && handedAt - t0 < 2000, `handed back ${handedAt - t0} ms after SIGTERM (drain 300)`);
      assert.ok(!log.some((t) => t.reason.startsWith('heartbeat lost')), 'not reaped');
      const claims = log.filter((t) => t.reason === 'claimed');
      assert.deepEqual(
        claims.map((t) => t.attempt),
        [1, 1],
      );
      assert.ok(effectsOf(job.id).some((e) => e.pid === a.pid && e.kind === 'step'));
    });
  });

  it('graceful shutdown: a job that finishes within the drain succeeds and the process exits 0', async () => {
    await withEnv('drain-ok', {}, async ({ lh, spawn }) => {
      const job = await lh.submit('t.ok', { x: 4, steps: 8, stepMs: 80 });
      const w = await spawn({ drainMs: 5000 });
      await w.waitEvent((e) => e.event === 'task' && e.what === 'start' && e.id === job.id, 'the job to start');
      w.signal('SIGTERM');
      const exit = await w.exited;
      const exitedAt = Date.now();
      assert.equal(exit.code, 0, `exit 0 (stderr: ${w.stderr})`);
      const done = await lh.get(job.id);
      assert.equal(done?.status, 'succeeded');
      assert.equal(done?.attempts, 1);
      assert.deepEqual(done?.result, { doubled: 8, pid: w.pid });
      assert.ok(Date.parse(done?.finishedAt as string) <= exitedAt);
      const log = await logOf(lh, job.id);
      assert.deepEqual(log, ['null>queued:submitted', 'queued>running:claimed', 'running>succeeded:completed']);
      const stats = w.events.find((e) => e.event === 'exit')?.stats as Record<string, number> | undefined;
      assert.equal(stats?.succeeded, 1);
      assert.equal(stats?.handedBack, 0);
    });
  });

  it('checkpoint version mismatch: a task at checkpointVersion 2 starts over and the log says so', async () => {
    await withEnv('cp-version', {}, async ({ lh, spawn, effectsOf }) => {
      const job = await lh.submit('t.versioned', { failFirst: true });
      const v1 = await spawn({ label: 'v1', env: { LH_CP_VERSION: '1' } });
      const failed = await settled(lh, job.id, 10_000);
      assert.equal(failed.status, 'failed');
      const record = await lh.store.getJob({ id: job.id });
      assert.deepEqual(record?.checkpoint, { version: 1, data: { savedBy: 1, step: 7 } });
      v1.signal('SIGTERM');
      assert.equal((await v1.exited).code, 0);

      await spawn({ label: 'v2', env: { LH_CP_VERSION: '2' } });
      await lh.retry(job.id);
      const done = await settled(lh, job.id, 10_000);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      assert.deepEqual(done.result, { version: 2, checkpoint: { savedBy: 2, step: 7 } });
      const runs = effectsOf(job.id).map((e) => e.data);
      assert.deepEqual(runs, [
        { version: 1, checkpoint: null },
        { version: 2, checkpoint: null },
      ]);
      const log = await logOf(lh, job.id);
      const note = 'running>running:checkpoint version 1 does not match task version 2; starting over';
      assert.equal(
        count(log, (l) => l === note),
        1,
        log.join('\n'),
      );
      assert.equal(log.indexOf(note), log.lastIndexOf('queued>running:claimed') + 1, 'noted right after the new claim');
    });
  });

  it('watch(): the current snapshot first, then progress, ending after the terminal one', async () => {
    await withEnv('watch', {}, async ({ lh, spawn }) => {
      const job = await lh.submit('t.ok', { x: 5, steps: 8, stepMs: 120 });
      const guard = AbortSignal.timeout(15_000);
      const seen: JobSnapshot[] = [];
      let spawning: Promise<WorkerChild> | null = null;
      for await (const snap of lh.watch(job.id, { pollMs: 40, signal: guard })) {
        seen.push(snap);
        // Start the worker only once the first snapshot is in hand: it must be the queued one.
        spawning ??= spawn();
      }
      assert.equal(guard.aborted, false, 'the iteration ended by itself');
      await spawning;
      const first = seen[0] as JobSnapshot;
      assert.equal(first.status, 'queued');
      assert.equal(first.id, job.id);
      assert.equal(first.progress.percent, null);
      const last = seen.at(-1) as JobSnapshot;
      assert.equal(last.status, 'succeeded');
      assert.equal(last.progress.percent, 100);
      assert.deepEqual(last.result, { doubled: 10, pid: (last.result as { pid: number }).pid });
      assert.equal(
        count(seen, (s) => ['succeeded', 'failed', 'cancelled'].includes(s.status)),
        1,
        'nothing after the terminal snapshot',
      );
      const progress = seen.filter((s) => s.status === 'running' && s.progress.percent !== null).map((s) => s.progress.percent as number);
      assert.ok(progress.length >= 2, `progress snapshots while running: ${progress.join(', ')}`);
      assert.ok(
        progress.every((p, i) => p > 0 && p < 100 && (i === 0 || p >= (progress[i - 1] as number))),
        `progress moves forward below 100: ${progress.join(', ')}`,
      );
      assert.ok(new Set(progress).size >= 2, `distinct progress values: ${progress.join(', ')}`);
      assert.ok(
        seen.some((s) => s.status === 'running'),
        'a running snapshot was seen',
      );
    });
  });
});
