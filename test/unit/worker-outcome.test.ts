/**
 * worker/outcome.ts: how an attempt ends, decided without a store or a worker. Each branch's
 * write (the builder of core/transitions.ts it must match), the counter it moves, and the failed
 * attempt it asks to log.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FatalError, RetryableError } from '../../src/core/errors.js';
import { canTransition } from '../../src/core/states.js';
import { afterFailure, COMPENSATION_EXTRA_ATTEMPTS, endCancelled, failFatal, handBack, succeed, type TransitionParams } from '../../src/core/transitions.js';
import { emptyWorkflow, type WorkflowState } from '../../src/core/workflow.js';
import { decideOutcome, leftoverOutcome, type Outcome, type OutcomeJob, type OutcomeTask, type OutcomeWorker, sagaOutcome } from '../../src/worker/outcome.js';

const NOW = 1_700_000_000_000;
const WORKER: OutcomeWorker = { id: 'w1', resultTtlMs: 3_600_000 };
const TASK: OutcomeTask = { backoff: { baseMs: 1_000, maxMs: 60_000 }, resultTtlMs: undefined };
/** The jitter's draw: half the ceiling. */
const HALF = () => 0.5;

function job(overrides: Partial<OutcomeJob> = {}): OutcomeJob {
  return { id: 'j1', state: 'running', lease: 4, attempts: 1, maxAttempts: 3, timeoutMs: 2_000, resultTtlMs: 60_000, ...overrides };
}

/** A builder's write with the stack of `thrown` added: the attempt history's copy (never on the job). */
function withStack(write: TransitionParams, thrown: Error): TransitionParams {
  return { ...write, patch: { ...write.patch, stack: thrown.stack as string } };
}

function assertAllowed(o: Outcome): void {
  assert.ok(canTransition(o.write.from, o.write.to), `${o.write.from} → ${o.write.to} is allowed`);
  assert.equal(o.write.lease, 4, 'fenced by the lease');
  assert.equal(o.write.workerId, 'w1');
  assert.equal(o.write.at, NOW);
}

