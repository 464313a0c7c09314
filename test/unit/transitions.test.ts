/**
 * core/transitions.ts: each builder's write (states, fences, reason, patch), that core's state
 * machine allows it, and what it announces.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobRecord } from '../../src/core/job.js';
import { canTransition } from '../../src/core/states.js';
import {
  afterFailure,
  cancelNow,
  endCancelled,
  eventsOf,
  expireResult,
  failFatal,
  failRefused,
  flagStalled,
  forceCancel,
  handBack,
  manualRetry,
  reapLostWorker,
  requestCancel,
  requestTimeout,
  runningNote,
  succeed,
  ZOMBIE_REASONS,
  type TransitionParams,
} from '../../src/core/transitions.js';

import { runningJob } from '../support/job-record.js';

const NOW = 1_700_000_000_000;

function job(overrides: Partial<JobRecord> = {}): JobRecord {
  return runningJob(NOW, overrides);
}

function legal(w: TransitionParams): void {
  if (w.from !== w.to) assert.ok(canTransition(w.from, w.to), `${w.from} → ${w.to} is allowed`);
  assert.equal(w.at, NOW);
}

function names(w: TransitionParams): string[] {
  return eventsOf(job(), w).map((e) => e.name);
}

describe('transition builders', () => {
  it('cancelNow: an unstarted job → cancelled with CANCELLED, no lease fence', () => {
    for (const state of ['pending', 'queued', 'retrying', 'waiting'] as const) {
      const w = cancelNow(job({ state }), NOW);
      legal(w);
      assert.deepEqual([w.from, w.to, w.lease, w.reason], [state, 'cancelled', undefined, 'cancelled by user']);
      assert.deepEqual(w.patch, { finishedAt: NOW, error: { message: 'cancelled', code: 'CANCELLED', retryable: false } });
    }
    assert.deepEqual(names(cancelNow(job({ state: 'queued' }), NOW)), ['job:changed']);
  });

  it('requestCancel and requestTimeout: a running self-transition fenced by lease and by no request yet; both announce the request', () => {
    const user = requestCancel(job(), NOW);
    assert.deepEqual([user.from, user.to, user.lease, user.cancelRequested, user.reason], ['running', 'running', 4, false, 'cancel requested by user']);
    assert.deepEqual(user.patch, { cancelRequest: { reason: 'user' } });
    const timeout = requestTimeout(job(), 'w1', NOW);
    assert.deepEqual([timeout.from, timeout.to, timeout.lease, timeout.cancelRequested, timeout.workerId], ['running', 'running', 4, false, 'w1']);
    assert.deepEqual(timeout.patch, { cancelRequest: { reason: 'timeout' } });
    for (const w of [user, timeout]) assert.deepEqual(names(w), ['job:changed', 'job:cancel-requested']);
    const [, request] = eventsOf(job(), timeout);
    assert.deepEqual(request?.data, { id: 'j1', reason: 'timeout' });
  });

  it('manualRetry: failed or cancelled → queued with a fresh budget; the error stays for lastError', () => {
    for (const state of ['failed', 'cancelled'] as const) {
      const w = manualRetry(job({ state }), NOW);
      legal(w);
      assert.equal(w.to, 'queued');
      assert.deepEqual(w.patch, { resetAttempts: true, finishedAt: null, runAt: NOW, cancelRequest: false, stalled: false });
      assert.ok(!('error' in (w.patch ?? {})));
      assert.deepEqual(names(w), ['job:changed'], 'clearing a request announces no request');
    }
  });

  it('succeed: running → succeeded, the result kept for its TTL, the checkpoint cleared', () => {
    const w = succeed(job(), 'w1', NOW, { n: 1 }, 5_000);
    legal(w);
    assert.deepEqual([w.to, w.lease, w.workerId, w.reason], ['succeeded', 4, 'w1', 'completed']);
    assert.deepEqual(w.patch, { result: { n: 1 }, finishedAt: NOW, expiresAt: NOW + 5_000, clearCheckpoint: true });
  });

  it('failFatal and afterFailure: failed or retrying with the decided error', () => {
    const error = { message: 'boom', code: 'E', retryable: false };
    const fatal = failFatal(job(), 'w1', NOW, error);
    legal(fatal);
    assert.deepEqual([fatal.to, fatal.reason, fatal.patch], ['failed', 'fatal', { error, finishedAt: NOW }]);
    const exhausted = afterFailure(job(), 'w1', NOW, { to: 'failed', error: { ...error, retryable: true } });
    assert.deepEqual([exhausted.to, exhausted.reason], ['failed', 'attempts exhausted']);
    const retry = afterFailure(job(), 'w1', NOW, { to: 'retrying', runAt: NOW + 100, error: { ...error, retryable: true } });
    legal(retry);
    assert.deepEqual([retry.to, retry.reason, retry.patch?.runAt], ['retrying', 'retry scheduled', NOW + 100]);
  });

  it('failRefused: the refused write, failed instead, with the given error and none of its patch', () => {
    const error = { message: 'the store refused', code: 'OUTCOME_REFUSED', retryable: false };
    const refused = succeed(job(), 'w1', NOW, { huge: true }, 5_000);
    const w = failRefused(refused, error);
    legal(w);
    assert.deepEqual(w, { id: 'j1', from: 'running', to: 'failed', lease: 4, reason: 'outcome refused by the store', workerId: 'w1', at: NOW, patch: { error, finishedAt: NOW } });
    const unfenced = failRefused({ id: 'j1', from: 'running', to: 'retrying', reason: 'x', at: NOW }, error);
    assert.ok(!('lease' in unfenced), 'no lease fence when the refused write had none');
    assert.equal(unfenced.workerId, null);
  });

  it('endCancelled: CANCELLED or TIMEOUT with the reason given; handBack refunds the attempt', () => {
    const c = endCancelled(job(), 'w1', NOW, 'cancelled', 'cancelled');
    legal(c);
    assert.deepEqual(c.patch, { error: { message: 'cancelled', code: 'CANCELLED', retryable: false }, finishedAt: NOW });
    const t = endCancelled(job(), 'w1', NOW, 'timeout', 'timeout (worker stopping)');
    assert.deepEqual([t.reason, t.patch?.error], ['timeout (worker stopping)', { message: 'timed out after 2000 ms', code: 'TIMEOUT', retryable: false }]);
    const h = handBack(job(), 'w1', NOW, 'no free slot');
    legal(h);
    assert.deepEqual([h.to, h.reason, h.patch], ['retrying', 'no free slot', { runAt: NOW, refundAttempt: true }]);
    const note = runningNote(job(), 'w1', NOW, 'checkpoint ignored');
    assert.deepEqual([note.from, note.to, note.lease, note.patch], ['running', 'running', 4, undefined]);
  });

  it('sweeper: forceCancel names the cause; reapLostWorker requeues, fails when spent, cancels a requested cancel', () => {
    const drain = forceCancel(job({ cancelRequested: true, cancelReason: 'timeout' }), NOW, 'drain');
    legal(drain);
    assert.deepEqual([drain.reason, drain.patch?.error?.code, drain.patch?.error?.message], [
      'timeout (forced after drain)',
      'TIMEOUT',
      'timed out after 2000 ms; the handler ignored cancellation',
    ]);
    const lost = forceCancel(job({ cancelRequested: true, cancelReason: 'user' }), NOW, 'heartbeat lost');
    assert.deepEqual([lost.reason, lost.patch?.error?.message], ['cancelled (heartbeat lost)', 'cancelled; the worker stopped heartbeating']);
    assert.equal(lost.workerId, 'w1', 'the log names the worker that held the job');

    const requeued = reapLostWorker(job({ attempts: 1 }), NOW);
    legal(requeued);
    assert.deepEqual([requeued.to, requeued.reason], ['retrying', 'heartbeat lost; requeued']);
    const spent = reapLostWorker(job({ attempts: 3 }), NOW);
    assert.deepEqual([spent.to, spent.reason, spent.patch?.finishedAt], ['failed', 'heartbeat lost; attempts exhausted', NOW]);
    const cancelled = reapLostWorker(job({ cancelRequested: true, cancelReason: 'user' }), NOW);
    assert.deepEqual([cancelled.to, cancelled.reason], ['cancelled', 'cancelled (heartbeat lost)']);
    // The stores count zombies by these reasons (Store.sweepHealth): every reap is one, nothing else is.
    const timeoutLost = reapLostWorker(job({ cancelRequested: true, cancelReason: 'timeout' }), NOW);
    assert.deepEqual(
      [requeued, spent, cancelled, lost, timeoutLost].map((w) => ZOMBIE_REASONS.includes(w.reason)),
      [true, true, true, true, true],
    );
    assert.equal(new Set([requeued, spent, cancelled, timeoutLost].map((w) => w.reason)).size, ZOMBIE_REASONS.length, 'each reason is made');
    assert.ok(!ZOMBIE_REASONS.includes(drain.reason), 'a cancel forced after its drain is no zombie');

    const stalled = flagStalled(job(), NOW);
    assert.deepEqual([stalled.to, stalled.lease, stalled.patch], ['running', 4, { stalled: true }]);
    const expired = expireResult(job({ state: 'succeeded' }), NOW);
    legal(expired);
    assert.deepEqual([expired.from, expired.to, expired.patch], ['succeeded', 'expired', { result: null }]);
  });

  it('eventsOf: job:changed carries the job identity and the write', () => {
    const [changed] = eventsOf(job(), succeed(job(), 'w1', NOW, null, 1));
    assert.deepEqual(changed, { name: 'job:changed', data: { id: 'j1', tenant: 't', type: 'x', from: 'running', to: 'succeeded', reason: 'completed' } });
  });
});
