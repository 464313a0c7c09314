/**
 * Schedules through the library, on both stores, with an injected clock: three Longhaul
 * instances on one database tick at the same instants (one job per tick), across the spring
 * DST change in Europe/Berlin; both missed-tick policies after a downtime (the clock jumps);
 * overlap forbidden; declared schedules at open; pause, resume, update, trigger and delete.
 * Nothing here sleeps: every tick pass is called with the time the test sets.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import pino from 'pino';
import { defineSchedule, defineTask, Longhaul } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const report = defineTask({ type: 'report', async run() {} });
const strict = defineTask({ type: 'strict', input: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } }, async run() {} });
const cleanup = defineTask({ type: 'cleanup', async run() {} });
const quiet = pino({ level: 'silent' });
const at = (s: string) => Date.parse(s);
const HOUR = 3_600_000;

interface Target {
  name: string;
  /** A fresh database URL (or SQLite path) for one test. */
  database(): Promise<string>;
  cleanup(): Promise<void>;
}

const dirs: string[] = [];
const dbs: TestDatabase[] = [];
const TARGETS: Target[] = [
  {
    name: 'SQLite',
    async database() {
      const dir = mkdtempSync(join(tmpdir(), 'longhaul-sched-'));
      dirs.push(dir);
      return join(dir, 'jobs.db');
    },
    async cleanup() {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    },
  },
  {
    name: 'PostgreSQL',
    async database() {
      const db = await createTestDatabase('lh_sched');
      dbs.push(db);
      return db.url;
    },
    async cleanup() {
      for (const db of dbs.splice(0)) await db.drop();
    },
  },
];

