/**
 * Tenant `maxRunning` (docs/limits.md) through the library on SQLite and PostgreSQL: the
 * setting becomes the claims' caps (core/quotas.ts runningCaps), and a worker with free slots
 * runs at most that many of a capped tenant's jobs while another tenant's jobs run beside them.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { runningCaps } from '../../src/core/quotas.js';
import { defineTask, Longhaul } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

describe('runningCaps', () => {
  it('maps maxRunning per tenant and "*" to the claims’ caps; listed tenants without one are uncapped', () => {
    assert.equal(runningCaps({}), undefined);
    assert.equal(runningCaps({ acme: { maxQueued: 5 } }), undefined);
    assert.deepEqual(runningCaps({ acme: { maxRunning: 2 } }), { byTenant: { acme: 2 } });
    assert.deepEqual(runningCaps({ acme: { maxQueued: 5 }, '*': { maxRunning: 1 } }), { byTenant: { acme: null }, others: 1 });
  });
});

/** Jobs that hold their slot until released; the test counts them while they run. */
const running = new Map<string, number>();
let release = false;
const hold = defineTask({
  type: 'cap.hold',
  async run(_input, ctx) {
    running.set(ctx.job.tenant, (running.get(ctx.job.tenant) ?? 0) + 1);
    while (!release) await sleep(10);
    running.set(ctx.job.tenant, (running.get(ctx.job.tenant) ?? 0) - 1);
    return null;
  },
});

function cases(name: string, database: () => string) {
  describe(`tenant maxRunning on ${name}`, () => {
    it('a worker with 10 free slots runs 2 of the capped tenant’s jobs and all 3 of the other’s', async () => {
      running.clear();
      release = false;
      const lh = await Longhaul.open({ database: database(), tasks: [hold], logger: pino({ level: 'silent' }), tenantQuotas: { capped: { maxRunning: 2 } } });
      try {
        await lh.enqueueMany(Array.from({ length: 6 }, () => ({ type: 'cap.hold', options: { tenant: 'capped' } })));
        await lh.enqueueMany(Array.from({ length: 3 }, () => ({ type: 'cap.hold', options: { tenant: 'free' } })));
        const worker = await lh.startWorker({ concurrency: 10 });
        const deadline = Date.now() + 15_000;
        while ((running.get('free') ?? 0) < 3 && Date.now() < deadline) await sleep(20);
        await sleep(300); // time for a claim that would overstep the cap
        assert.equal(running.get('free'), 3);
        assert.equal(running.get('capped'), 2);
        release = true;
        const done = Date.now() + 20_000;
        while ((await lh.stats()).counts.succeeded < 9 && Date.now() < done) await sleep(50);
        assert.equal((await lh.stats()).counts.succeeded, 9, 'the capped tenant’s other jobs ran as places freed');
        await worker.stop();
      } finally {
        release = true;
        await lh.close();
      }
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'longhaul-caps-'));
after(() => rmSync(dir, { recursive: true, force: true }));
cases('SQLite', () => join(dir, 'caps.db'));

let pgDb: TestDatabase;
before(async () => {
  pgDb = await createTestDatabase('lh_caps');
});
after(async () => {
  await pgDb?.drop();
});
cases('PostgreSQL', () => pgDb.url);
