/**
 * The schedule part of the storage contract (ScheduleStore in src/store/store.ts): insert never
 * replaces, replace overwrites, reads per tenant, pause and resume, due schedules, and the
 * compare-and-swap advance that makes one process of many move a tick on. Run by every store's
 * test file with a factory returning a fresh, migrated, empty store. Times are explicit.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { ScheduleRecord } from '../../../src/core/schedule.js';
import type { Store } from '../../../src/store/store.js';
import { T0 } from './fixtures.js';

export function schedule(overrides: Partial<ScheduleRecord> = {}): ScheduleRecord {
  return {
    tenant: 'acme',
    name: 'nightly',
    task: 'report',
    cron: '0 3 * * *',
    timezone: 'Europe/Berlin',
    input: { big: 12345678901234567890n.toString(), nested: { list: [1, 2.5, 'x'] } },
    catchUp: 'skip',
    overlap: true,
    declared: false,
    paused: false,
    nextRunAt: T0 + 60_000,
    lastRunAt: null,
    lastJobId: null,
    createdAt: T0,
    updatedAt: T0,
    ...overrides,
  };
}

export function runScheduleContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (schedules): ${name}`, () => {
    let store: Store;
    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    it('insert reads back field for field and never replaces an existing name', async () => {
      const s = schedule();
      assert.equal(await store.insertSchedule({ schedule: s }), true);
      assert.deepEqual(await store.getSchedule({ tenant: 'acme', name: 'nightly' }), s);
      assert.equal(await store.insertSchedule({ schedule: schedule({ task: 'other' }) }), false);
      assert.equal((await store.getSchedule({ tenant: 'acme', name: 'nightly' }))?.task, 'report');
      // Names are per tenant.
      assert.equal(await store.insertSchedule({ schedule: schedule({ tenant: 'globex' }) }), true);
      assert.equal(await store.getSchedule({ tenant: 'nobody', name: 'nightly' }), null);
    });

    it('replace inserts or overwrites; null input and null nextRunAt round-trip', async () => {
      await store.replaceSchedule({ schedule: schedule() });
      const changed = schedule({ cron: '*/5 * * * * *', input: null, nextRunAt: null, paused: true, declared: true, catchUp: 'runOnce', overlap: false, lastRunAt: T0, lastJobId: 'j1' });
      await store.replaceSchedule({ schedule: changed });
      assert.deepEqual(await store.getSchedule({ tenant: 'acme', name: 'nightly' }), changed);
    });

    it('lists a tenant in name order (or every tenant), with a limit; delete says whether it found one', async () => {
      for (const n of ['b', 'a', 'c']) await store.insertSchedule({ schedule: schedule({ name: n }) });
      await store.insertSchedule({ schedule: schedule({ name: 'z', tenant: 'globex' }) });
      assert.deepEqual((await store.listSchedules({ tenant: 'acme', limit: 10 })).map((s) => s.name), ['a', 'b', 'c']);
      assert.deepEqual((await store.listSchedules({ tenant: 'acme', limit: 2 })).map((s) => s.name), ['a', 'b']);
      assert.deepEqual((await store.listSchedules({ limit: 10 })).map((s) => s.name), ['a', 'b', 'c', 'z']);
      assert.equal(await store.deleteSchedule({ tenant: 'globex', name: 'a' }), false);
      assert.equal(await store.deleteSchedule({ tenant: 'acme', name: 'a' }), true);
      assert.equal(await store.getSchedule({ tenant: 'acme', name: 'a' }), null);
    });

    it('due: not paused and nextRunAt at or before now, earliest first', async () => {
      await store.insertSchedule({ schedule: schedule({ name: 'late', nextRunAt: T0 + 2 }) });
      await store.insertSchedule({ schedule: schedule({ name: 'early', nextRunAt: T0 + 1 }) });
      await store.insertSchedule({ schedule: schedule({ name: 'future', nextRunAt: T0 + 100 }) });
      await store.insertSchedule({ schedule: schedule({ name: 'paused', nextRunAt: T0, paused: true }) });
      await store.insertSchedule({ schedule: schedule({ name: 'ended', nextRunAt: null }) });
      assert.deepEqual((await store.dueSchedules({ now: T0 + 2, limit: 10 })).map((s) => s.name), ['early', 'late']);
      assert.deepEqual((await store.dueSchedules({ now: T0 + 2, limit: 1 })).map((s) => s.name), ['early']);
    });

    it('pause keeps nextRunAt; resume may set it; an unknown schedule is null', async () => {
      await store.insertSchedule({ schedule: schedule() });
      const paused = await store.setSchedulePaused({ tenant: 'acme', name: 'nightly', paused: true, now: T0 + 5 });
      assert.deepEqual([paused?.paused, paused?.nextRunAt, paused?.updatedAt], [true, T0 + 60_000, T0 + 5]);
      assert.equal((await store.dueSchedules({ now: T0 + 120_000, limit: 10 })).length, 0);
      const resumed = await store.setSchedulePaused({ tenant: 'acme', name: 'nightly', paused: false, nextRunAt: T0 + 999, now: T0 + 6 });
      assert.deepEqual([resumed?.paused, resumed?.nextRunAt], [false, T0 + 999]);
      assert.equal(await store.setSchedulePaused({ tenant: 'acme', name: 'nope', paused: true, now: T0 }), null);
    });

    it('advance is a compare-and-swap on nextRunAt: of two advances of one tick, one applies', async () => {
      await store.insertSchedule({ schedule: schedule() });
      const tick = T0 + 60_000;
      const results = await Promise.all([
        store.advanceSchedule({ tenant: 'acme', name: 'nightly', expectedNextRunAt: tick, nextRunAt: tick + 60_000, lastRun: { at: tick, jobId: 'j1' }, now: tick }),
        store.advanceSchedule({ tenant: 'acme', name: 'nightly', expectedNextRunAt: tick, nextRunAt: tick + 60_000, lastRun: { at: tick, jobId: 'j2' }, now: tick }),
      ]);
      assert.deepEqual([...results].sort(), [false, true]);
      const after = await store.getSchedule({ tenant: 'acme', name: 'nightly' });
      assert.equal(after?.nextRunAt, tick + 60_000);
      assert.equal(after?.lastJobId, results[0] ? 'j1' : 'j2');
      // An advance without a run keeps the last run.
      assert.ok(await store.advanceSchedule({ tenant: 'acme', name: 'nightly', expectedNextRunAt: tick + 60_000, nextRunAt: null, now: tick + 60_000 }));
      const ended = await store.getSchedule({ tenant: 'acme', name: 'nightly' });
      assert.deepEqual([ended?.nextRunAt, ended?.lastRunAt, ended?.lastJobId], [null, tick, after?.lastJobId]);
    });

    it('records a run made outside a tick as the last run, nextRunAt untouched', async () => {
      await store.insertSchedule({ schedule: schedule() });
      await store.recordScheduleRun({ tenant: 'acme', name: 'nightly', at: T0 + 7, jobId: 'manual' });
      const s = await store.getSchedule({ tenant: 'acme', name: 'nightly' });
      assert.deepEqual([s?.lastRunAt, s?.lastJobId, s?.nextRunAt], [T0 + 7, 'manual', T0 + 60_000]);
    });
  });
}
