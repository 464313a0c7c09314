/**
 * A saga whose worker dies, on SQLite and PostgreSQL: the compensations run, in reverse, for
 * exactly the steps that completed, whichever attempt the worker dies in (one with attempts
 * left: the step runs again; the last one; or the one that compensates).
 *
 * A dead worker is staged with several Longhaul instances on one database, as separate processes
 * would be. A "doomed" instance runs the job with one slot and never heartbeats in time (its
 * heartbeat interval is a minute, the job's heartbeat timeout 1 s); its handler then reaches a
 * point where it never returns, ignoring its signal, as a process killed there would never
 * write again. Its slot stays held, so it claims nothing more. The "survivor" instance runs the
 * sweeper that reaps the job, and a worker started once the doomed ones are stuck.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { Longhaul } from '../../src/longhaul.js';
import { defineTask } from '../../src/task-api/define.js';
import { waitFor } from '../fixtures/process-harness.js';
import { logOf, settled } from '../support/jobs.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/** What the steps and compensations did, by the job's tag (one process: every instance writes here). */
const did = new Map<string, string[]>();
const note = (input: unknown, what: string) => {
  const tag = (input as { tag: string }).tag;
  did.set(tag, [...(did.get(tag) ?? []), what]);
};
const events = (tag: string) => did.get(tag) ?? [];

/** Never settles: where a doomed instance's handler "dies" (it ignores its signal too). */
const dieHere = () => new Promise<never>(() => undefined);

/**
 * The saga as each instance runs it. `dies-in-s3`: its worker dies in step s3.
 * `dies-compensating`: its worker dies in the compensation of s2. `survivor`: every part returns.
 */
type Role = 'dies-in-s3' | 'dies-compensating' | 'survivor';
function saga(role: Role) {
  return defineTask({
    type: 'lost.saga',
    maxAttempts: 2,
    steps: [
      {
        name: 's1',
        run: (input: unknown) => {
          note(input, `run s1 (${role})`);
          return { charge: 'c1' };
        },
        compensate: (input: unknown, _ctx, out: { charge: string }) => note(input, `refund ${out.charge} (${role})`),
      },
      {
        name: 's2',
        run: (input: unknown) => {
          note(input, `run s2 (${role})`);
          return { reservation: 'r1' };
        },
        compensate: async (input: unknown, _ctx, out: { reservation: string }) => {
          note(input, `release ${out.reservation} starts (${role})`);
          if (role === 'dies-compensating') await dieHere();
          note(input, `release ${out.reservation} (${role})`);
        },
      },
      {
        name: 's3',
        run: async (input: unknown, ctx) => {
          note(input, `run s3 attempt ${ctx.attempt} (${role})`);
          if (role === 'dies-in-s3') await dieHere();
          return { shipped: true };
        },
      },
    ],
  });
}

