/**
 * Unit tests for src/core: the state machine (full 9×9 matrix against a table written here),
 * backoff, error classification, UUIDv7 ids, progress merging and ETA, lifecycle decisions,
 * durations. Pure functions only: no I/O, no timers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { backoffCeiling, backoffDelay, DEFAULT_BACKOFF, reconnectDelay } from '../../src/core/backoff.js';
import { parseDuration, parseDurationList } from '../../src/core/duration.js';
import { classifyError, FatalError, RetryableError } from '../../src/core/errors.js';
import { isUuid, uuidv7, uuidv7Floor, uuidv7Time } from '../../src/core/ids.js';
import { type JobRecord, type JobSnapshot, priorityName, priorityRank, toSnapshot } from '../../src/core/job.js';
import { checkpointUsable, decideAfterFailure, decideAfterLostWorker } from '../../src/core/lifecycle.js';
import { EMPTY_PROGRESS, EtaEstimator, fractionDone, mergeProgress, type Progress } from '../../src/core/progress.js';
import { nextInOrder } from '../../src/core/snapshot-order.js';
import {
  allowedTargets,
  assertTransition,
  BACKLOG_STATES,
  canTransition,
  IllegalTransitionError,
  IMMEDIATELY_CANCELLABLE,
  isJobState,
  isTerminal,
  JOB_STATES,
  type JobState,
} from '../../src/core/states.js';

// ---- states ---------------------------------------------------------------------------------

/**
 * DESIGN §2, written out by hand as a matrix. Rows: from; columns: to, in this order:
 *   pending queued running retrying waiting succeeded failed cancelled expired
 * 'x' = allowed, '.' = forbidden. running → running is allowed: it is the log annotation
 * (cancel requested, stalled, checkpoint discarded), the only permitted self-transition.
 */
const COLUMNS: JobState[] = ['pending', 'queued', 'running', 'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired'];
const MATRIX: Record<JobState, string> = {
  //               pe qu ru re wa su fa ca ex
  pending: /*  */ '.  x  .  .  .  .  .  x  .',
  queued: /*   */ '.  .  x  .  .  .  .  x  .',
  running: /*  */ '.  .  x  x  x  x  x  x  .',
  retrying: /* */ '.  x  .  .  .  .  .  x  .',
  waiting: /*  */ '.  x  .  .  .  .  x  x  .',
  succeeded: /**/ '.  .  .  .  .  .  .  .  x',
  failed: /*   */ '.  x  .  .  .  .  .  .  .',
  cancelled: /**/ '.  x  .  .  .  .  .  .  .',
  expired: /*  */ '.  .  .  .  .  .  .  .  .',
};

function expectedAllowed(from: JobState, to: JobState): boolean {
  const cells = MATRIX[from].replace(/\s+/g, '');
  assert.equal(cells.length, 9, `matrix row ${from} must have 9 cells`);
  return cells[COLUMNS.indexOf(to)] === 'x';
}

describe('states: the 9×9 transition matrix', () => {
  it('has exactly the nine public states, in the documented order', () => {
    assert.deepEqual([...JOB_STATES], COLUMNS);
  });

  it('the expected table has 18 allowed cells (17 state changes + the running annotation)', () => {
    let n = 0;
    for (const from of COLUMNS) for (const to of COLUMNS) if (expectedAllowed(from, to)) n++;
    assert.equal(n, 18);
  });

  for (const from of COLUMNS) {
    for (const to of COLUMNS) {
      const allowed = expectedAllowed(from, to);
      it(`${from} → ${to}: ${allowed ? 'allowed' : 'forbidden'}`, () => {
        assert.equal(canTransition(from, to), allowed);
        if (allowed) {
          assert.doesNotThrow(() => assertTransition(from, to));
        } else {
          assert.throws(
            () => assertTransition(from, to),
            (err: unknown) => err instanceof IllegalTransitionError && err.from === from && err.to === to && err.message.includes(`${from} → ${to}`),
          );
        }
      });
    }
  }

  it('allowedTargets lists exactly the allowed non-self targets', () => {
    for (const from of COLUMNS) {
      const expected = COLUMNS.filter((to) => to !== from && expectedAllowed(from, to));
      assert.deepEqual([...allowedTargets(from)].sort(), expected.sort(), from);
    }
  });
});