for (const target of TARGETS) {
  describe(`schedules on ${target.name}`, () => {
    let now = 0;
    const open: Longhaul[] = [];
    after(() => target.cleanup());
    afterEach(async () => {
      for (const lh of open.splice(0)) await lh.close();
    });

    async function cluster(n: number, extra: Partial<Parameters<typeof Longhaul.open>[0]> = {}): Promise<Longhaul[]> {
      const database = await target.database();
      const out: Longhaul[] = [];
      for (let i = 0; i < n; i++) {
        const lh = await Longhaul.open({ database, tasks: [report, cleanup, strict], logger: quiet, channel: false, clock: () => now, ...extra });
        open.push(lh);
        out.push(lh);
      }
      return out;
    }

    /** Every instance runs a tick pass at the same instant, concurrently. */
    async function tickAll(lhs: Longhaul[], t: number): Promise<void> {
      now = t;
      await Promise.all(lhs.map((lh) => lh.schedules.tick(t)));
    }

    /** The tick times (metadata.tick) of the jobs a schedule submitted, in order, duplicates kept. */
    async function ticksOf(lh: Longhaul, type: string, schedule: string): Promise<string[]> {
      const page = await lh.list({ type, limit: 1000 });
      return page.items
        .filter((j) => j.metadata?.schedule === schedule)
        .map((j) => String(j.metadata?.tick))
        .sort();
    }

    it('three instances ticking together submit one job per tick, across the spring DST change in Europe/Berlin', async () => {
      now = at('2026-03-27T12:00:00Z');
      const lhs = await cluster(3);
      const [a] = lhs as [Longhaul];
      await a.schedules.create({ name: 'daily-0230', task: 'report', cron: '30 2 * * *', timezone: 'Europe/Berlin' });
      await a.schedules.create({ name: 'hourly', task: 'cleanup', cron: '0 * * * *', timezone: 'Europe/Berlin', catchUp: 'runOnce' });
      // Every 5 minutes for three days, each instance ticks at the same instant.
      for (let t = now; t <= at('2026-03-30T12:00:00Z'); t += 5 * 60_000) await tickAll(lhs, t);
      // 02:30 local does not exist on the 29th: it runs once, one hour later (03:30 CEST = 01:30Z).
      assert.deepEqual(await ticksOf(a, 'report', 'daily-0230'), ['2026-03-28T01:30:00.000Z', '2026-03-29T01:30:00.000Z', '2026-03-30T00:30:00.000Z']);
      const hourly = await ticksOf(a, 'cleanup', 'hourly');
      assert.equal(new Set(hourly).size, hourly.length, 'no tick ran twice');
      // From 13:00Z on the 27th to 12:00Z on the 30th, hourly in UTC terms too (the change skips a local hour, not a UTC one).
      assert.equal(hourly.length, 72);
      assert.ok(hourly.includes('2026-03-29T00:00:00.000Z') && hourly.includes('2026-03-29T01:00:00.000Z'), 'the hours either side of the change');
      const view = await a.schedules.get('daily-0230');
      assert.deepEqual(view.nextRuns.slice(0, 2), ['2026-03-31T00:30:00.000Z', '2026-04-01T00:30:00.000Z']);
      assert.equal(view.timezone, 'Europe/Berlin');
      assert.equal(view.lastRun?.at, '2026-03-30T00:30:00.000Z');
      assert.equal(view.lastRun?.status, 'queued');
    });

    it("missed ticks after a downtime: 'skip' runs none of them, 'runOnce' runs one", async () => {
      now = at('2026-01-05T09:30:00Z');
      const lhs = await cluster(3);
      const [a] = lhs as [Longhaul];
      await a.schedules.create({ name: 'skipper', task: 'report', cron: '0 0 * * * *', catchUp: 'skip' });
      await a.schedules.create({ name: 'catcher', task: 'cleanup', cron: '0 0 * * * *', catchUp: 'runOnce' });
      await tickAll(lhs, at('2026-01-05T10:00:01Z'));
      // Everything is down from 10:00:01 until 15:20: the ticks of 11:00 to 15:00 are missed.
      await tickAll(lhs, at('2026-01-05T15:20:00Z'));
      assert.deepEqual(await ticksOf(a, 'report', 'skipper'), ['2026-01-05T10:00:00.000Z']);
      // One run for all five missed ticks, keyed by the first of them.
      assert.deepEqual(await ticksOf(a, 'cleanup', 'catcher'), ['2026-01-05T10:00:00.000Z', '2026-01-05T11:00:00.000Z']);
      for (const name of ['skipper', 'catcher']) assert.equal((await a.schedules.get(name)).nextRuns[0], '2026-01-05T16:00:00.000Z');
      // Ticking again soon after submits nothing more; the next tick runs as usual.
      await tickAll(lhs, at('2026-01-05T15:21:00Z'));
      await tickAll(lhs, at('2026-01-05T16:00:00Z'));
      assert.deepEqual(await ticksOf(a, 'report', 'skipper'), ['2026-01-05T10:00:00.000Z', '2026-01-05T16:00:00.000Z']);
      assert.deepEqual(await ticksOf(a, 'cleanup', 'catcher'), ['2026-01-05T10:00:00.000Z', '2026-01-05T11:00:00.000Z', '2026-01-05T16:00:00.000Z']);
    });

    it('overlap forbidden: no new run while the previous one is not terminal', async () => {
      now = at('2026-02-01T00:00:30Z');
      const [a] = (await cluster(1)) as [Longhaul];
      await a.schedules.create({ name: 'single', task: 'report', cron: '0 * * * * *', overlap: false });
      await a.schedules.create({ name: 'many', task: 'cleanup', cron: '0 * * * * *' });
      await tickAll([a], at('2026-02-01T00:01:00Z'));
      await tickAll([a], at('2026-02-01T00:02:00Z'));
      assert.deepEqual(await ticksOf(a, 'report', 'single'), ['2026-02-01T00:01:00.000Z'], 'the first run is still queued');
      assert.equal((await ticksOf(a, 'cleanup', 'many')).length, 2, 'overlap allowed: both ran');
      const first = (await a.schedules.get('single')).lastRun?.jobId ?? '';
      await a.cancel(first);
      await tickAll([a], at('2026-02-01T00:03:00Z'));
      assert.deepEqual(await ticksOf(a, 'report', 'single'), ['2026-02-01T00:01:00.000Z', '2026-02-01T00:03:00.000Z']);
    });

    it('declared schedules are upserted at open: kept when unchanged, updated when the declaration changes, read-only but pausable', async () => {
      now = at('2026-04-01T00:00:00Z');
      const database = await target.database();
      const declared = defineSchedule({ name: 'nightly', task: 'report', cron: '0 3 * * *', timezone: 'Europe/Berlin', input: { kind: 'daily' } });
      const first = await Longhaul.open({ database, tasks: { report, nightly: declared }, logger: quiet, channel: false, clock: () => now });
      open.push(first);
      const v1 = await first.schedules.get('nightly');
      assert.deepEqual([v1.declared, v1.nextRuns[0], v1.input], [true, '2026-04-01T01:00:00.000Z', { kind: 'daily' }]);
      await first.schedules.pause('nightly');
      await assert.rejects(first.schedules.update('nightly', { cron: '0 4 * * *' }), { code: 'SCHEDULE_DECLARED', status: 409 });
      // A second process with the same declaration changes nothing (still paused).
      const second = await Longhaul.open({ database, tasks: [report], schedules: [declared], logger: quiet, channel: false, clock: () => now });
      open.push(second);
      assert.equal((await second.schedules.get('nightly')).paused, true);
      // A changed declaration wins at the next start; paused is kept.
      now += HOUR;
      const third = await Longhaul.open({ database, tasks: [report], schedules: [{ ...declared, cron: '0 5 * * *' }], logger: quiet, channel: false, clock: () => now });
      open.push(third);
      await third.schedules.resume('nightly');
      const v3 = await third.schedules.get('nightly');
      assert.deepEqual([v3.cron, v3.paused, v3.nextRuns[0]], ['0 5 * * *', false, '2026-04-01T03:00:00.000Z']);
      // A declaration naming an unknown task refuses to open.
      await assert.rejects(
        Longhaul.open({ database, tasks: [report], schedules: [{ name: 'bad', task: 'nope', cron: '* * * * *' }], logger: quiet, channel: false }),
        { code: 'UNKNOWN_TASK', message: 'declared schedule "bad": unknown task type "nope"' },
      );
      await assert.rejects(
        Longhaul.open({ database, tasks: [report], schedules: [{ name: 'bad', task: 'report', cron: '0 25 * * *' }], logger: quiet, channel: false }),
        { code: 'INVALID_SCHEDULE', message: /^declared schedule "bad": schedule is invalid: cron: / },
      );
    });

    it('a process without the task leaves the tick to one with it; a run refused for good skips its tick instead of sticking', async () => {
      now = at('2026-06-01T00:00:00Z');
      const [full] = (await cluster(1)) as [Longhaul];
      const database = full.config.database;
      const partial = await Longhaul.open({ database, tasks: [report], logger: quiet, channel: false, clock: () => now });
      open.push(partial);
      await full.schedules.create({ name: 'cleanups', task: 'cleanup', cron: '0 * * * *' });
      assert.deepEqual(await partial.schedules.tick(at('2026-06-01T01:00:00Z')), { fired: 0, skipped: 0, lost: 0 });
      assert.deepEqual(await full.schedules.tick(at('2026-06-01T01:00:00Z')), { fired: 1, skipped: 0, lost: 0 });
      // A stored schedule whose input the task refuses (its schema changed after the schedule was checked).
      await full.store.insertSchedule({
        schedule: { tenant: 'default', name: 'refused', task: 'strict', cron: '0 * * * *', timezone: 'UTC', input: { n: 'x' }, catchUp: 'skip', overlap: true, declared: false, paused: false, nextRunAt: at('2026-06-01T02:00:00Z'), lastRunAt: null, lastJobId: null, createdAt: now, updatedAt: now },
      });
      // 'cleanups' runs; 'refused' is skipped.
      assert.deepEqual(await full.schedules.tick(at('2026-06-01T02:00:00Z')), { fired: 1, skipped: 1, lost: 0 });
      assert.equal((await full.list({ type: 'strict' })).items.length, 0);
      const refused = await full.schedules.get('refused');
      assert.deepEqual([refused.nextRuns[0], refused.lastRun], ['2026-06-01T03:00:00.000Z', null]);
    });

    it('create, update, pause, resume, trigger and delete, with their errors', async () => {
      now = at('2026-05-01T12:00:00Z');
      const [a] = (await cluster(1)) as [Longhaul];
      const created = await a.schedules.create({ name: 'five', task: 'report', cron: '*/5 * * * *', input: { n: 1 } }, { tenant: 't1' });
      assert.deepEqual(created.nextRuns, ['2026-05-01T12:05:00.000Z', '2026-05-01T12:10:00.000Z', '2026-05-01T12:15:00.000Z', '2026-05-01T12:20:00.000Z', '2026-05-01T12:25:00.000Z']);
      await assert.rejects(a.schedules.create({ name: 'five', task: 'report', cron: '* * * * *' }, { tenant: 't1' }), { code: 'SCHEDULE_EXISTS', status: 409 });
      await assert.rejects(a.schedules.create({ name: 'x', task: 'report', cron: '* * *' }), { code: 'INVALID_SCHEDULE', status: 422, message: /has 3 fields/ });
      await assert.rejects(a.schedules.create({ name: 'x', task: 'report', cron: '* * * * *', timezone: 'Nowhere/Land' }), { code: 'INVALID_SCHEDULE', message: /timezone/ });
      await assert.rejects(a.schedules.create({ name: 'x', task: 'unknown', cron: '* * * * *' }), { code: 'UNKNOWN_TASK', status: 422 });
      // Another tenant does not see it.
      await assert.rejects(a.schedules.get('five', { tenant: 't2' }), { code: 'SCHEDULE_NOT_FOUND', status: 404 });
      assert.deepEqual((await a.schedules.list({ tenant: 't2' })).length, 0);

      const updated = await a.schedules.update('five', { cron: '0 13 * * *', input: { n: 2 } }, { tenant: 't1' });
      assert.deepEqual([updated.nextRuns[0], updated.input], ['2026-05-01T13:00:00.000Z', { n: 2 }]);
      await assert.rejects(a.schedules.update('five', { catchUp: 'always' as never }, { tenant: 't1' }), { code: 'INVALID_SCHEDULE' });

      const paused = await a.schedules.pause('five', { tenant: 't1' });
      assert.deepEqual([paused.paused, paused.nextRuns], [true, []]);
      await tickAll([a], at('2026-05-01T13:00:00Z'));
      assert.equal((await a.list({ tenant: 't1' })).items.length, 0, 'a paused schedule does not run');
      // Resumed after its tick: the next is tomorrow's (ticks passed while paused are not run).
      now = at('2026-05-01T13:30:00Z');
      assert.equal((await a.schedules.resume('five', { tenant: 't1' })).nextRuns[0], '2026-05-02T13:00:00.000Z');

      const job = await a.schedules.trigger('five', { tenant: 't1' });
      assert.deepEqual([job.type, job.input, job.metadata?.trigger], ['report', { n: 2 }, 'manual']);
      assert.equal((await a.get(job.id, { tenant: 't1' }))?.id, job.id, 'the run is in the schedule tenant');
      assert.equal((await a.schedules.get('five', { tenant: 't1' })).lastRun?.jobId, job.id);

      await a.schedules.delete('five', { tenant: 't1' });
      await assert.rejects(a.schedules.delete('five', { tenant: 't1' }), { code: 'SCHEDULE_NOT_FOUND' });
      assert.equal((await a.get(job.id, { tenant: 't1' }))?.status, 'queued', 'its runs are left alone');
    });
  });
}
