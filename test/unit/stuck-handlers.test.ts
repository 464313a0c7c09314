/** Stuck handlers (src/worker/stuck-handlers.ts): which handlers are abandoned, and when the worker turns unhealthy. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { JobBus } from '../../src/channel/bus.js';
import type { JobRecord } from '../../src/core/job.js';
import { defineTask } from '../../src/task-api/define.js';
import { type Active, newActive } from '../../src/worker/attempt.js';
import { StuckHandlers } from '../../src/worker/stuck-handlers.js';

const task = defineTask({ type: 'u.stuck', run: () => null });
let seq = 0;
function started(at: number): Active {
  const a = newActive({ id: `job-${++seq}`, lease: 1, type: 'u.stuck', tenant: 'default' } as unknown as JobRecord, task, 0);
  a.started = true;
  a.startedAt = at;
  return a;
}

describe('stuck handlers', () => {
  it('abandons a started handler once its signal fired for a cancel, a timeout or a lost lease more than the drain period ago, and no other', () => {
    const stuck = new StuckHandlers({ log: pino({ level: 'silent' }), bus: new JobBus(), abandonAfterMs: 1000, maxPending: 10 });
    const mk = (kind: 'cancelled' | 'timeout' | 'lease-lost' | 'shutdown' | 'suspended' | null, abortedAt: number) => {
      const a = started(0);
      if (kind !== null) {
        a.abortState.abort(kind);
        a.abortState.at = abortedAt;
      }
      return a;
    };
    const cancelled = mk('cancelled', 100);
    const timedOut = mk('timeout', 100);
    const leaseLost = mk('lease-lost', 100);
    const recent = mk('timeout', 900);
    const shutdown = mk('shutdown', 100); // the worker's stop() hands it back itself
    const suspended = mk('suspended', 100);
    const notAborted = mk(null, 0);
    const returned = mk('timeout', 100);
    returned.returned = true;
    const notStarted = mk('timeout', 100);
    notStarted.started = false;
    // Aborted while it waited for a slot (claimed ahead, cancel seen): the drain counts from its start.
    const lateStart = mk('cancelled', 100);
    lateStart.startedAt = 800;
    const all = [cancelled, timedOut, leaseLost, recent, shutdown, suspended, notAborted, returned, notStarted, lateStart];
    assert.deepEqual(stuck.due(all, 1500), [cancelled, timedOut, leaseLost]);
    assert.deepEqual(stuck.due(all, 1900), [cancelled, timedOut, leaseLost, recent, lateStart]);
    stuck.abandon(cancelled, 1900);
    assert.equal(cancelled.abandoned, true);
    assert.deepEqual(stuck.due(all, 1900), [timedOut, leaseLost, recent, lateStart]);
  });

  it('is unhealthy while more than maxPending abandoned handlers have not returned; counts and announces each', () => {
    const bus = new JobBus();
    const events: string[] = [];
    bus.on('attempt:abandoned', ({ job }) => events.push(`abandoned ${job.id}`));
    bus.on('attempt:abandoned-returned', ({ job }) => events.push(`returned ${job.id}`));
    const stuck = new StuckHandlers({ log: pino({ level: 'silent' }), bus, abandonAfterMs: 0, maxPending: 1 });
    const [a, b] = [started(0), started(0)] as [Active, Active];
    assert.deepEqual(stuck.health, { healthy: true, abandonedPending: 0 });
    stuck.abandon(a);
    assert.deepEqual(stuck.health, { healthy: true, abandonedPending: 1 });
    stuck.abandon(b);
    assert.equal(stuck.health.healthy, false);
    assert.equal(stuck.health.abandonedPending, 2);
    stuck.returned(a);
    assert.deepEqual(stuck.health, { healthy: true, abandonedPending: 1 });
    assert.deepEqual(events, [`abandoned ${a.job.id}`, `abandoned ${b.job.id}`, `returned ${a.job.id}`]);
  });

  it('refuses a negative or fractional setting', () => {
    const o = { log: pino({ level: 'silent' }), bus: new JobBus() };
    assert.throws(() => new StuckHandlers({ ...o, abandonAfterMs: -1, maxPending: 1 }), /abandonAfterMs/);
    assert.throws(() => new StuckHandlers({ ...o, abandonAfterMs: 1, maxPending: 1.5 }), /maxAbandonedHandlers/);
  });
});
