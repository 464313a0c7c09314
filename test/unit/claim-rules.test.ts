/**
 * The claim rules (core/claim-plan.ts) and how tasks and the config declare them: the planner
 * never exceeds a room under random inputs, and bad declarations are refused by name.
 * The stores' application of the rules is the store contract's (claim-limits.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { resolveConfig } from '../../src/config.js';
import { type ClaimCandidate, keyOf, perGroupFetch, planClaim, queuePlace, STRICT_LEVEL_MS } from '../../src/core/claim-plan.js';
import { InputValidationError } from '../../src/core/errors.js';
import { prepare } from '../../src/facade/prepare.js';
import { defineTask } from '../../src/task-api/define.js';

describe('planClaim', () => {
  it('takes no more than the claim, each type, tenant and key allow, each candidate once', () => {
    const candidate = fc.record({
      type: fc.constantFrom('a', 'b'),
      tenant: fc.constantFrom('t1', 't2', 't3'),
      rank: fc.integer({ min: 0, max: 3 }),
      runAt: fc.integer({ min: 0, max: 1_000_000 }),
      key: fc.option(fc.constantFrom('k1', 'k2'), { nil: null }),
    });
    fc.assert(
      fc.property(
        fc.array(candidate, { maxLength: 60 }),
        fc.integer({ min: 0, max: 30 }),
        fc.record({ a: fc.integer({ min: 0, max: 20 }), b: fc.integer({ min: 0, max: 20 }) }),
        fc.record({ t1: fc.integer({ min: 0, max: 10 }), t2: fc.integer({ min: 0, max: 10 }) }),
        fc.record({ k1: fc.integer({ min: 0, max: 5 }) }),
        (raw, limit, typeRooms, tenantRooms, keyRooms) => {
          const candidates: ClaimCandidate[] = raw.map((c, i) => ({ ...c, id: `id-${String(i).padStart(3, '0')}` }));
          const keyRoom = new Map([
            [keyOf('a', 'k1'), keyRooms.k1],
            [keyOf('b', 'k1'), keyRooms.k1],
          ]);
          const ids = planClaim({
            candidates,
            limit,
            agingMs: 1000,
            typeRoom: new Map(Object.entries(typeRooms)),
            tenantRunning: new Map([['t1', 3]]),
            tenantRoom: new Map(Object.entries(tenantRooms)),
            keyRoom,
          });
          assert.ok(ids.length <= limit);
          assert.equal(new Set(ids).size, ids.length);
          const picked = ids.map((id) => candidates.find((c) => c.id === id) as ClaimCandidate);
          const count = (f: (c: ClaimCandidate) => boolean) => picked.filter(f).length;
          for (const [t, room] of Object.entries(typeRooms)) assert.ok(count((c) => c.type === t) <= room);
          for (const [t, room] of Object.entries(tenantRooms)) assert.ok(count((c) => c.tenant === t) <= room);
          for (const type of ['a', 'b']) assert.ok(count((c) => c.type === type && c.key === 'k1') <= keyRooms.k1);
          // Something is taken whenever something could be, given what a store passes: candidates
          // only of types and keys with room (tenants may be full).
          const storeLike = candidates.every((c) => ((typeRooms as Record<string, number>)[c.type] ?? 0) > 0 && (c.key !== 'k1' || keyRooms.k1 > 0));
          const possible = candidates.some((c) => ((tenantRooms as Record<string, number>)[c.tenant] ?? 1) > 0);
          if (limit > 0 && storeLike && possible) assert.ok(ids.length > 0, 'nothing taken');
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('queue places: aging moves one level per agingMs; strict levels outrank any time', () => {
    assert.equal(queuePlace(3, 0, 60_000), 180_000);
    assert.ok(queuePlace(1, 4_000_000_000_000, null) < queuePlace(2, 0, null));
    assert.equal(queuePlace(0, 5, null), 5);
    assert.ok(3 * STRICT_LEVEL_MS + 4_102_444_800_000 < Number.MAX_SAFE_INTEGER);
  });

  it('reads all it may take from a lone tenant, and an even share (at least 8) from many', () => {
    assert.deepEqual([perGroupFetch(50, 1), perGroupFetch(50, 2), perGroupFetch(50, 10), perGroupFetch(50, 64), perGroupFetch(3, 10)], [50, 50, 10, 8, 3]);
  });
});

describe('declaring limits', () => {
  const base = { type: 't.limits', run: () => null };

  it('defineTask refuses bad rate limits and key limits by name', () => {
    assert.throws(() => defineTask({ ...base, rateLimit: { max: 0, perMs: 1000 } }), /rateLimit.max must be a positive integer/);
    assert.throws(() => defineTask({ ...base, rateLimit: { max: 5, perMs: 0.5 } }), /rateLimit.perMs must be a positive integer/);
    assert.throws(() => defineTask({ ...base, rateLimit: 5 as never }), /rateLimit must be \{ max, perMs \}/);
    assert.throws(() => defineTask({ ...base, keyConcurrency: 2 }), /keyConcurrency needs a concurrencyKey/);
    assert.throws(() => defineTask({ ...base, concurrencyKey: 'customer' as never }), /concurrencyKey must be a function/);
    assert.throws(() => defineTask({ ...base, concurrencyKey: () => 'x', keyConcurrency: 0 }), /keyConcurrency must be a positive integer/);
    const t = defineTask({ ...base, concurrencyKey: (i: unknown) => String(i), rateLimit: { max: 5, perMs: 1000 } });
    assert.deepEqual([t.keyConcurrency, t.rateLimit], [1, { max: 5, perMs: 1000 }]);
  });

  it('the concurrency key is computed at submission, and a key that is not a non-empty string is a 422', () => {
    const task = defineTask({ type: 'k', concurrencyKey: (input: unknown) => (input as { customer?: unknown }).customer as string, run: () => null });
    const ctx = { tasks: new Map([['k', task]]), config: resolveConfig({}, {}) };
    const job = prepare(ctx, 'k', { customer: 'acme' }, {}, 1_700_000_000_000);
    assert.equal((job as { concurrencyKey: string }).concurrencyKey, 'acme');
    for (const input of [{}, { customer: '' }, { customer: 42 }, { customer: 'x'.repeat(256) }]) {
      assert.throws(
        () => prepare(ctx, 'k', input, {}, 1_700_000_000_000),
        (err) => err instanceof InputValidationError && /concurrencyKey must give a non-empty string/.test(err.message),
      );
    }
    const throwing = defineTask({
      type: 'k2',
      concurrencyKey: () => {
        throw new Error('no customer');
      },
      run: () => null,
    });
    assert.throws(
      () => prepare({ tasks: new Map([['k2', throwing]]), config: ctx.config }, 'k2', {}, {}, 0),
      (err) => err instanceof InputValidationError && /concurrencyKey failed on this input: no customer/.test(err.message),
    );
  });

  it('priority aging: 5 min by default, a duration or off from LONGHAUL_PRIORITY_AGING, a positive integer or null as an option', () => {
    assert.equal(resolveConfig({}, {}).priorityAgingMs, 300_000);
    assert.equal(resolveConfig({}, { LONGHAUL_PRIORITY_AGING: '10m' }).priorityAgingMs, 600_000);
    assert.equal(resolveConfig({}, { LONGHAUL_PRIORITY_AGING: 'off' }).priorityAgingMs, null);
    assert.equal(resolveConfig({ priorityAgingMs: null }, {}).priorityAgingMs, null);
    assert.throws(() => resolveConfig({}, { LONGHAUL_PRIORITY_AGING: 'soon' }), /LONGHAUL_PRIORITY_AGING must be a duration/);
    assert.throws(() => resolveConfig({}, { LONGHAUL_PRIORITY_AGING: '0' }), /LONGHAUL_PRIORITY_AGING must be a positive duration/);
    assert.throws(() => resolveConfig({ priorityAgingMs: -1 }, {}), /priorityAgingMs must be a positive integer/);
  });
});
