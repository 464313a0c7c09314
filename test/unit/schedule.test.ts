/**
 * The pure schedule decisions (core/schedule.ts): validation of specs, tick times across a DST
 * change, and what a tick pass does with on-time, missed and overlapping ticks.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cronExpressionProblem, decideTick, MISSED_COUNT_CAP, nextTicks, ON_TIME_GRACE_MS, type ScheduleRecord, scheduleSpecProblem, tickKey } from '../../src/core/schedule.js';

const iso = (ms: number[]) => ms.map((t) => new Date(t).toISOString());
const at = (s: string) => Date.parse(s);

function record(overrides: Partial<ScheduleRecord> = {}): ScheduleRecord {
  return {
    tenant: 'default',
    name: 's',
    task: 't',
    cron: '0 * * * *',
    timezone: 'UTC',
    input: null,
    catchUp: 'skip',
    overlap: true,
    declared: false,
    paused: false,
    nextRunAt: at('2026-01-01T10:00:00Z'),
    lastRunAt: null,
    lastJobId: null,
    createdAt: 0,
    updatedAt: 0,
    ...overrides,
  };
}

describe('schedule specs', () => {
  it('takes five or six fields and refuses others with a readable reason', () => {
    assert.equal(cronExpressionProblem('*/5 * * * *'), null);
    assert.equal(cronExpressionProblem('*/2 * * * * *'), null);
    assert.match(cronExpressionProblem('* * * *') ?? '', /has 4 fields/);
    assert.match(cronExpressionProblem('0 0 0 1 1 * 2030') ?? '', /has 7 fields/);
    assert.match(cronExpressionProblem('61 * * * *') ?? '', /invalid/);
    assert.match(cronExpressionProblem('@daily') ?? '', /nicknames/);
  });

  it('names the field at fault', () => {
    const ok = { name: 'nightly-report', task: 'report', cron: '0 3 * * *', timezone: 'Europe/Berlin' };
    assert.equal(scheduleSpecProblem(ok), null);
    assert.equal(scheduleSpecProblem({ ...ok, name: 'has space' })?.field, 'name');
    assert.equal(scheduleSpecProblem({ ...ok, name: 'a/b' })?.field, 'name');
    assert.equal(scheduleSpecProblem({ ...ok, task: '' })?.field, 'task');
    assert.equal(scheduleSpecProblem({ ...ok, cron: 'nope' })?.field, 'cron');
    assert.equal(scheduleSpecProblem({ ...ok, timezone: 'Mars/Olympus' })?.field, 'timezone');
    assert.equal(scheduleSpecProblem({ ...ok, catchUp: 'all' as never })?.field, 'catchUp');
    assert.equal(scheduleSpecProblem({ ...ok, overlap: 'no' as never })?.field, 'overlap');
  });
});

describe('tick times', () => {
  it('follow the timezone across the spring-forward change (Europe/Berlin, 2026-03-29)', () => {
    // 02:30 local does not exist on the 29th: croner runs it one hour later, 03:30 CEST = 01:30Z, once.
    const daily = { cron: '30 2 * * *', timezone: 'Europe/Berlin' };
    assert.deepEqual(iso(nextTicks(daily, at('2026-03-27T12:00:00Z'), 3)), ['2026-03-28T01:30:00.000Z', '2026-03-29T01:30:00.000Z', '2026-03-30T00:30:00.000Z']);
    // Hourly at :00 local: 01:00 CET = 00:00Z, then 03:00 CEST = 01:00Z; 02:00 local never happens.
    const hourly = { cron: '0 * * * *', timezone: 'Europe/Berlin' };
    assert.deepEqual(iso(nextTicks(hourly, at('2026-03-28T23:30:00Z'), 3)), ['2026-03-29T00:00:00.000Z', '2026-03-29T01:00:00.000Z', '2026-03-29T02:00:00.000Z']);
  });

  it('fall back once on the autumn change (02:30 local happens twice on 2026-10-25, the job runs once)', () => {
    const daily = { cron: '30 2 * * *', timezone: 'Europe/Berlin' };
    // Once, at the second 02:30 (CET, 01:30Z); the first (CEST, 00:30Z) does not fire as well.
    const ticks = nextTicks(daily, at('2026-10-24T12:00:00Z'), 2);
    assert.deepEqual(iso(ticks), ['2026-10-25T01:30:00.000Z', '2026-10-26T01:30:00.000Z']);
  });

  it('the tick key is the schedule name and the tick in UTC', () => {
    assert.equal(tickKey('nightly', at('2026-03-29T01:00:00Z')), 'schedule:nightly:2026-03-29T01:00:00.000Z');
  });
});