describe('decideOutcome', () => {
  it('a returned value: succeeded with a JSON copy of it, kept for the task’s TTL, else the job’s', () => {
    const value = { n: 1, at: new Date(0) };
    const o = decideOutcome(job(), { ...TASK, resultTtlMs: 5_000 }, WORKER, { ok: true, value }, null, NOW);
    assert.deepEqual(o, { write: succeed(job(), 'w1', NOW, { n: 1, at: '1970-01-01T00:00:00.000Z' }, 5_000), stat: 'succeeded', failure: null });
    assertAllowed(o);
    const byJob = decideOutcome(job(), TASK, WORKER, { ok: true, value: undefined }, null, NOW);
    assert.equal(byJob.write.patch?.expiresAt, NOW + 60_000);
    assert.equal(byJob.write.patch?.result, null, 'undefined is stored as null');
  });

  it('a value returned after a cancel or timeout still succeeds: the handler finished its work', () => {
    for (const abort of ['cancelled', 'timeout', 'shutdown'] as const) {
      const o = decideOutcome(job(), TASK, WORKER, { ok: true, value: 7 }, abort, NOW);
      assert.equal(o.stat, 'succeeded', abort);
      assert.equal(o.write.to, 'succeeded', abort);
    }
  });

  it('an unstorable result: failed at once, nothing thrown to log, the reason in the error', () => {
    const o = decideOutcome(job(), TASK, WORKER, { ok: true, value: { s: 'bad \u0000 text' } }, null, NOW);
    assert.equal(o.stat, 'failed');
    assert.equal(o.write.patch?.error?.code, 'UNSTORABLE_RESULT');
    assert.deepEqual(o.write, failFatal(job(), 'w1', NOW, o.write.patch?.error as never));
    assert.deepEqual(o.failure, { thrown: null, error: o.write.patch?.error, next: 'failed', runAt: undefined });
    assertAllowed(o);
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    const notJson = decideOutcome(job(), TASK, WORKER, { ok: true, value: cyclic }, null, NOW);
    assert.equal(notJson.write.patch?.error?.code, 'RESULT_NOT_SERIALIZABLE');
    assert.equal(notJson.write.reason, 'fatal');
  });

  it('a fatal error: failed, not retried, however many attempts remain', () => {
    const thrown = new FatalError('no such account', { code: 'NO_ACCOUNT' });
    const o = decideOutcome(job(), TASK, WORKER, { ok: false, error: thrown }, null, NOW);
    assert.equal(o.stat, 'failed');
    assert.equal(o.write.to, 'failed');
    assert.equal(o.write.reason, 'fatal');
    assert.equal(o.write.patch?.error?.code, 'NO_ACCOUNT');
    assert.deepEqual(o.failure, { thrown, error: o.write.patch?.error, next: 'failed', runAt: undefined });
    assertAllowed(o);
  });

  it('a retryable error: retrying after the backoff (jittered), or after the delay the error asks for', () => {
    const thrown = new Error('flaky');
    const o = decideOutcome(job({ attempts: 2 }), TASK, WORKER, { ok: false, error: thrown }, null, NOW, HALF);
    // Attempt 2's ceiling is 2000 ms; half of [0, 2000] is 1000.
    const runAt = NOW + 1_000;
    assert.deepEqual(o.write, withStack(afterFailure(job({ attempts: 2 }), 'w1', NOW, { to: 'retrying', runAt, error: o.write.patch?.error as never }), thrown));
    assert.match(o.write.patch?.stack ?? '', /^Error: flaky\n\s+at /);
    assert.equal(o.stat, 'retried');
    assert.equal(o.write.reason, 'retry scheduled');
    assert.equal(o.write.patch?.runAt, runAt);
    assert.equal(o.write.patch?.error?.retryable, true);
    assert.deepEqual(o.failure, { thrown, error: o.write.patch?.error, next: 'retrying', runAt });
    assertAllowed(o);
    const asked = decideOutcome(job(), TASK, WORKER, { ok: false, error: new RetryableError('later', { delayMs: 7_000 }) }, null, NOW, HALF);
    assert.equal(asked.write.patch?.runAt, NOW + 7_000);
  });

  it("a thrown Error's stack goes with the write (cut, storable); a thrown string has none", () => {
    const long = new Error('deep');
    long.stack = `Error: deep\n${'    at frame (x.js:1:1)\n'.repeat(1000)}\u0000`;
    const o = decideOutcome(job(), TASK, WORKER, { ok: false, error: long }, null, NOW, HALF);
    const stack = o.write.patch?.stack ?? '';
    assert.equal(stack.length, 8192 + 1, 'cut to 8192 characters and an ellipsis');
    assert.ok(stack.endsWith('…'));
    const nul = decideOutcome(job(), TASK, WORKER, { ok: false, error: Object.assign(new Error('n'), { stack: 'Error: n\u0000' }) }, null, NOW, HALF);
    assert.equal(nul.write.patch?.stack?.includes('\u0000'), false, 'U+0000 is escaped');
    const str = decideOutcome(job(), TASK, WORKER, { ok: false, error: 'just a string' }, null, NOW, HALF);
    assert.equal(str.write.patch?.stack, undefined);
    assert.equal(str.write.patch?.error?.code, 'NON_ERROR_THROWN');
  });

  it('attempts exhausted: failed, the error says so', () => {
    const o = decideOutcome(job({ attempts: 3 }), TASK, WORKER, { ok: false, error: new Error('flaky') }, null, NOW, HALF);
    assert.equal(o.stat, 'failed');
    assert.equal(o.write.to, 'failed');
    assert.equal(o.write.reason, 'attempts exhausted');
    assert.match(o.write.patch?.error?.message ?? '', /attempts exhausted: 3\/3/);
    assert.equal(o.failure?.next, 'failed');
    assertAllowed(o);
  });

  it('an error after a cancel: cancelled, nothing logged as a failure', () => {
    const o = decideOutcome(job(), TASK, WORKER, { ok: false, error: new Error('aborted') }, 'cancelled', NOW);
    assert.deepEqual(o, { write: endCancelled(job(), 'w1', NOW, 'cancelled', 'cancelled'), stat: 'cancelled', failure: null });
    assert.equal(o.write.patch?.error?.code, 'CANCELLED');
    assertAllowed(o);
  });

  it('an error after a timeout: cancelled with TIMEOUT, logged as a failed attempt', () => {
    const thrown = new Error('aborted');
    const o = decideOutcome(job(), TASK, WORKER, { ok: false, error: thrown }, 'timeout', NOW);
    assert.deepEqual(o.write, withStack(endCancelled(job(), 'w1', NOW, 'timeout', 'timeout'), thrown));
    assert.equal(o.stat, 'cancelled');
    assert.deepEqual(o.write.patch?.error, { message: 'timed out after 2000 ms', code: 'TIMEOUT', retryable: false });
    assert.deepEqual(o.failure, { thrown, error: o.write.patch?.error, next: 'cancelled', runAt: undefined });
    assertAllowed(o);
  });

  it('an error after a shutdown: handed back, due now, the attempt refunded', () => {
    const o = decideOutcome(job(), TASK, WORKER, { ok: false, error: new Error('aborted') }, 'shutdown', NOW);
    assert.deepEqual(o, { write: handBack(job(), 'w1', NOW, 'shutdown'), stat: 'handedBack', failure: null });
    assert.deepEqual(o.write.patch, { runAt: NOW, refundAttempt: true });
    assertAllowed(o);
  });

  it('reads nothing but its arguments, and changes none of them', () => {
    const j = job();
    const before = JSON.stringify(j);
    const thrown = new Error('x');
    const a = decideOutcome(j, TASK, WORKER, { ok: false, error: thrown }, null, NOW, HALF);
    const b = decideOutcome(j, TASK, WORKER, { ok: false, error: thrown }, null, NOW, HALF);
    assert.deepEqual(a.write, b.write);
    assert.equal(JSON.stringify(j), before);
  });
});