describe('states: terminal and derived sets', () => {
  it('terminal states are exactly succeeded, failed, cancelled, expired', () => {
    assert.deepEqual(
      COLUMNS.filter((s) => isTerminal(s)),
      ['succeeded', 'failed', 'cancelled', 'expired'],
    );
  });

  it('terminal states leave only by manual retry (failed, cancelled → queued) or expiry (succeeded → expired)', () => {
    const exits = (s: JobState) => COLUMNS.filter((t) => t !== s && canTransition(s, t));
    assert.deepEqual(exits('succeeded'), ['expired']);
    assert.deepEqual(exits('failed'), ['queued']);
    assert.deepEqual(exits('cancelled'), ['queued']);
    assert.deepEqual(exits('expired'), []);
  });

  it('backlog and immediately-cancellable sets', () => {
    assert.deepEqual([...BACKLOG_STATES].sort(), ['pending', 'queued', 'retrying']);
    assert.deepEqual([...IMMEDIATELY_CANCELLABLE].sort(), ['pending', 'queued', 'retrying', 'waiting']);
    for (const s of IMMEDIATELY_CANCELLABLE) assert.ok(canTransition(s, 'cancelled'), s);
  });

  it('isJobState accepts the nine names only', () => {
    for (const s of COLUMNS) assert.ok(isJobState(s));
    for (const v of ['Running', 'done', '', null, undefined, 3, {}]) assert.equal(isJobState(v), false, String(v));
  });
});

// ---- backoff --------------------------------------------------------------------------------

describe('reconnectDelay', () => {
  it('doubles from min to max, half fixed and half random', () => {
    assert.equal(
      reconnectDelay(1, 100, 5000, () => 0),
      50,
    );
    assert.ok(reconnectDelay(1, 100, 5000, () => 0.999999) < 100);
    assert.equal(
      reconnectDelay(3, 100, 5000, () => 0),
      200,
    );
    assert.equal(
      reconnectDelay(7, 100, 5000, () => 0),
      2500,
      'capped at max',
    );
    assert.equal(
      reconnectDelay(10_000, 100, 5000, () => 0.5),
      3750,
      'no overflow after many failures',
    );
    assert.equal(
      reconnectDelay(0, 100, 5000, () => 0),
      50,
      'a zeroth attempt waits like the first',
    );
  });
});

describe('backoff', () => {
  const policy = { baseMs: 1_000, maxMs: 60_000 };

  it('ceiling doubles per attempt from baseMs', () => {
    assert.equal(backoffCeiling(policy, 1), 1_000);
    assert.equal(backoffCeiling(policy, 2), 2_000);
    assert.equal(backoffCeiling(policy, 3), 4_000);
    assert.equal(backoffCeiling(policy, 6), 32_000);
  });

  it('ceiling is capped at maxMs, also for huge attempt numbers (no Infinity/NaN)', () => {
    assert.equal(backoffCeiling(policy, 7), 60_000); // 64 000 capped
    assert.equal(backoffCeiling(policy, 100), 60_000);
    assert.equal(backoffCeiling(policy, 10_000), 60_000);
    assert.equal(backoffCeiling({ baseMs: 1, maxMs: Number.MAX_SAFE_INTEGER }, 10_000), 2 ** 52);
  });

  it('attempt 0 or negative is treated as the first attempt', () => {
    assert.equal(backoffCeiling(policy, 0), 1_000);
    assert.equal(backoffCeiling(policy, -5), 1_000);
  });

  it('full jitter: random 0 gives 0', () => {
    for (let a = 1; a <= 10; a++)
      assert.equal(
        backoffDelay(policy, a, () => 0),
        0,
      );
  });

  it('full jitter: random 0.999 gives nearly the ceiling, never above it', () => {
    assert.equal(
      backoffDelay(policy, 1, () => 0.999),
      999,
    ); // floor(0.999 · 1001)
    assert.equal(
      backoffDelay(policy, 3, () => 0.999),
      3_996,
    ); // floor(0.999 · 4001)
    assert.equal(
      backoffDelay(policy, 20, () => 0.999),
      59_940,
    ); // capped ceiling 60 000
    // The largest double below 1 reaches the ceiling exactly and not beyond.
    const justBelowOne = 1 - 2 ** -53;
    assert.equal(
      backoffDelay(policy, 1, () => justBelowOne),
      1_000,
    );
    assert.equal(
      backoffDelay(policy, 20, () => justBelowOne),
      60_000,
    );
  });

  it('full jitter: every delay is an integer in [0, ceiling]', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.integer({ min: -3, max: 80 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (baseMs, extra, attempt, r) => {
          const p = { baseMs, maxMs: baseMs + extra };
          const d = backoffDelay(p, attempt, () => r);
          return Number.isInteger(d) && d >= 0 && d <= backoffCeiling(p, attempt) && backoffCeiling(p, attempt) <= p.maxMs;
        },
      ),
    );
  });

  it('default policy is 1 s base, 60 s cap', () => {
    assert.deepEqual(DEFAULT_BACKOFF, { baseMs: 1_000, maxMs: 60_000 });
  });
});

