/**
 * The cascade's builders (core/transitions.ts cancelAsChild, requestCancelAsChild): the write
 * for each state a child can be in, that the state machine allows it, and what it announces.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canTransition, type JobState } from '../../src/core/states.js';
import { cancelAsChild, eventsOf, requestCancelAsChild } from '../../src/core/transitions.js';

const NOW = 1_700_000_000_000;
const identity = { id: 'c1', tenant: 't', type: 'child' };

describe('cancel cascade builders', () => {
  for (const state of ['pending', 'queued', 'retrying', 'waiting'] as JobState[]) {
    it(`cancelAsChild: ${state} → cancelled with the reason in the log, the error and the event`, () => {
      const w = cancelAsChild({ id: 'c1', state, lease: 3 }, NOW, 'parent cancelled');
      assert.deepEqual(w, {
        id: 'c1',
        from: state,
        to: 'cancelled',
        reason: 'parent cancelled',
        at: NOW,
        patch: { finishedAt: NOW, error: { message: 'cancelled; parent cancelled', code: 'CANCELLED', retryable: false } },
      });
      assert.ok(canTransition(w.from, w.to));
      assert.deepEqual(eventsOf(identity, w), [{ name: 'job:changed', data: { ...identity, from: state, to: 'cancelled', reason: 'parent cancelled' } }]);
    });
  }

  it('requestCancelAsChild: a cancel request on a running child, fenced by its lease and by no request yet', () => {
    const w = requestCancelAsChild({ id: 'c1', state: 'running', lease: 7 }, NOW, 'sibling failed');
    assert.deepEqual(w, {
      id: 'c1',
      from: 'running',
      to: 'running',
      lease: 7,
      cancelRequested: false,
      reason: 'cancel requested: sibling failed',
      at: NOW,
      patch: { cancelRequest: { reason: 'sibling failed' } },
    });
    assert.ok(canTransition(w.from, w.to));
    assert.deepEqual(
      eventsOf(identity, w).map((e) => e.name),
      ['job:changed', 'job:cancel-requested'],
    );
    assert.deepEqual(eventsOf(identity, w)[1], { name: 'job:cancel-requested', data: { id: 'c1', reason: 'sibling failed' } });
  });
});