describe('decideTick', () => {
  const tick = at('2026-01-01T10:00:00Z');
  it('waits before the tick and while paused', () => {
    assert.deepEqual(decideTick(record(), tick - 1, false), { kind: 'wait' });
    assert.deepEqual(decideTick(record({ paused: true }), tick + 1, false), { kind: 'wait' });
    assert.deepEqual(decideTick(record({ nextRunAt: null }), tick + 1, false), { kind: 'wait' });
  });

  it('fires an on-time tick (up to the grace) and moves to the next one', () => {
    assert.deepEqual(decideTick(record(), tick + 500, false), { kind: 'fire', tickAt: tick, nextRunAt: tick + 3_600_000, missed: 0 });
    assert.equal(decideTick(record(), tick + ON_TIME_GRACE_MS, false).kind, 'fire');
  });

  it('a late pass loses no on-time tick: each fires in turn, keyed by its own time', () => {
    const s = record({ cron: '* * * * * *' });
    const now = tick + 2_500;
    const fired: number[] = [];
    for (let d = decideTick(s, now, false); d.kind === 'fire'; d = decideTick(s, now, false)) {
      fired.push(d.tickAt);
      s.nextRunAt = d.nextRunAt;
    }
    assert.deepEqual(fired, [tick, tick + 1_000, tick + 2_000]);
    assert.equal(s.nextRunAt, tick + 3_000);
  });

  it('skip: ticks older than the grace are missed and not run; the next future tick follows', () => {
    const now = tick + 3 * 3_600_000 + 20 * 60_000; // down from before 10:00 until 13:20
    assert.deepEqual(decideTick(record(), now, false), { kind: 'skip', nextRunAt: tick + 4 * 3_600_000, missed: 4, reason: 'missed' });
    assert.equal(decideTick(record(), tick + ON_TIME_GRACE_MS + 1, false).kind, 'skip');
  });

  it('skip: an on-time tick after missed ones still runs', () => {
    const now = tick + 3 * 3_600_000 + 1_000;
    const first = decideTick(record(), now, false);
    assert.deepEqual(first, { kind: 'skip', nextRunAt: tick + 3 * 3_600_000, missed: 3, reason: 'missed' });
    assert.deepEqual(decideTick(record({ nextRunAt: tick + 3 * 3_600_000 }), now, false), { kind: 'fire', tickAt: tick + 3 * 3_600_000, nextRunAt: tick + 4 * 3_600_000, missed: 0 });
  });

  it('runOnce: one run for all missed ticks, keyed by the first missed one', () => {
    const now = tick + 3 * 3_600_000 + 20 * 60_000;
    assert.deepEqual(decideTick(record({ catchUp: 'runOnce' }), now, false), { kind: 'fire', tickAt: tick, nextRunAt: tick + 4 * 3_600_000, missed: 4 });
  });

  it('overlap forbidden: no run while the previous run is open; allowed otherwise', () => {
    assert.deepEqual(decideTick(record({ overlap: false }), tick + 1, true), { kind: 'skip', nextRunAt: tick + 3_600_000, missed: 0, reason: 'overlap' });
    assert.equal(decideTick(record({ overlap: false }), tick + 1, false).kind, 'fire');
    assert.equal(decideTick(record({ overlap: true }), tick + 1, true).kind, 'fire');
  });

  it('a very long downtime of a per-second schedule is decided without walking it', () => {
    const started = performance.now();
    const now = tick + 3 * 86_400_000;
    const d = decideTick(record({ cron: '* * * * * *', catchUp: 'runOnce' }), now, false);
    assert.deepEqual(d, { kind: 'fire', tickAt: tick, nextRunAt: now - ON_TIME_GRACE_MS, missed: MISSED_COUNT_CAP });
    assert.ok(performance.now() - started < 1_000, 'the downtime is not walked tick by tick');
  });
});