// ---- errors ---------------------------------------------------------------------------------

describe('classifyError', () => {
  it('FatalError is fatal, with its code (default FATAL)', () => {
    assert.deepEqual(classifyError(new FatalError('bad input')), { error: { message: 'bad input', code: 'FATAL', retryable: false } });
    assert.deepEqual(classifyError(new FatalError('nope', { code: 'NO_SUCH_ROW' })).error, { message: 'nope', code: 'NO_SUCH_ROW', retryable: false });
  });

  it('FatalError keeps its cause', () => {
    const cause = new Error('root');
    assert.equal(new FatalError('x', { cause }).cause, cause);
  });

  it('RetryableError retries, and carries delayMs only when given', () => {
    const withDelay = classifyError(new RetryableError('rate limited', { delayMs: 5_000, code: 'RATE' }));
    assert.deepEqual(withDelay, { error: { message: 'rate limited', code: 'RATE', retryable: true }, delayMs: 5_000 });
    const without = classifyError(new RetryableError('flaky'));
    assert.deepEqual(without, { error: { message: 'flaky', code: 'RETRYABLE', retryable: true } });
    assert.equal('delayMs' in without, false);
  });

  it('RetryableError wins over a 4xx status', () => {
    const err = Object.assign(new RetryableError('try later'), { status: 404 });
    assert.equal(classifyError(err).error.retryable, true);
  });

  it('validation errors (ZodError by name, *ValidationError) are fatal', () => {
    const zod = new Error('Invalid input');
    zod.name = 'ZodError';
    assert.deepEqual(classifyError(zod).error, { message: 'Invalid input', code: 'ZodError', retryable: false });
    const v = new Error('bad');
    v.name = 'SchemaValidationError';
    assert.equal(classifyError(v).error.retryable, false);
    const notV = new Error('bad');
    notV.name = 'ValidationErrorish';
    assert.equal(classifyError(notV).error.retryable, true);
  });

  it('status 404 / statusCode 400 / 422 are fatal', () => {
    assert.equal(classifyError(Object.assign(new Error('not found'), { status: 404 })).error.retryable, false);
    assert.equal(classifyError(Object.assign(new Error('bad request'), { statusCode: 400 })).error.retryable, false);
    assert.equal(classifyError(Object.assign(new Error('unprocessable'), { status: 422 })).error.retryable, false);
  });

  it('status 429, 408 and 5xx retry', () => {
    for (const status of [429, 408, 500, 502, 503]) {
      assert.equal(classifyError(Object.assign(new Error(`http ${status}`), { status })).error.retryable, true, String(status));
      assert.equal(classifyError(Object.assign(new Error(`http ${status}`), { statusCode: status })).error.retryable, true, String(status));
    }
  });

  it('a non-numeric status is ignored', () => {
    assert.equal(classifyError(Object.assign(new Error('x'), { status: '404' })).error.retryable, true);
  });

  it('plain errors retry; code comes from a string `code` or the name', () => {
    assert.deepEqual(classifyError(new Error('boom')).error, { message: 'boom', code: 'Error', retryable: true });
    assert.deepEqual(classifyError(Object.assign(new Error('reset'), { code: 'ECONNRESET' })).error, { message: 'reset', code: 'ECONNRESET', retryable: true });
    assert.equal(classifyError(new TypeError('x is not a function')).error.code, 'TypeError');
    assert.equal(classifyError(new Error('')).error.message, 'Error'); // empty message falls back to the name
  });

  it('non-Error values thrown retry with code NON_ERROR_THROWN and a readable message', () => {
    assert.deepEqual(classifyError('just a string'), { error: { message: 'just a string', code: 'NON_ERROR_THROWN', retryable: true } });
    assert.deepEqual(classifyError({ a: 1 }).error, { message: '{"a":1}', code: 'NON_ERROR_THROWN', retryable: true });
    assert.equal(classifyError(42).error.message, '42');
    assert.equal(classifyError(undefined).error.message, 'undefined');
    assert.equal(classifyError(null).error.message, 'null');
    assert.equal(classifyError(10n).error.message, '10'); // JSON.stringify throws on BigInt
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    assert.equal(classifyError(circular).error.message, '[object Object]');
  });
});

