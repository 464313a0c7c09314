/**
 * Schedule limits (issue 36): `maxSchedules` per tenant in the tenant quotas (`"*"` for the
 * tenants not listed, 1000 otherwise), and a minimum interval between ticks (1 minute by
 * default, LONGHAUL_SCHEDULE_MIN_INTERVAL / scheduleMinIntervalMs), both refused at create with
 * a code, over the library and HTTP; and a tick refused by a job quota is logged once a minute
 * per schedule, at warn, without a stack (it was a warning with a stack per schedule per pass).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { defineSchedule, defineTask, Longhaul } from '../../src/index.js';
import { minTickIntervalMs } from '../../src/core/schedule.js';
import { resolveConfig } from '../../src/config.js';
import { call, KEY_A, problemOf, startHarness } from '../support/http-harness.js';

const report = defineTask({ type: 'report', async run() {} });
const quiet = pino({ level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'longhaul-schedule-quotas-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

async function open(extra: Partial<Parameters<typeof Longhaul.open>[0]> = {}): Promise<Longhaul> {
  return Longhaul.open({ database: join(dir, `s${n++}.db`), tasks: [report], logger: quiet, channel: false, sweepIntervalMs: 3_600_000, ...extra });
}

describe('maxSchedules per tenant', () => {
  it('its own quota, "*" for the others; a name it has is still 409; deleting makes room; concurrent creations never overshoot', async () => {
    const lh = await open({ tenantQuotas: { t1: { maxSchedules: 2 }, t3: { maxSchedules: 3 }, '*': { maxSchedules: 1 } } });
    try {
      await lh.schedules.create({ name: 'a', task: 'report', cron: '0 3 * * *' }, { tenant: 't1' });
      await lh.schedules.create({ name: 'b', task: 'report', cron: '0 4 * * *' }, { tenant: 't1' });
      await assert.rejects(lh.schedules.create({ name: 'c', task: 'report', cron: '0 5 * * *' }, { tenant: 't1' }), { code: 'SCHEDULE_QUOTA_EXCEEDED', status: 429, message: /has 2 schedules/ });
      await assert.rejects(lh.schedules.create({ name: 'a', task: 'report', cron: '0 5 * * *' }, { tenant: 't1' }), { code: 'SCHEDULE_EXISTS', status: 409 });
      await lh.schedules.create({ name: 'a', task: 'report', cron: '0 3 * * *' }, { tenant: 't2' });
      await assert.rejects(lh.schedules.create({ name: 'b', task: 'report', cron: '0 3 * * *' }, { tenant: 't2' }), { code: 'SCHEDULE_QUOTA_EXCEEDED' });
      await lh.schedules.delete('b', { tenant: 't1' });
      await lh.schedules.create({ name: 'c', task: 'report', cron: '0 5 * * *' }, { tenant: 't1' });
      const racing = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => lh.schedules.create({ name: `r${i}`, task: 'report', cron: '0 6 * * *' }, { tenant: 't3' })));
      assert.equal(racing.filter((r) => r.status === 'fulfilled').length, 3);
      assert.equal((await lh.schedules.list({ tenant: 't3' })).length, 3);
      assert.match(await lh.metrics.render(), /^longhaul_quota_refusals_total\{quota="maxSchedules"\} 11$/m);
    } finally {
      await lh.close();
    }
  });
});

describe('minimum interval between ticks', () => {
  it('the shortest gap of a cron', () => {
    const at = Date.parse('2026-06-01T00:00:00Z');
    const gap = (cron: string) => minTickIntervalMs({ cron, timezone: 'UTC' }, at);
    assert.equal(gap('* * * * * *'), 1000);
    assert.equal(gap('*/30 * * * * *'), 30_000);
    assert.equal(gap('0,1 * * * * *'), 1000);
    assert.equal(gap('* * * * *'), 60_000);
    assert.equal(gap('0,59 * * * *'), 60_000);
    assert.equal(gap('0 3 * * *'), 86_400_000);
  });

  it('1 minute by default: every second or every 30 s refused at create and update (422, cron named); every minute accepted; declared ones are the operator’s', async () => {
    const everySecond = defineSchedule({ name: 'declared-fast', task: 'report', cron: '* * * * * *' });
    const lh = await open({ schedules: [everySecond] });
    try {
      assert.equal(lh.config.scheduleMinIntervalMs, 60_000);
      await assert.rejects(lh.schedules.create({ name: 'fast', task: 'report', cron: '* * * * * *' }), (err: Error & { code?: string; status?: number; details?: unknown }) => {
        assert.equal(err.code, 'SCHEDULE_TOO_FREQUENT');
        assert.equal(err.status, 422);
        assert.match(err.message, /fires 1 s apart.*every 60 s/);
        assert.deepEqual((err.details as { path: string }[])[0]?.path, 'cron');
        return true;
      });
      await assert.rejects(lh.schedules.create({ name: 'half', task: 'report', cron: '0,30 * * * * *' }), { code: 'SCHEDULE_TOO_FREQUENT' });
      await lh.schedules.create({ name: 'minutely', task: 'report', cron: '* * * * *' });
      await assert.rejects(lh.schedules.update('minutely', { cron: '*/10 * * * * *' }), { code: 'SCHEDULE_TOO_FREQUENT' });
      assert.equal((await lh.schedules.get('declared-fast')).cron, '* * * * * *');
      assert.match(await lh.metrics.render(), /^longhaul_quota_refusals_total\{quota="minInterval"\} 3$/m);
    } finally {
      await lh.close();
    }
  });

  it('the setting: scheduleMinIntervalMs 1000 allows every second, 0 anything; LONGHAUL_SCHEDULE_MIN_INTERVAL=5m refuses every minute; a bad value is refused at start', async () => {
    const lh = await open({ scheduleMinIntervalMs: 1000 });
    try {
      await lh.schedules.create({ name: 'fast', task: 'report', cron: '* * * * * *' });
    } finally {
      await lh.close();
    }
    assert.equal(resolveConfig({}, { LONGHAUL_SCHEDULE_MIN_INTERVAL: '0' }).scheduleMinIntervalMs, 0);
    assert.equal(resolveConfig({}, { LONGHAUL_SCHEDULE_MIN_INTERVAL: '5m' }).scheduleMinIntervalMs, 300_000);
    assert.throws(() => resolveConfig({}, { LONGHAUL_SCHEDULE_MIN_INTERVAL: 'often' }), /LONGHAUL_SCHEDULE_MIN_INTERVAL must be a duration/);
    assert.throws(() => resolveConfig({ scheduleMinIntervalMs: -1 }, {}), /scheduleMinIntervalMs must be an integer/);
    const slow = await open({ scheduleMinIntervalMs: 300_000 });
    try {
      await assert.rejects(slow.schedules.create({ name: 'm', task: 'report', cron: '* * * * *' }), { code: 'SCHEDULE_TOO_FREQUENT' });
      await slow.schedules.create({ name: 'five', task: 'report', cron: '*/5 * * * *' });
    } finally {
      await slow.close();
    }
  });
});

