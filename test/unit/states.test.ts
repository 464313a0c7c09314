/** The job state machine: every allowed and every forbidden transition, against a table written out here. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { assertTransition, canTransition, IllegalTransitionError, isTerminal, JOB_STATES, type JobState } from '../../src/core/states.js';

// DESIGN §2, written out independently of the implementation.
const EXPECTED: Record<JobState, JobState[]> = {
  pending: ['queued', 'cancelled'],
  queued: ['running', 'cancelled'],
  running: ['succeeded', 'failed', 'retrying', 'cancelled', 'waiting', 'running' /* annotations only */],
  retrying: ['queued', 'cancelled'],
  waiting: ['queued', 'cancelled', 'failed'],
  succeeded: ['expired'],
  failed: ['queued'],
  cancelled: ['queued'],
  expired: [],
};

describe('job states', () => {
  it('has exactly the nine public states', () => {
    assert.deepEqual([...JOB_STATES].sort(), Object.keys(EXPECTED).sort());
  });

  for (const from of JOB_STATES) {
    for (const to of JOB_STATES) {
      const allowed = EXPECTED[from].includes(to);
      it(`${from} → ${to} is ${allowed ? 'allowed' : 'forbidden'}`, () => {
        assert.equal(canTransition(from, to), allowed);
        if (allowed) assert.doesNotThrow(() => assertTransition(from, to));
        else assert.throws(() => assertTransition(from, to), IllegalTransitionError);
      });
    }
  }

  it('terminal states are succeeded, failed, cancelled, expired', () => {
    assert.deepEqual(
      JOB_STATES.filter((s) => isTerminal(s)),
      ['succeeded', 'failed', 'cancelled', 'expired'],
    );
  });

  it('terminal states leave only by manual retry (failed, cancelled) or expiry (succeeded)', () => {
    for (const s of JOB_STATES.filter((x) => isTerminal(x))) {
      const exits = JOB_STATES.filter((t) => t !== s && canTransition(s, t));
      assert.deepEqual(exits, s === 'succeeded' ? ['expired'] : s === 'expired' ? [] : ['queued']);
    }
  });
});