// ---- ids ------------------------------------------------------------------------------------

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('uuidv7', () => {
  it('has the RFC 9562 layout: version 7, variant 10', () => {
    for (let i = 0; i < 1_000; i++) {
      const id = uuidv7();
      assert.match(id, V7);
      assert.ok(isUuid(id));
      const bytes = Buffer.from(id.replace(/-/g, ''), 'hex');
      assert.equal(bytes.length, 16);
      assert.equal((bytes[6] as number) >> 4, 7);
      assert.equal((bytes[8] as number) >> 6, 0b10);
    }
  });

  it('carries the current time', () => {
    const before = Date.now();
    const t = uuidv7Time(uuidv7());
    assert.ok(t >= before && t <= Date.now() + 5, `${t} not near ${before}`);
  });

  it('10,000 ids made in the same millisecond are strictly increasing and unique', () => {
    const ms = Date.now() + 50; // ahead of anything generated so far
    const ids: string[] = [];
    for (let i = 0; i < 10_000; i++) ids.push(uuidv7(ms));
    for (let i = 1; i < ids.length; i++) assert.ok((ids[i - 1] as string) < (ids[i] as string), `id ${i} not increasing`);
    assert.equal(new Set(ids).size, ids.length);
    for (const id of ids) assert.match(id, V7);
    // The 12-bit counter overflows a few times: the time may borrow a few following milliseconds, never go back.
    assert.equal(uuidv7Time(ids[0] as string), ms);
    const last = uuidv7Time(ids[ids.length - 1] as string);
    assert.ok(last >= ms && last <= ms + 10, `last id time ${last} drifted from ${ms}`);
  });

  it('a clock going backwards does not break monotonicity', () => {
    const a = uuidv7(Date.now() + 200);
    const b = uuidv7(Date.now() - 10_000);
    assert.ok(b > a);
  });

  it('isUuid rejects malformed strings', () => {
    for (const v of [
      '',
      'x',
      '0190b6a2-7c1d-7abc-8def-0123456789aZ',
      '0190b6a27c1d7abc8def0123456789ab',
      '0190B6A2-7C1D-7ABC-8DEF-0123456789AB',
      '0190b6a2x7c1d-7abc-8def-0123456789ab',
      '0190b6a2-7c1d-7abc-8def-0123456789a-',
      '0190b6a2-7c1d-7abc-8def-0123456789abc',
      '0190b6a2-7c1d-7abc-8def-0123456789a',
      ' 0190b6a2-7c1d-7abc-8def-0123456789a',
      '0190b6a2-7c1d-7abc-8deg-0123456789ab',
      42,
      null,
    ])
      assert.equal(isUuid(v), false, String(v));
    for (const v of ['00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0190b6a2-7c1d-7abc-8def-0123456789ab']) assert.equal(isUuid(v), true, v);
  });

  it('uuidv7Floor sorts at or below every id of that millisecond and above earlier ones', () => {
    const ms = Date.now() + 1_000;
    const id = uuidv7(ms);
    assert.ok(uuidv7Floor(ms) <= id);
    assert.ok(uuidv7Floor(ms + 1) > id);
    assert.equal(uuidv7Time(uuidv7Floor(ms)), ms);
  });

  // Last in this file: it moves the generator's clock far into the future.
  it('uuidv7Time reads back the 48-bit timestamp exactly', () => {
    for (const ms of [Date.now() + 5_000, 0x0123_4567_89ab + Date.now(), 0xfedc_ba98_7654]) {
      const id = uuidv7(ms);
      assert.equal(uuidv7Time(id), ms);
      assert.equal(id.slice(0, 8) + id.slice(9, 13), ms.toString(16).padStart(12, '0'));
    }
  });
});

// ---- progress -------------------------------------------------------------------------------

