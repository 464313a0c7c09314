/** Lease upkeep (src/worker/lease-upkeep.ts): which of a worker's attempts are heartbeated. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { JobBus } from '../../src/channel/bus.js';
import type { JobRecord } from '../../src/core/job.js';
import type { JobQueueStore } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { Attempts, newActive } from '../../src/worker/attempt.js';
import { LeaseUpkeep } from '../../src/worker/lease-upkeep.js';
import type { Outcome } from '../../src/worker/outcome.js';

describe('lease upkeep: heartbeats', () => {
  it('heartbeats a finished attempt whose outcome still waits for the next store cycle, as well as running ones', async () => {
    const beats: string[][] = [];
    const store = {
      async heartbeat({ items }: { items: Array<{ id: string; lease: number }> }) {
        beats.push(items.map((i) => i.id));
        return items.map(() => ({ ok: true, cancelRequested: false, cancelReason: null }));
      },
    } as unknown as JobQueueStore;
    const task = defineTask({ type: 'u.beat', run: () => null });
    const job = (id: string) => ({ id, lease: 1, type: 'u.beat' }) as unknown as JobRecord;
    const attempts = new Attempts();
    const running = newActive(job('running'), task, 0);
    // Its handler returned; the outcome is queued behind a store cycle still in flight: the job is
    // still `running` in the store under this worker's lease.
    const finished = newActive(job('finished'), task, 0);
    finished.settled = true;
    finished.outcome = { stat: 'succeeded' } as unknown as Outcome;
    attempts.add(running);
    attempts.add(finished);
    const upkeep = new LeaseUpkeep({
      store,
      bus: new JobBus(),
      log: pino({ level: 'silent' }),
      clock: () => 1_000,
      workerId: 'w',
      attempts,
      heartbeatIntervalMs: 250,
    });
    await upkeep.heartbeat();
    assert.deepEqual(beats, [['running', 'finished']]);
    assert.equal(finished.nextHeartbeatAt, 1_250, 'and the next one is scheduled');
  });
});