describe('over HTTP', () => {
  it('POST /v1/schedules: 422 SCHEDULE_TOO_FREQUENT and 429 SCHEDULE_QUOTA_EXCEEDED as problem+json', async () => {
    const h = await startHarness({ tenantQuotas: { '*': { maxSchedules: 1 } } });
    try {
      const fast = await call(h.base, '/v1/schedules', { body: { name: 'fast', task: 't.quick', cron: '* * * * * *' } });
      problemOf(fast, 422, 'SCHEDULE_TOO_FREQUENT');
      assert.equal(fast.json.errors[0].path, 'cron');
      assert.equal((await call(h.base, '/v1/schedules', { key: KEY_A, body: { name: 'one', task: 't.quick', cron: '0 3 * * *' } })).status, 201);
      problemOf(await call(h.base, '/v1/schedules', { key: KEY_A, body: { name: 'two', task: 't.quick', cron: '0 3 * * *' } }), 429, 'SCHEDULE_QUOTA_EXCEEDED');
    } finally {
      await h.close();
    }
  });
});

describe('a tick refused by a job quota', () => {
  it('is logged once a minute per schedule, at warn, without a stack, counting the refusals in between', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    let now = Date.parse('2026-06-01T00:00:30Z');
    const lh = await open({ logger, clock: () => now, tenantQuotas: { '*': { maxQueued: 0 } } });
    try {
      for (const name of ['a', 'b', 'c']) await lh.schedules.create({ name, task: 'report', cron: '* * * * *' });
      const refusals = () => lines.filter((l) => /refused by a quota/.test(String(l.msg)));
      // A pass every second for two minutes: the three schedules are due from 00:01:00 on.
      for (let t = Date.parse('2026-06-01T00:01:00Z'); t < Date.parse('2026-06-01T00:03:00Z'); t += 1000) {
        now = t;
        await lh.schedules.tick(t);
      }
      const logged = refusals();
      assert.equal(logged.length, 6, `one line per schedule a minute (${logged.length})`);
      for (const l of logged) {
        assert.equal(l.level, 40);
        assert.equal(l.err, undefined, 'no error object, so no stack');
        assert.ok(!JSON.stringify(l).includes('    at '), 'no stack trace');
        assert.equal(l.code, 'TENANT_QUOTA_EXCEEDED');
      }
      assert.deepEqual(
        logged.filter((l) => l.schedule === 'a').map((l) => l.refusedSinceLastLine),
        [0, 59],
      );
      assert.equal(lines.length, logged.length, 'nothing else was logged');
    } finally {
      await lh.close();
    }
  });
});