describe('mergeProgress', () => {
  const at = Date.UTC(2025, 0, 2, 3, 4, 5);

  it('items imply a percent when none is given', () => {
    const p = mergeProgress(EMPTY_PROGRESS, { itemsDone: 25, itemsTotal: 200 }, at);
    assert.equal(p.percent, 12.5);
    assert.equal(p.itemsDone, 25);
    assert.equal(p.itemsTotal, 200);
    assert.equal(p.updatedAt, new Date(at).toISOString());
    // A later itemsDone alone reuses the known total.
    assert.equal(mergeProgress(p, { itemsDone: 150 }, at).percent, 75);
    // A later itemsTotal alone reuses the known done count.
    assert.equal(mergeProgress(p, { itemsTotal: 50 }, at).percent, 50);
  });

  it('rounds to two decimals', () => {
    assert.equal(mergeProgress(EMPTY_PROGRESS, { itemsDone: 1, itemsTotal: 3 }, at).percent, 33.33);
    assert.equal(mergeProgress(EMPTY_PROGRESS, 12.3456, at).percent, 12.35);
  });

  it('an explicit percent wins over items', () => {
    const p = mergeProgress(EMPTY_PROGRESS, { percent: 90, itemsDone: 1, itemsTotal: 10 }, at);
    assert.equal(p.percent, 90);
    assert.equal(p.itemsDone, 1);
  });

  it('a bare number is a percent', () => {
    assert.equal(mergeProgress(EMPTY_PROGRESS, 42, at).percent, 42);
  });

  it('clamps to [0, 100] and maps NaN to 0', () => {
    assert.equal(mergeProgress(EMPTY_PROGRESS, 150, at).percent, 100);
    assert.equal(mergeProgress(EMPTY_PROGRESS, -5, at).percent, 0);
    assert.equal(mergeProgress(EMPTY_PROGRESS, Number.NaN, at).percent, 0);
    assert.equal(mergeProgress(EMPTY_PROGRESS, { itemsDone: 30, itemsTotal: 10 }, at).percent, 100);
  });

  it('a zero total implies nothing', () => {
    assert.equal(mergeProgress(EMPTY_PROGRESS, { itemsDone: 0, itemsTotal: 0 }, at).percent, null);
  });

  it('fields not in the update are kept; stage/message alone keep the percent', () => {
    const a = mergeProgress(EMPTY_PROGRESS, { percent: 10, stage: 'download', message: 'starting' }, at);
    const withEta: Progress = { ...a, eta: 1234 };
    const b = mergeProgress(withEta, { message: 'halfway' }, at + 1);
    assert.deepEqual(b, {
      percent: 10,
      stage: 'download',
      itemsDone: null,
      itemsTotal: null,
      message: 'halfway',
      eta: 1234,
      updatedAt: new Date(at + 1).toISOString(),
    });
  });

  it('does not mutate its input', () => {
    const before = { ...EMPTY_PROGRESS };
    mergeProgress(EMPTY_PROGRESS, 50, at);
    assert.deepEqual(EMPTY_PROGRESS, before);
  });

  it('percent is always within [0, 100] (property)', () => {
    fc.assert(
      fc.property(
        fc.record({
          percent: fc.option(fc.double(), { nil: undefined }),
          itemsDone: fc.option(fc.nat(), { nil: undefined }),
          itemsTotal: fc.option(fc.nat(), { nil: undefined }),
        }),
        (u) => {
          const p = mergeProgress(EMPTY_PROGRESS, u, at).percent;
          return p === null || (p >= 0 && p <= 100);
        },
      ),
    );
  });

  it('fractionDone', () => {
    assert.equal(fractionDone(EMPTY_PROGRESS), null);
    assert.equal(fractionDone({ ...EMPTY_PROGRESS, percent: 25 }), 0.25);
  });
});

describe('EtaEstimator', () => {
  it('is null until the samples span one second, then extrapolates the rate', () => {
    const e = new EtaEstimator();
    assert.equal(e.estimate(), null);
    assert.equal(e.observe(0, 0), null);
    assert.equal(e.observe(0.1, 500), null); // span 500 ms < 1 s
    assert.equal(e.observe(0.15, 999), null);
    assert.equal(e.observe(0.2, 1_000), 4_000); // 0.2 per second, 0.8 left
    assert.equal(e.observe(0.5, 2_500), 2_500); // 0.5 in 2.5 s, 0.5 left
  });

  it('is null while progress does not move', () => {
    const e = new EtaEstimator();
    e.observe(0.3, 0);
    assert.equal(e.observe(0.3, 5_000), null);
  });

  it('is 0 once done', () => {
    const e = new EtaEstimator();
    e.observe(0.5, 0);
    assert.equal(e.observe(1, 100), 0);
  });

  it('resets when progress goes backwards', () => {
    const e = new EtaEstimator();
    e.observe(0, 0);
    assert.equal(e.observe(0.5, 2_000), 2_000);
    assert.equal(e.observe(0.1, 3_000), null); // backwards: one sample left
    assert.equal(e.observe(0.2, 3_500), null); // span 500 ms
    assert.equal(e.observe(0.3, 4_000), 3_500); // 0.2 per second since the reset, 0.7 left
  });

  it('uses only the recent window', () => {
    const e = new EtaEstimator(10_000, 1_000);
    e.observe(0, 0);
    e.observe(0.5, 1_000); // fast start
    const eta = e.observe(0.51, 20_000); // then 0.01 in 19 s; the sample at 0 s left the window
    assert.equal(eta, Math.round((0.49 * 19_000) / 0.01));
    // Had the old sample stayed, the estimate would have been ≈ 19 s.
    assert.ok((eta as number) > 100_000);
  });
});

