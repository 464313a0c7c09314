/**
 * Tenant quotas on waiting jobs (docs/configuration.md `tenantQuotas`): the setting and its
 * checks, the library's TenantQuotaExceededError on SQLite and PostgreSQL (single submissions,
 * all-or-nothing batches, idempotent replays still answered), the HTTP 429 with Retry-After and
 * problem+json distinct from the 503 of a full queue, and the client's typed error.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { describeFailure } from '../../src/cli/client-commands.js';
import { LonghaulApiError, LonghaulClient, TenantQuotaExceededApiError } from '../../src/client/index.js';
import { resolveConfig } from '../../src/config.js';
import { quotaFor } from '../../src/core/quotas.js';
import { defineTask, Longhaul, QueueFullError, TenantQuotaExceededError } from '../../src/index.js';
import { call, type Harness, KEY_A, KEY_B, problemOf, startHarness } from '../support/http-harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

describe('tenantQuotas setting', () => {
  it('reads the option or LONGHAUL_TENANT_QUOTAS (JSON); the option wins as a whole', () => {
    assert.deepEqual(resolveConfig({}, {}).tenantQuotas, {});
    const env = { LONGHAUL_TENANT_QUOTAS: '{"acme":{"maxQueued":10,"maxRunning":2},"*":{"maxQueued":3}}' };
    assert.deepEqual(resolveConfig({}, env).tenantQuotas, { acme: { maxQueued: 10, maxRunning: 2 }, '*': { maxQueued: 3 } });
    assert.deepEqual(resolveConfig({ tenantQuotas: { beta: { maxRunning: 1 } } }, env).tenantQuotas, { beta: { maxRunning: 1 } });
    assert.deepEqual(resolveConfig({}, { LONGHAUL_TENANT_QUOTAS: '  ' }).tenantQuotas, {});
  });

  it('refuses bad values with a message naming the setting', () => {
    const env = (v: string) => () => resolveConfig({}, { LONGHAUL_TENANT_QUOTAS: v });
    assert.throws(env('{acme'), /^Error: LONGHAUL_TENANT_QUOTAS must be JSON such as/);
    assert.throws(env('[1]'), /^Error: LONGHAUL_TENANT_QUOTAS must be an object/);
    assert.throws(env('{"acme":5}'), /^Error: LONGHAUL_TENANT_QUOTAS\["acme"\] must be an object/);
    assert.throws(env('{"acme":{"maxQueue":5}}'), /^Error: LONGHAUL_TENANT_QUOTAS\["acme"\]\.maxQueue is not a quota \(use maxQueued, maxRunning, maxUploads, maxUploadBytes, maxSchedules\)/);
    assert.throws(env('{"acme":{"maxQueued":-1}}'), /LONGHAUL_TENANT_QUOTAS\["acme"\]\.maxQueued must be an integer ≥ 0 \(got -1\)/);
    assert.throws(env('{"acme":{"maxRunning":1.5}}'), /maxRunning must be an integer ≥ 0 \(got 1\.5\)/);
    assert.throws(env('{"":{"maxQueued":1}}'), /empty tenant name/);
    assert.throws(() => resolveConfig({ tenantQuotas: { '*': { maxQueued: '5' as never } } }, {}), /^Error: tenantQuotas\["\*"\]\.maxQueued must be an integer ≥ 0 \(got "5"\)/);
  });

  it('quotaFor: the tenant’s own entry, else "*", else no limit', () => {
    const quotas = { acme: { maxQueued: 10 }, '*': { maxQueued: 3, maxRunning: 1 } };
    assert.deepEqual(quotaFor(quotas, 'acme'), { maxQueued: 10 });
    assert.deepEqual(quotaFor(quotas, 'beta'), { maxQueued: 3, maxRunning: 1 });
    assert.deepEqual(quotaFor({ acme: {} }, 'beta'), {});
    assert.deepEqual(quotaFor({}, 'toString'), {}, 'inherited names are not quotas');
  });
});

const later = defineTask({ type: 'q.later', run: async () => 'done' });

/** The library on one store: quota per tenant, the batch as a whole, replays, the global limit apart. */
function libraryCases(name: string, database: () => string) {
  describe(`library: TenantQuotaExceededError (${name})`, () => {
    let lh: Longhaul;
    const dirs: string[] = [];
    before(async () => {
      lh = await Longhaul.open({
        database: database(),
        tasks: [later],
        logger: pino({ level: 'silent' }),
        tenantQuotas: { acme: { maxQueued: 3 }, '*': { maxQueued: 2 }, unlimited: { maxRunning: 1 } },
      });
    });
    after(async () => {
      await lh?.close();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    });
    const waiting = async (tenant: string) => {
      const { counts } = await lh.stats({ tenant });
      return (counts.pending ?? 0) + (counts.queued ?? 0) + (counts.retrying ?? 0);
    };

    it('refuses the job past the tenant’s maxQueued (429), other tenants keep their own quota', async () => {
      for (let i = 0; i < 3; i++) await lh.submit('q.later', {}, { tenant: 'acme', delayMs: 60_000, idempotencyKey: i === 0 ? 'acme-0' : undefined });
      const err = await lh.submit('q.later', {}, { tenant: 'acme', delayMs: 60_000 }).then(
        () => assert.fail('expected a refusal'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof TenantQuotaExceededError, String(err));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'TENANT_QUOTA_EXCEEDED');
      assert.equal(err.tenant, 'acme');
      assert.equal(err.limit, 3);
      assert.equal(err.backlog, 3);
      assert.equal(err.retryAfterSeconds, 5);
      assert.match(err.message, /tenant "acme" is over its quota of waiting jobs: 3 pending, queued or retrying, limit 3/);
      assert.equal(await waiting('acme'), 3);
      // "*" gives 2 to a tenant not listed; a listed tenant without maxQueued has no limit.
      await lh.submit('q.later', {}, { tenant: 'other', delayMs: 60_000 });
      await lh.submit('q.later', {}, { tenant: 'other', delayMs: 60_000 });
      await assert.rejects(lh.enqueue('q.later', {}, { tenant: 'other', delayMs: 60_000 }), TenantQuotaExceededError);
      for (let i = 0; i < 4; i++) await lh.submit('q.later', {}, { tenant: 'unlimited', delayMs: 60_000 });
    });

    it('an idempotent replay over the quota is answered with the existing job', async () => {
      const again = await lh.enqueue('q.later', {}, { tenant: 'acme', delayMs: 60_000, idempotencyKey: 'acme-0' });
      assert.equal(again.replayed, true);
      assert.equal(await waiting('acme'), 3);
    });

    it('a batch is refused as a whole when it does not fit, and goes in whole when it does', async () => {
      assert.equal(await waiting('batcher'), 0);
      await lh.submit('q.later', {}, { tenant: 'batcher', delayMs: 60_000 });
      const items = [0, 1].map(() => ({ type: 'q.later', input: {}, options: { tenant: 'batcher', delayMs: 60_000 } }));
      const err = await lh.submitMany(items).then(
        () => assert.fail('expected a refusal'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof TenantQuotaExceededError, String(err));
      assert.equal(err.submitted, 2);
      assert.match(err.message, /1 pending, queued or retrying, limit 2, and the batch adds 2/);
      assert.equal(await waiting('batcher'), 1, 'no job of the refused batch was inserted');
      assert.equal((await lh.list({ tenant: 'batcher' })).items.length, 1);
      const one = await lh.enqueueMany([items[0] as (typeof items)[0]], { idempotencyKey: 'b1' });
      assert.equal(one.jobs.length, 1);
      // Full now: the same keyed batch again is a replay, answered.
      const replay = await lh.enqueueMany([items[0] as (typeof items)[0]], { idempotencyKey: 'b1' });
      assert.equal(replay.replayed, true);
      assert.equal(replay.jobs[0]?.id, one.jobs[0]?.id);
    });

    it('jobs that leave the backlog make room again', async () => {
      const [first] = (await lh.list({ tenant: 'other' })).items;
      assert.ok(first);
      await lh.cancel(first.id, { tenant: 'other' });
      await lh.submit('q.later', {}, { tenant: 'other', delayMs: 60_000 });
      await assert.rejects(lh.submit('q.later', {}, { tenant: 'other' }), TenantQuotaExceededError);
    });
  });
}

const tmp = mkdtempSync(join(tmpdir(), 'longhaul-quotas-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
libraryCases('sqlite', () => join(tmp, 'lib.db'));
let pgDb: TestDatabase | undefined;
before(async () => {
  pgDb = await createTestDatabase('lh_quotas');
});
after(async () => {
  await pgDb?.drop();
});
libraryCases('postgres', () => (pgDb as TestDatabase).url);

describe('HTTP 429 TENANT_QUOTA_EXCEEDED', () => {
  let h: Harness;
  before(async () => {
    // tenantA may have 2 waiting; tenantB none of its own, but the queue as a whole holds 4.
    h = await startHarness({ worker: false, maxQueued: 4, tenantQuotas: { tenantA: { maxQueued: 2 } } });
  });
  after(async () => {
    await h?.close();
  });

  const body = { type: 't.quick', delayMs: 60_000 };

  it('answers 429 with Retry-After and problem+json past the tenant’s quota; 200 to a replay; a batch as a whole', async () => {
    assert.equal((await call(h.base, '/v1/jobs', { body, headers: { 'idempotency-key': 'a1' } })).status, 202);
    assert.equal((await call(h.base, '/v1/jobs', { body })).status, 202);
    const res = await call(h.base, '/v1/jobs', { body });
    const p = problemOf(res, 429, 'TENANT_QUOTA_EXCEEDED');
    assert.equal(res.headers.get('retry-after'), '5');
    assert.equal(p.title, 'Too Many Requests');
    assert.match(String(p.detail), /tenant "tenantA" is over its quota of waiting jobs: 2 pending, queued or retrying, limit 2/);
    const replay = await call(h.base, '/v1/jobs', { body, headers: { 'idempotency-key': 'a1' } });
    assert.equal(replay.status, 200);
    const batch = await call(h.base, '/v1/jobs', { body: [body] });
    problemOf(batch, 429, 'TENANT_QUOTA_EXCEEDED');
    assert.equal(batch.headers.get('retry-after'), '5');
  });

  it('the client throws a TenantQuotaExceededApiError with the Retry-After; the CLI prints one readable line', async () => {
    const client = new LonghaulClient({ baseUrl: h.base, apiKey: KEY_A });
    const err = await client.submit('t.quick', {}, { delayMs: 60_000 }).then(
      () => assert.fail('expected a refusal'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof TenantQuotaExceededApiError, String(err));
    assert.ok(err instanceof LonghaulApiError);
    assert.equal(err.status, 429);
    assert.equal(err.code, 'TENANT_QUOTA_EXCEEDED');
    assert.equal(err.retryAfterMs, 5_000);
    assert.equal(
      describeFailure(err, {}),
      '429 TENANT_QUOTA_EXCEEDED: tenant "tenantA" is over its quota of waiting jobs: 2 pending, queued or retrying, limit 2; try again in 5 s',
    );
  });

  it('a full queue is still the global 503 QUEUE_FULL, for a tenant within its quota', async () => {
    assert.equal((await call(h.base, '/v1/jobs', { key: KEY_B, body })).status, 202);
    assert.equal((await call(h.base, '/v1/jobs', { key: KEY_B, body })).status, 202);
    const res = await call(h.base, '/v1/jobs', { key: KEY_B, body });
    problemOf(res, 503, 'QUEUE_FULL');
    assert.equal(res.headers.get('retry-after'), '5');
    // The library says the same with its own error types.
    await assert.rejects(h.lh.submit('t.quick', {}, { tenant: 'tenantB' }), QueueFullError);
    // The client: an ordinary LonghaulApiError (503), not the quota's type.
    const full = await new LonghaulClient({ baseUrl: h.base, apiKey: KEY_B }).submit('t.quick', {}).then(
      () => assert.fail('expected a refusal'),
      (e: unknown) => e,
    );
    assert.ok(full instanceof LonghaulApiError && !(full instanceof TenantQuotaExceededApiError) && full.status === 503);
  });
});
