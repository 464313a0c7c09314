/**
 * Jobs a worker claims ahead of its free slots (`claimAhead`, src/worker/claim-ahead.ts): they
 * are `running` in the store with a lease from their claim, start in claim order as slots free
 * (never more than `concurrency` handlers at once), and a graceful stop hands back the ones that
 * never started at once, attempt refunded, without running them. On SQLite and on PostgreSQL.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { defineTask, Longhaul } from '../../src/index.js';
import { tempDir, waitFor } from '../fixtures/process-harness.js';
import { createTestDatabase } from '../support/postgres.js';

const FAST = 100; // jobs 0..99 return at once (so the worker learns that handlers are quick)
const TOTAL = 160; // jobs 100..159 wait until they are aborted
const CONCURRENCY = 2;

async function scenario(database: string): Promise<void> {
  const started: number[] = [];
  let runningNow = 0;
  let maxRunning = 0;
  const step = defineTask({
    type: 'ca.step',
    maxAttempts: 3,
    async run(input: { n: number }, ctx) {
      started.push(input.n);
      runningNow++;
      maxRunning = Math.max(maxRunning, runningNow);
      try {
        if (input.n < FAST) return null;
        await new Promise<void>((_resolve, reject) => {
          const stop = () => reject(ctx.signal.reason);
          if (ctx.signal.aborted) stop();
          else ctx.signal.addEventListener('abort', stop, { once: true });
        });
        return null;
      } finally {
        runningNow--;
      }
    },
  });
  const lh = await Longhaul.open({ database, tasks: [step], logger: pino({ level: 'silent' }) });
  try {
    const submitted = await lh.submitMany(Array.from({ length: TOTAL }, (_, n) => ({ type: 'ca.step', input: { n } })));
    const ids = submitted.map((s) => s.id);
    // claimedWaitMs: long, so that the jobs claimed ahead are still waiting when stop() comes.
    const worker = await lh.startWorker({ concurrency: CONCURRENCY, sweeper: false, claimedWaitMs: 60_000 });
    await waitFor(() => worker.stats.succeeded === FAST && runningNow === CONCURRENCY, 'the fast jobs done and two slow ones running', 20_000);
    const held = (await lh.store.countByState({})).running;
    // Both slots are taken and the worker holds more: jobs claimed ahead, leased, not started.
    assert.ok(held > CONCURRENCY, `expected jobs claimed ahead (running in the store: ${held})`);

    await worker.stop({ drainMs: 100 });
    assert.equal(maxRunning, CONCURRENCY, 'never more handlers at once than the concurrency');
    assert.deepEqual(
      started,
      Array.from({ length: FAST + CONCURRENCY }, (_, n) => n),
      'handlers started in claim order, and only the two that had a slot among the slow ones',
    );
    const counts = await lh.store.countByState({});
    assert.equal(counts.running, 0, 'nothing left running after stop');
    assert.equal(counts.succeeded, FAST);
    assert.equal(worker.stats.handedBack, held, 'the two running and every job claimed ahead were handed back');
    for (const id of ids.slice(FAST)) {
      const job = await lh.store.getJob({ id });
      assert.ok(job);
      assert.equal(job.attempts, 0, 'a handed-back job gets its attempt back');
      assert.ok(job.state === 'retrying' || job.state === 'queued', `job ${id} is ${job.state}`);
    }
  } finally {
    await lh.close({ drainMs: 0 });
  }
}

describe('jobs claimed ahead', () => {
  it('SQLite: leased while waiting, started in order within the concurrency, handed back at stop without running', async () => {
    const tmp = tempDir('lh-ca-');
    try {
      await scenario(join(tmp.dir, 'longhaul.db'));
    } finally {
      tmp.remove();
    }
  });

  it('PostgreSQL: the same', async () => {
    const db = await createTestDatabase('lh_claim_ahead');
    try {
      await scenario(db.url);
    } finally {
      await db.drop();
    }
  });
  it('jobs claimed ahead behind slow handlers go back to the queue after claimedWaitMs, and an idle worker runs them', async () => {
    const tmp = tempDir('lh-ca-');
    let slowRunning = 0;
    const task = defineTask({
      type: 'ca.mixed',
      maxAttempts: 3,
      async run(input: { n: number; slow: boolean }, ctx) {
        if (!input.slow) return null;
        slowRunning++;
        try {
          await new Promise<void>((_resolve, reject) => {
            const stop = () => reject(ctx.signal.reason);
            if (ctx.signal.aborted) stop();
            else ctx.signal.addEventListener('abort', stop, { once: true });
          });
        } finally {
          slowRunning--;
        }
        return null;
      },
    });
    const lh = await Longhaul.open({ database: join(tmp.dir, 'longhaul.db'), tasks: [task], logger: pino({ level: 'silent' }) });
    try {
      // Quick jobs first (the worker learns that handlers are quick), then two slow ones that
      // take both slots, then quick ones again: those get claimed ahead behind the slow two.
      const inputs = [
        ...Array.from({ length: FAST }, (_, n) => ({ n, slow: false })),
        { n: FAST, slow: true },
        { n: FAST + 1, slow: true },
        ...Array.from({ length: 40 }, (_, i) => ({ n: FAST + 2 + i, slow: false })),
      ];
      const submitted = await lh.submitMany(inputs.map((input) => ({ type: 'ca.mixed', input })));
      const late = submitted.slice(FAST + 2).map((j) => j.id);
      const a = await lh.startWorker({ concurrency: CONCURRENCY, sweeper: false, claimedWaitMs: 300 });
      await waitFor(() => slowRunning === CONCURRENCY, 'the two slow jobs to hold both slots', 20_000);
      const lateStates = async () => Promise.all(late.map(async (id) => (await lh.store.getJob({ id }))?.state));
      // What A holds ahead: the late jobs running in the store (they cannot start while the slow
      // two hold the slots). Not every running job: the quick ones before the slow two have all
      // run, but their outcomes may not be written yet, and counting them failed under load.
      const held = (await lateStates()).filter((st) => st === 'running').length;
      const lateDone = async () => (await lateStates()).filter((st) => st === 'succeeded').length;
      // Another worker, idle, claiming only for its free slots.
      const b = await lh.startWorker({ concurrency: 4, sweeper: false, claimAhead: 0 });
      await waitFor(async () => (await lateDone()) === late.length, 'every quick job behind the slow ones to finish', 10_000);
      assert.equal(slowRunning, CONCURRENCY, 'the slow jobs are still running: the quick ones did not wait for them');
      assert.ok(held > 0, 'the scenario needs jobs claimed ahead behind the slow ones');
      assert.ok(a.stats.handedBack >= held, `A handed back ${a.stats.handedBack} of the ${held} it held`);
      const logs = await Promise.all(late.map((id) => lh.transitions(id)));
      const returned = logs.filter((log) => log.some((t) => t.from === 'running' && t.to === 'retrying' && t.reason === 'no free slot'));
      assert.ok(returned.length >= 1, 'some quick jobs were handed back with reason "no free slot"');
      for (const log of returned) assert.equal(log.filter((t) => t.to === 'succeeded').length, 1);
      assert.ok(b.stats.succeeded >= returned.length, 'the idle worker ran the returned jobs');
    } finally {
      await lh.close({ drainMs: 0 });
      tmp.remove();
    }
  });
});

describe('a job claimed ahead and cancelled before it starts', () => {
  it('ends cancelled without its handler ever running, and the next job takes the freed slot', async () => {
    const tmp = tempDir('lh-ca-cancel-');
    const started: number[] = [];
    const task = defineTask({
      type: 'ca.cancel',
      async run(input: { n: number; slow: boolean }, ctx) {
        started.push(input.n);
        if (!input.slow) return null;
        await new Promise<void>((_resolve, reject) => {
          const stop = () => reject(ctx.signal.reason);
          if (ctx.signal.aborted) stop();
          else ctx.signal.addEventListener('abort', stop, { once: true });
        });
        return null;
      },
    });
    const lh = await Longhaul.open({ database: join(tmp.dir, 'longhaul.db'), tasks: [task], logger: pino({ level: 'silent' }) });
    try {
      // Quick jobs (the worker learns that handlers are quick), then slow ones: two take the
      // slots, the others are claimed ahead behind them.
      const inputs = [...Array.from({ length: FAST }, (_, n) => ({ n, slow: false })), ...Array.from({ length: 20 }, (_, i) => ({ n: FAST + i, slow: true }))];
      const submitted = await lh.submitMany(inputs.map((input) => ({ type: 'ca.cancel', input })));
      const worker = await lh.startWorker({ concurrency: CONCURRENCY, sweeper: false, claimedWaitMs: 60_000 });
      await waitFor(() => started.length === FAST + CONCURRENCY, 'the two first slow jobs in both slots', 20_000);
      const next = submitted[FAST + CONCURRENCY];
      assert.ok(next);
      assert.equal((await lh.store.getJob({ id: next.id }))?.state, 'running', 'the scenario needs the next slow job claimed ahead');
      // Cancel the job next in line, then free a slot: the cancelled one must not start.
      await lh.cancel(next.id);
      await lh.cancel((submitted[FAST] as { id: string }).id);
      await waitFor(() => started.length === FAST + CONCURRENCY + 1, 'the job after the cancelled one to take the slot', 10_000);
      assert.equal(started.at(-1), FAST + CONCURRENCY + 1, `started ${started.slice(FAST).join(', ')}`);
      const cancelled = await waitFor(async () => {
        const j = await lh.get(next.id);
        return j?.status === 'cancelled' ? j : undefined;
      }, 'the cancelled job to end');
      assert.equal(cancelled.error?.code, 'CANCELLED');
      assert.ok(!started.includes(FAST + CONCURRENCY), 'its handler never ran');
      await worker.stop({ drainMs: 0 });
    } finally {
      await lh.close({ drainMs: 0 });
      tmp.remove();
    }
  });
});