// ---- lifecycle ------------------------------------------------------------------------------

describe('decideAfterFailure', () => {
  const policy = { baseMs: 1_000, maxMs: 60_000 };
  const now = 1_700_000_000_000;
  const retryable = classifyError(new Error('flaky'));
  const fatal = classifyError(new FatalError('bad'));

  it('a retryable error with attempts left retries after a jittered backoff', () => {
    assert.deepEqual(
      decideAfterFailure(retryable, 1, 3, policy, now, () => 0),
      { to: 'retrying', runAt: now, error: retryable.error },
    );
    assert.deepEqual(
      decideAfterFailure(retryable, 2, 3, policy, now, () => 0.999),
      { to: 'retrying', runAt: now + 1_998, error: retryable.error },
    );
  });

  it('the backoff ceiling grows with the attempt that failed', () => {
    const d1 = decideAfterFailure(retryable, 1, 10, policy, now, () => 1 - 2 ** -53);
    const d5 = decideAfterFailure(retryable, 5, 10, policy, now, () => 1 - 2 ** -53);
    assert.equal(d1.to === 'retrying' && d1.runAt - now, 1_000);
    assert.equal(d5.to === 'retrying' && d5.runAt - now, 16_000);
  });

  it("the handler's delayMs overrides the backoff; a negative delay means now", () => {
    const d = decideAfterFailure(classifyError(new RetryableError('later', { delayMs: 7_000 })), 1, 3, policy, now, () => 0.999);
    assert.deepEqual(d, { to: 'retrying', runAt: now + 7_000, error: { message: 'later', code: 'RETRYABLE', retryable: true } });
    const neg = decideAfterFailure(classifyError(new RetryableError('later', { delayMs: -50 })), 1, 3, policy, now);
    assert.equal(neg.to === 'retrying' && neg.runAt, now);
  });

  it('a delayMs that is not a finite number falls back to the backoff (runAt stays a storable integer)', () => {
    for (const delayMs of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const d = decideAfterFailure(classifyError(new RetryableError('rate limited', { delayMs })), 2, 3, policy, now, () => 0.5);
      assert.equal(d.to, 'retrying');
      assert.equal(d.to === 'retrying' && d.runAt, now + 1_000, String(delayMs)); // floor(0.5 · 2001)
    }
    const frac = decideAfterFailure(classifyError(new RetryableError('x', { delayMs: 1_234.6 })), 1, 3, policy, now);
    assert.equal(frac.to === 'retrying' && frac.runAt, now + 1_235);
  });

  it('a fatal error fails at once, whatever the budget', () => {
    assert.deepEqual(decideAfterFailure(fatal, 1, 10, policy, now), { to: 'failed', error: fatal.error });
  });

  it('exhausted attempts fail, and the message says so', () => {
    const d = decideAfterFailure(retryable, 3, 3, policy, now);
    assert.equal(d.to, 'failed');
    assert.match(d.error.message, /^flaky \(attempts exhausted: 3\/3\)$/);
    assert.equal(d.error.code, 'Error');
    assert.equal(decideAfterFailure(retryable, 4, 3, policy, now).to, 'failed');
    assert.equal(decideAfterFailure(retryable, 1, 1, policy, now).to, 'failed');
  });

  it('does not mutate the classified error', () => {
    const c = classifyError(new Error('x'));
    decideAfterFailure(c, 5, 5, policy, now);
    assert.equal(c.error.message, 'x');
  });
});

describe('decideAfterLostWorker', () => {
  const now = 1_700_000_000_000;
  it('requeues at once while attempts remain', () => {
    const d = decideAfterLostWorker(1, 3, now);
    assert.equal(d.to, 'retrying');
    assert.equal(d.to === 'retrying' && d.runAt, now);
    assert.equal(d.error.code, 'HEARTBEAT_TIMEOUT');
    assert.equal(d.error.retryable, true);
  });
  it('fails when attempts are spent', () => {
    for (const [a, m] of [
      [3, 3],
      [5, 3],
      [1, 1],
    ] as const) {
      const d = decideAfterLostWorker(a, m, now);
      assert.equal(d.to, 'failed');
      assert.equal(d.error.retryable, false);
      assert.equal(d.error.code, 'HEARTBEAT_TIMEOUT');
      assert.ok(d.error.message.includes(`attempts exhausted: ${a}/${m}`));
    }
  });
});

