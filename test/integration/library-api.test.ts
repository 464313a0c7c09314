/**
 * The library API's refusals (DESIGN §3): unknown types, input failing the task's schema and
 * bad options throw typed errors with a stable code, an HTTP status and a message that says
 * what to fix; and nothing refused is ever stored.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import {
  defineTask,
  IdempotencyConflictError,
  InputValidationError,
  InvalidOptionsError,
  JobNotFoundError,
  JobStateConflictError,
  Longhaul,
  type LonghaulError,
  QueueFullError,
  UnknownTaskError,
} from '../../src/index.js';
import { tempDir } from '../fixtures/process-harness.js';

const quick = defineTask({ type: 'lib.quick', run: async () => 'ok' });
const typed = defineTask({
  type: 'lib.typed',
  input: {
    type: 'object',
    additionalProperties: false,
    required: ['email'],
    properties: { email: { type: 'string', format: 'email' }, count: { type: 'integer', minimum: 1, default: 1 } },
  },
  run: async () => 'ok',
});

describe('library API: typed refusals', () => {
  const tmp = tempDir('lh-lib-');
  let lh: Longhaul;
  before(async () => {
    lh = await Longhaul.open({ database: join(tmp.dir, 'lib.db'), tasks: [quick, typed], logger: pino({ level: 'silent' }), maxQueued: 50 });
  });
  after(async () => {
    await lh.close();
    tmp.remove();
  });

  async function refuses<E extends LonghaulError>(promise: Promise<unknown>, kind: new (...args: never[]) => E, message: RegExp): Promise<E> {
    const err = await promise.then(
      () => assert.fail('expected a refusal'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof kind, `expected ${kind.name}, got ${String(err)}`);
    assert.match((err as Error).message, message);
    return err as E;
  }

  it('an unknown type is an UnknownTaskError (422) naming the type', async () => {
    const err = await refuses(lh.submit('no.such.task', {}), UnknownTaskError, /unknown task type "no\.such\.task"/);
    assert.equal(err.status, 422);
    assert.equal(err.code, 'UNKNOWN_TASK');
  });

  it("input failing the task's schema is an InputValidationError with the field issues", async () => {
    const err = await refuses(lh.submit('lib.typed', { email: 'not-an-email', extra: 1 }), InputValidationError, /input for "lib\.typed" is invalid/);
    assert.equal(err.status, 422);
    const paths = err.issues.map((i) => i.path);
    assert.ok(paths.some((p) => p.includes('email')), JSON.stringify(err.issues));
    await refuses(lh.submit('lib.typed', undefined), InputValidationError, /is invalid: must be object/);
  });

  it('valid input gets its schema defaults applied', async () => {
    const job = await lh.submit('lib.typed', { email: 'a@example.com' });
    assert.deepEqual(job.input, { email: 'a@example.com', count: 1 });
  });

  const badOptions: Array<[string, unknown, RegExp]> = [
    ['a bad priority', { priority: 'urgent' }, /priority must be one of critical, high, normal, low/],
    ['runAt and delayMs together', { runAt: new Date(), delayMs: 5 }, /give runAt or delayMs, not both/],
    ['a negative delayMs', { delayMs: -1 }, /delayMs must be a non-negative number/],
    ['a NaN delayMs', { delayMs: Number.NaN }, /delayMs must be a non-negative number/],
    ['a delayMs over 100 years', { delayMs: 101 * 365 * 86_400_000 }, /at most 100 years/],
    ['an unparseable runAt', { runAt: 'next tuesday' }, /runAt must be a date, an ISO 8601 string or epoch ms/],
    ['an invalid Date', { runAt: new Date(Number.NaN) }, /runAt must be a date/],
    ['a runAt 200 years ahead', { runAt: Date.now() + 200 * 365 * 86_400_000 }, /runAt must be within 100 years of now/],
    ['a runAt 200 years ago', { runAt: '1826-01-01T00:00:00Z' }, /runAt must be within 100 years of now/],
    ['maxAttempts 0', { maxAttempts: 0 }, /maxAttempts must be an integer from 1 to 1000/],
    ['a fractional maxAttempts', { maxAttempts: 2.5 }, /maxAttempts must be an integer/],
    ['timeoutMs 0', { timeoutMs: 0 }, /timeoutMs must be a positive number/],
    ['a timeoutMs over 100 years', { timeoutMs: 4e12 }, /timeoutMs must be a positive number of ms, at most 100 years/],
    ['array metadata', { metadata: [1, 2] }, /metadata must be an object/],
    ['a class instance as metadata', { metadata: new Map() }, /metadata must be an object/],
    ['metadata that cannot be serialized', { metadata: { n: 10n } }, /metadata must be JSON-serializable/],
    ['metadata nested 100 levels deep', { metadata: nest(100) }, /metadata nests deeper than 64 levels/],
    ['an empty idempotency key', { idempotencyKey: '' }, /idempotencyKey must be a string of 1 to 255 characters/],
    ['an idempotency key of 256 characters', { idempotencyKey: 'k'.repeat(256) }, /idempotencyKey must be a string of 1 to 255/],
    ['an empty tenant', { tenant: '' }, /tenant must be a non-empty string/],
  ];
  for (const [name, options, message] of badOptions) {
    it(`${name} is an InvalidOptionsError (400)`, async () => {
      const err = await refuses(lh.submit('lib.quick', {}, options as never), InvalidOptionsError, message);
      assert.equal(err.status, 400);
      assert.equal(err.code, 'INVALID_OPTIONS');
    });
  }

  it('input that cannot be serialized or nests too deep is refused', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await refuses(lh.submit('lib.quick', cyclic), InvalidOptionsError, /input (must be JSON-serializable|nests deeper)/);
    await refuses(lh.submit('lib.quick', nest(1000)), InvalidOptionsError, /input nests deeper than 64 levels/);
    await refuses(lh.submit('lib.quick', { big: 1n }), InvalidOptionsError, /input must be JSON-serializable/);
  });

  it('limits at the edge are accepted: 64 levels, delay of exactly 100 years', async () => {
    const deep = await lh.submit('lib.quick', nest(63), { metadata: nest(63) as Record<string, unknown> });
    assert.equal(deep.status, 'queued');
    const later = await lh.submit('lib.quick', {}, { delayMs: 100 * 365 * 86_400_000 });
    assert.equal(later.status, 'pending');
    assert.ok(Number.isFinite(Date.parse(later.runAt)), 'runAt is a readable date');
    assert.equal((await lh.cancel(later.id)).status, 'cancelled');
  });

  it('refused submissions store nothing', async () => {
    const before = (await lh.list({ limit: 1000 })).items.length;
    await lh.submit('lib.quick', {}, { priority: 'nope' as never }).catch(() => {});
    await lh.submit('lib.typed', { email: 5 }).catch(() => {});
    await lh.submit('no.such', {}).catch(() => {});
    assert.equal((await lh.list({ limit: 1000 })).items.length, before);
  });

  it('get of an unknown id is null; cancel and retry of one are JobNotFoundError (404)', async () => {
    const id = '00000000-0000-7000-8000-000000000000';
    assert.equal(await lh.get(id), null);
    assert.equal((await refuses(lh.cancel(id), JobNotFoundError, /not found/)).status, 404);
    await refuses(lh.retry(id), JobNotFoundError, /not found/);
  });

  it('a tenant cannot read or cancel another tenant’s job', async () => {
    const job = await lh.submit('lib.quick', {}, { tenant: 'a', delayMs: 60_000 });
    assert.equal(await lh.get(job.id, { tenant: 'b' }), null);
    await refuses(lh.cancel(job.id, { tenant: 'b' }), JobNotFoundError, /not found/);
    assert.equal((await lh.get(job.id, { tenant: 'a' }))?.status, 'pending');
  });

  it('retry of a job that is not failed or cancelled is a JobStateConflictError (409)', async () => {
    const job = await lh.submit('lib.quick', {}, { delayMs: 60_000 });
    const err = await refuses(lh.retry(job.id), JobStateConflictError, /cannot retry job .*: it is pending/);
    assert.equal(err.status, 409);
    await lh.cancel(job.id);
    await refuses(lh.cancel(job.id), JobStateConflictError, /cannot cancel job .*: it is cancelled/);
  });

  it('an idempotency key reused with another request is an IdempotencyConflictError; the same request replays', async () => {
    const first = await lh.enqueue('lib.quick', { n: 1 }, { idempotencyKey: 'order-1', delayMs: 60_000 });
    assert.equal(first.replayed, false);
    const again = await lh.enqueue('lib.quick', { n: 1 }, { idempotencyKey: 'order-1', delayMs: 60_000 });
    assert.equal(again.replayed, true);
    assert.equal(again.job.id, first.job.id);
    const err = await refuses(lh.submit('lib.quick', { n: 2 }, { idempotencyKey: 'order-1' }), IdempotencyConflictError, /order-1/);
    assert.equal(err.status, 422);
  });

  it('a full queue is a QueueFullError (503) once maxQueued jobs wait', async () => {
    const counts = await lh.stats();
    const waiting = (counts.counts.pending ?? 0) + (counts.counts.queued ?? 0) + (counts.counts.retrying ?? 0);
    for (let i = waiting; i < 50; i++) await lh.submit('lib.quick', {}, { delayMs: 60_000 });
    const err = await refuses(lh.submit('lib.quick', {}), QueueFullError, /queue is full \(50 jobs waiting, limit 50\)/);
    assert.equal(err.status, 503);
  });

  it('defineTask refuses bad definitions with a TypeError naming the task', () => {
    assert.throws(() => defineTask({ type: 'has space', run: async () => 1 }), /task type must be 1–128 characters/);
    assert.throws(() => defineTask({ type: 'x.y', run: 'nope' as never }), /task "x\.y": run must be a function/);
    assert.throws(() => defineTask({ type: 'x.y', concurrency: 0, run: async () => 1 }), /task "x\.y": concurrency must be a positive integer/);
  });

  it('opening with an option of the wrong kind fails with the variable named', async () => {
    const prev = process.env.LONGHAUL_CONCURRENCY;
    process.env.LONGHAUL_CONCURRENCY = 'lots';
    try {
      await assert.rejects(Longhaul.open({ database: join(tmp.dir, 'other.db'), logger: pino({ level: 'silent' }) }), /LONGHAUL_CONCURRENCY must be an integer ≥ 1, got "lots"/);
    } finally {
      if (prev === undefined) delete process.env.LONGHAUL_CONCURRENCY;
      else process.env.LONGHAUL_CONCURRENCY = prev;
    }
  });
});

function nest(levels: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = { a: v };
  return v;
}