describe('leftoverOutcome (a job ended without its handler)', () => {
  it('handed back at shutdown, or when claimed ahead and no slot freed in time', () => {
    for (const why of ['shutdown', 'no free slot'] as const) {
      const o = leftoverOutcome(job(), WORKER, NOW, null, why);
      assert.deepEqual(o, { write: handBack(job(), 'w1', NOW, why), stat: 'handedBack', failure: null });
      assertAllowed(o);
    }
  });

  it('cancelled when a cancel was asked for: handing it back would run it again', () => {
    const stopping = leftoverOutcome(job(), WORKER, NOW, 'timeout', 'shutdown');
    assert.deepEqual(stopping.write, endCancelled(job(), 'w1', NOW, 'timeout', 'timeout (worker stopping)'));
    assert.equal(stopping.stat, 'cancelled');
    const waiting = leftoverOutcome(job(), WORKER, NOW, 'cancelled', 'no free slot');
    assert.equal(waiting.write.reason, 'cancelled (before it started)');
    assert.equal(waiting.write.patch?.error?.code, 'CANCELLED');
    assertAllowed(waiting);
  });
});

describe('sagaOutcome: a saga never fails with compensation owed while it has attempts to compensate', () => {
  const saga = (steps: string[], compensation: WorkflowState['compensation'] = null): WorkflowState => ({
    ...emptyWorkflow(),
    steps: steps.map((name) => ({ name, output: null })),
    compensation,
  });
  const storeDown = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  const failedLast = (attempts: number, maxAttempts = 1) => decideOutcome(job({ attempts, maxAttempts }), TASK, WORKER, { ok: false, error: storeDown }, null, NOW);

  it('completed steps not undone, on the last attempt: a retry at once (the next attempt only compensates), with the same error', () => {
    const plain = failedLast(1);
    assert.equal(plain.write.to, 'failed');
    const o = sagaOutcome(plain, job({ attempts: 1, maxAttempts: 1 }), saga(['s1']), NOW);
    assert.equal(o.write.to, 'retrying');
    assert.equal(o.write.reason, 'retry scheduled: compensation owed');
    assert.equal(o.write.patch?.runAt, NOW);
    assert.deepEqual(o.write.patch?.error, plain.write.patch?.error);
    assert.equal(o.stat, 'retried');
    assert.equal(o.failure?.next, 'retrying');
    assertAllowed(o);
  });

  it('left as it is: nothing completed, every completed step compensated, a compensation failed, the bound reached, or not a failure', () => {
    const plain = failedLast(1);
    const j = job({ attempts: 1, maxAttempts: 1 });
    assert.equal(sagaOutcome(plain, j, saga([]), NOW), plain);
    assert.equal(sagaOutcome(plain, j, saga(['s1', 's2'], { failedStep: 's3', error: { message: 'x', code: 'X', retryable: false }, done: ['s2', 's1'], failed: null }), NOW), plain);
    const failedUndo = saga(['s1', 's2'], { failedStep: 's3', error: { message: 'x', code: 'X', retryable: false }, done: ['s2'], failed: { step: 's1', error: { message: 'y', code: 'Y', retryable: false } } });
    assert.equal(sagaOutcome(plain, j, failedUndo, NOW), plain);
    const bound = failedLast(1 + COMPENSATION_EXTRA_ATTEMPTS);
    assert.equal(sagaOutcome(bound, job({ attempts: 1 + COMPENSATION_EXTRA_ATTEMPTS, maxAttempts: 1 }), saga(['s1']), NOW), bound);
    const retry = decideOutcome(job({ attempts: 1, maxAttempts: 3 }), TASK, WORKER, { ok: false, error: storeDown }, null, NOW, HALF);
    assert.equal(sagaOutcome(retry, job({ attempts: 1, maxAttempts: 3 }), saga(['s1']), NOW), retry);
    // A compensation under way with steps left to undo still owes it.
    assert.equal(sagaOutcome(plain, j, saga(['s1', 's2'], { failedStep: 's3', error: { message: 'x', code: 'X', retryable: false }, done: ['s2'], failed: null }), NOW).write.to, 'retrying');
  });
});