describe('checkpointUsable', () => {
  it('none, usable, version-mismatch', () => {
    assert.equal(checkpointUsable(null, 1), 'none');
    assert.equal(checkpointUsable({ version: 2 }, 2), 'usable');
    assert.equal(checkpointUsable({ version: 1 }, 2), 'version-mismatch');
    assert.equal(checkpointUsable({ version: Number.NaN }, 1), 'version-mismatch'); // a corrupt checkpoint
  });
});

// ---- durations ------------------------------------------------------------------------------

describe('parseDuration', () => {
  it('parses every unit and bare milliseconds', () => {
    assert.equal(parseDuration('250ms'), 250);
    assert.equal(parseDuration('5s'), 5_000);
    assert.equal(parseDuration('5m'), 300_000);
    assert.equal(parseDuration('2h'), 7_200_000);
    assert.equal(parseDuration('1d'), 86_400_000);
    assert.equal(parseDuration('1500'), 1_500);
    assert.equal(parseDuration('0'), 0);
  });

  it('accepts decimals and surrounding/inner spaces, rounding to whole ms', () => {
    assert.equal(parseDuration('1.5s'), 1_500);
    assert.equal(parseDuration(' 2 s '), 2_000);
    assert.equal(parseDuration('0.0004s'), 0);
    assert.equal(parseDuration('1.0006s'), 1_001);
  });

  it('rejects anything else', () => {
    for (const bad of ['', ' ', 'abc', '5x', '-5s', '5 sec', '5S', '1e3', 's', '5s5', '.5s', '5.s']) {
      assert.throws(() => parseDuration(bad), /invalid duration/, JSON.stringify(bad));
    }
  });

  it('parseDurationList: the webhook schedule, empty items skipped, a bad item throws', () => {
    assert.deepEqual(parseDurationList('5s,5m,30m,2h,5h,10h'), [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000]);
    assert.deepEqual(parseDurationList('1s, ,2s,'), [1_000, 2_000]);
    assert.deepEqual(parseDurationList(''), []);
    assert.throws(() => parseDurationList('1s,nope'), /invalid duration/);
  });
});

// ---- job helpers ----------------------------------------------------------------------------

/** A running job's record, for the snapshot helpers' tests. */
function record(overrides: Partial<JobRecord> = {}): JobRecord {
  return {
    id: '0190b6a2-7c1d-7abc-8def-0123456789ab',
    tenant: 't',
    type: 'x',
    state: 'running',
    priority: 'normal',
    input: { a: 1 },
    metadata: null,
    result: undefined,
    error: null,
    attempts: 1,
    maxAttempts: 3,
    lease: 1,
    workerId: 'w',
    cancelRequested: false,
    cancelReason: null,
    cancelRequestedAt: null,
    stalled: false,
    parentId: null,
    createdAt: 0,
    startedAt: 1_000,
    finishedAt: null,
    updatedAt: 2_000,
    runAt: 0,
    expiresAt: null,
    heartbeatAt: 1_000,
    timeoutMs: null,
    heartbeatTimeoutMs: 30_000,
    stallTimeoutMs: null,
    resultTtlMs: 1_000,
    checkpoint: null,
    idempotencyKey: null,
    progress: { ...EMPTY_PROGRESS, percent: 40 },
    workflow: null,
    wait: null,
    childrenTotal: 0,
    ...overrides,
  };
}

describe('job helpers', () => {
  it('priority rank: critical < high < normal < low; unknown ranks read as normal', () => {
    assert.deepEqual((['critical', 'high', 'normal', 'low'] as const).map(priorityRank), [0, 1, 2, 3]);
    assert.equal(priorityName(0), 'critical');
    assert.equal(priorityName(3), 'low');
    assert.equal(priorityName(9), 'normal');
  });

  it('toSnapshot: ISO times, links, null result; a succeeded job shows 100 %', () => {
    const s = toSnapshot(record());
    assert.equal(s.status, 'running');
    assert.equal(s.result, null);
    assert.equal(s.startedAt, new Date(1_000).toISOString());
    assert.equal(s.finishedAt, null);
    assert.equal(s.progress.percent, 40);
    assert.deepEqual(s.links, {
      self: '/v1/jobs/0190b6a2-7c1d-7abc-8def-0123456789ab',
      events: '/v1/jobs/0190b6a2-7c1d-7abc-8def-0123456789ab/events',
      cancel: '/v1/jobs/0190b6a2-7c1d-7abc-8def-0123456789ab/cancel',
    });
    const done = toSnapshot(record({ state: 'succeeded', result: { ok: true } }));
    assert.equal(done.progress.percent, 100);
    assert.equal(done.progress.eta, 0);
    assert.deepEqual(done.result, { ok: true });
  });
});