const dir = mkdtempSync(join(tmpdir(), 'longhaul-saga-lost-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, 'saga-lost.db') },
  {
    name: 'PostgreSQL',
    database: async () => {
      pgDb = await createTestDatabase('lh_saga_lost');
      return pgDb.url;
    },
  },
];

for (const target of TARGETS) {
  describe(`a saga whose worker dies, on ${target.name}`, () => {
    let database: string;
    let survivor: Longhaul;
    const open: Longhaul[] = [];

    /** An instance whose worker takes one job and never heartbeats for it in time (no sweeper). */
    async function doomed(role: Role): Promise<Longhaul> {
      const lh = await Longhaul.open({
        database,
        tasks: [saga(role)],
        logger: pino({ level: 'silent' }),
        heartbeatIntervalMs: 60_000,
        heartbeatTimeoutMs: 120_000,
        // Never gives up on its stuck handler within the test: its one slot stays held.
        cancelDrainMs: 600_000,
      });
      open.push(lh);
      await lh.startWorker({ concurrency: 1, pollIntervalMs: 10, sweeper: false });
      return lh;
    }

    it('opens', async () => {
      database = await target.database();
      // The job's heartbeat timeout (1 s) is the submitter's: the survivor submits.
      survivor = await Longhaul.open({
        database,
        tasks: [saga('survivor')],
        logger: pino({ level: 'silent' }),
        heartbeatIntervalMs: 100,
        heartbeatTimeoutMs: 1_000,
        sweepIntervalMs: 50,
      });
      open.push(survivor);
      survivor.startSweeper();
    });

    it('dies in s3 on attempt 1 of 2 (s3 runs again) and on attempt 2: an attempt more compensates s2 then s1, s3 is not run again, the job fails with the lost worker’s error', { timeout: 30_000 }, async () => {
      const tag = `${target.name}-last`;
      await doomed('dies-in-s3');
      const job = await survivor.submit('lost.saga', { tag });
      await waitFor(() => events(tag).includes('run s3 attempt 1 (dies-in-s3)'), 'attempt 1 to reach s3', 10_000);
      await doomed('dies-in-s3');
      await waitFor(() => events(tag).includes('run s3 attempt 2 (dies-in-s3)'), 'attempt 2 to reach s3', 10_000);
      const worker = await survivor.startWorker({ concurrency: 2, pollIntervalMs: 10, sweeper: false });

      const done = await settled(survivor, job.id, 20_000);
      await worker.stop();
      const log = await logOf(survivor, job.id);
      assert.equal(done.status, 'failed', log.join('\n'));
      assert.deepEqual(events(tag), [
        'run s1 (dies-in-s3)',
        'run s2 (dies-in-s3)',
        'run s3 attempt 1 (dies-in-s3)',
        'run s3 attempt 2 (dies-in-s3)',
        'release r1 starts (survivor)',
        'release r1 (survivor)',
        'refund c1 (survivor)',
      ]);
      assert.equal(done.attempts, 3, 'one attempt beyond maxAttempts, to compensate');
      assert.equal(done.error?.code, 'HEARTBEAT_TIMEOUT');
      assert.equal(done.error?.message, 'step "s3" failed: worker stopped heartbeating (crashed or stuck); attempts exhausted: 2/2');
      assert.equal((done.error as { compensated?: boolean }).compensated, true);
      const reaped = log.lastIndexOf('running>retrying:heartbeat lost; requeued');
      assert.equal(log.filter((l) => l.includes('heartbeat lost')).length, 2, log.join('\n'));
      assert.deepEqual(log.slice(reaped), [
        'running>retrying:heartbeat lost; requeued',
        'retrying>queued:due',
        'queued>running:claimed',
        'running>running:step s3 lost with its worker on the last attempt; compensating',
        'running>running:compensated s2',
        'running>running:compensated s1',
        'running>failed:fatal',
      ]);
    });

    it('dies in s3 on its only attempt, then dies again compensating s2: the next attempt compensates s2 again, then s1', { timeout: 30_000 }, async () => {
      const tag = `${target.name}-twice`;
      await doomed('dies-in-s3');
      const job = await survivor.submit('lost.saga', { tag }, { maxAttempts: 1 });
      await waitFor(() => events(tag).includes('run s3 attempt 1 (dies-in-s3)'), 'attempt 1 to reach s3', 10_000);
      await doomed('dies-compensating');
      await waitFor(() => events(tag).includes('release r1 starts (dies-compensating)'), 'attempt 2 to compensate s2', 15_000);
      const worker = await survivor.startWorker({ concurrency: 2, pollIntervalMs: 10, sweeper: false });

      const done = await settled(survivor, job.id, 20_000);
      await worker.stop();
      const log = await logOf(survivor, job.id);
      assert.equal(done.status, 'failed', log.join('\n'));
      assert.deepEqual(events(tag), [
        'run s1 (dies-in-s3)',
        'run s2 (dies-in-s3)',
        'run s3 attempt 1 (dies-in-s3)',
        'release r1 starts (dies-compensating)',
        'release r1 starts (survivor)',
        'release r1 (survivor)',
        'refund c1 (survivor)',
      ]);
      assert.equal(done.attempts, 3);
      assert.equal(done.error?.message, 'step "s3" failed: worker stopped heartbeating (crashed or stuck); attempts exhausted: 1/1');
      assert.equal((done.error as { compensated?: boolean }).compensated, true);
      const notes = log.filter((l) => l.startsWith('running>running:') || l.includes('heartbeat lost'));
      assert.deepEqual(notes, [
        'running>retrying:heartbeat lost; requeued',
        'running>running:step s3 lost with its worker on the last attempt; compensating',
        'running>retrying:heartbeat lost; requeued',
        'running>running:compensated s2',
        'running>running:compensated s1',
      ]);
    });

    it('closes', async () => {
      for (const lh of open.reverse()) await lh.close({ drainMs: 0 });
    });
  });
}