describe('nextInOrder: what a stream sends after the last snapshot it sent', () => {
  const at = (ms: number) => new Date(1_700_000_000_000 + ms).toISOString();
  function snap(over: {
    status?: JobSnapshot['status'];
    updated?: number;
    progressAt?: number | null;
    percent?: number;
    attempts?: number;
    cancelRequested?: boolean;
  }): JobSnapshot {
    const base = toSnapshot({
      ...record(),
      state: over.status ?? 'running',
      attempts: over.attempts ?? 1,
      cancelRequested: over.cancelRequested ?? false,
      updatedAt: 1_700_000_000_000 + (over.updated ?? 0),
    });
    return { ...base, progress: { ...base.progress, percent: over.percent ?? null, updatedAt: over.progressAt == null ? null : at(over.progressAt) } };
  }

  it('the first snapshot goes out as it is', () => {
    const s = snap({ percent: 5, progressAt: 10 });
    assert.equal(nextInOrder(undefined, s), s);
  });

  it('a cancel answer read from the store carries the newer progress already sent (10 → 5 → 10 never happens)', () => {
    const sent = snap({ updated: 0, percent: 10, progressAt: 50 });
    const stored = snap({ updated: 60, percent: 5, progressAt: 20, cancelRequested: true });
    const out = nextInOrder(sent, stored) as JobSnapshot;
    assert.equal(out.cancelRequested, true);
    assert.equal(out.progress.percent, 10);
  });

  it('an older state is dropped; the same change twice is sent once', () => {
    const newer = snap({ updated: 100, percent: 30, progressAt: 90 });
    assert.equal(nextInOrder(newer, snap({ updated: 50, percent: 40, progressAt: 95 })), null);
    assert.equal(nextInOrder(newer, { ...newer }), null);
  });

  it('the end of the same attempt keeps the newest progress; success is 100 %; a new attempt takes its own', () => {
    const running = snap({ updated: 0, attempts: 1, percent: 80, progressAt: 100 });
    assert.equal((nextInOrder(running, snap({ status: 'cancelled', updated: 200, percent: 60, progressAt: 50 })) as JobSnapshot).progress.percent, 80);
    assert.equal((nextInOrder(running, snap({ status: 'succeeded', updated: 200, percent: 100, progressAt: 50 })) as JobSnapshot).progress.percent, 100);
    assert.equal((nextInOrder(running, snap({ updated: 200, attempts: 2, percent: 0, progressAt: null })) as JobSnapshot).progress.percent, 0);
  });

  it('a waiting parent read again with more children done is a change, though its times are the same', () => {
    // Without a channel (SQLite, server and workers in separate processes) a stream follows a
    // parent by reading it: its aggregate progress is computed at each read and stamped with the
    // parent's own updatedAt, which does not move while its children run.
    const first = snap({ status: 'waiting', updated: 0, percent: 10, progressAt: 0 });
    const later = snap({ status: 'waiting', updated: 0, percent: 40, progressAt: 0 });
    assert.equal((nextInOrder(first, later) as JobSnapshot | null)?.progress.percent, 40);
    assert.equal(nextInOrder(later, { ...later }), null, 'the same read twice is still sent once');
  });

  it("a waiting parent's aggregate never steps back (two worker processes publish what each sees)", () => {
    const children = (percent: number, progressAt: number) => {
      const s = snap({ status: 'waiting', updated: 0, percent, progressAt });
      return { ...s, progress: { ...s.progress, stage: 'children' } };
    };
    const fromA = children(12.99, 100);
    assert.equal(nextInOrder(fromA, children(12.79, 110)), null, 'a lower figure from another process is not sent');
    assert.equal((nextInOrder(fromA, children(33.09, 120)) as JobSnapshot).progress.percent, 33.09);
    // Once it runs again its own progress counts, lower or not.
    const resumed = snap({ status: 'running', updated: 10, percent: 5, progressAt: 130 });
    assert.equal((nextInOrder(fromA, resumed) as JobSnapshot).progress.percent, 5);
  });
});
