/**
 * The pure retention decisions (src/core/retention.ts): parsing periods, the rules a sweeper pass
 * runs (global and per-task), and when an idempotency key names a new job.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { deletedOnEnd, keyReusable, parseRetention, retentionFromEnv, retentionRules } from '../../src/core/retention.js';

const NOW = 1_700_000_000_000;
const DAY = 86_400_000;

describe('retention periods', () => {
  it('parses durations, 0 and forever, and refuses unknown states and bad values by name', () => {
    assert.deepEqual(parseRetention({ succeeded: '7d', failed: 30 * DAY, cancelled: 'forever' }), { succeeded: 7 * DAY, failed: 30 * DAY, cancelled: null });
    assert.deepEqual(parseRetention({ succeeded: 0 }), { succeeded: 0 });
    assert.deepEqual(parseRetention({ succeeded: '0' }), { succeeded: 0 });
    assert.deepEqual(parseRetention(undefined), {});
    assert.throws(() => parseRetention({ running: '1d' } as never), /retention\.running is not an end state/);
    assert.throws(() => parseRetention({ failed: 'soon' }), /retention\.failed must be a duration/);
    assert.throws(() => parseRetention({ failed: -1 }), /retention\.failed must be a duration ≥ 0/);
  });

  it('reads LONGHAUL_RETENTION_* and names the variable in errors', () => {
    assert.deepEqual(retentionFromEnv({ LONGHAUL_RETENTION_SUCCEEDED: '12h', LONGHAUL_RETENTION_FAILED: '' }), { succeeded: 12 * 3_600_000 });
    assert.throws(() => retentionFromEnv({ LONGHAUL_RETENTION_CANCELLED: 'x' }), /LONGHAUL_RETENTION_CANCELLED/);
  });
});

describe('retention rules', () => {
  it('keeps forever without a policy', () => {
    assert.deepEqual(retentionRules({}, new Map(), NOW), []);
  });

  it('one rule per end state with a period; succeeded covers expired; 0 takes everything ended so far', () => {
    assert.deepEqual(retentionRules({ succeeded: 0, failed: DAY }, new Map(), NOW), [
      { states: ['succeeded', 'expired'], finishedBefore: NOW + 1 },
      { states: ['failed'], finishedBefore: NOW - DAY },
    ]);
  });

  it('a task with its own period gets its own rule and is excluded from the global one; forever removes it', () => {
    const tasks = new Map([
      ['fast', { succeeded: 0 }],
      ['keep', { succeeded: null }],
      ['same', { succeeded: 7 * DAY }],
    ]);
    assert.deepEqual(retentionRules({ succeeded: 7 * DAY }, tasks, NOW), [
      { states: ['succeeded', 'expired'], finishedBefore: NOW + 1, types: ['fast'] },
      { states: ['succeeded', 'expired'], finishedBefore: NOW - 7 * DAY, excludeTypes: ['fast', 'keep'] },
    ]);
    // With no global period, only the tasks that set one are deleted.
    assert.deepEqual(retentionRules({}, new Map([['fast', { failed: DAY }]]), NOW), [{ states: ['failed'], finishedBefore: NOW - DAY, types: ['fast'] }]);
  });
});

describe('deleted on completion (deletedOnEnd)', () => {
  it('is a period of 0 for the state the job ends in: the task’s own, else the instance’s; never for open states', () => {
    assert.equal(deletedOnEnd({ succeeded: 0 }, undefined, 'succeeded'), true);
    assert.equal(deletedOnEnd({ succeeded: 0 }, undefined, 'failed'), false);
    assert.equal(deletedOnEnd({ succeeded: 0 }, { succeeded: null }, 'succeeded'), false, 'the task keeps forever');
    assert.equal(deletedOnEnd({ succeeded: 0 }, { succeeded: 60_000 }, 'succeeded'), false);
    assert.equal(deletedOnEnd({}, { cancelled: 0 }, 'cancelled'), true);
    assert.equal(deletedOnEnd({ failed: 0 }, { succeeded: 5 }, 'failed'), true, 'a task without its own failed period follows the instance');
    assert.equal(deletedOnEnd({ succeeded: 0, failed: 0, cancelled: 0 }, undefined, 'retrying'), false);
    assert.equal(deletedOnEnd({ succeeded: 0 }, undefined, 'expired'), false);
  });
});

describe('idempotency key reuse', () => {
  it('after failure or cancel at once, otherwise after the key lifetime', () => {
    assert.equal(keyReusable({ state: 'failed', createdAt: NOW }, NOW, DAY), true);
    assert.equal(keyReusable({ state: 'cancelled', createdAt: NOW }, NOW, undefined), true);
    assert.equal(keyReusable({ state: 'succeeded', createdAt: NOW }, NOW + DAY - 1, DAY), false);
    assert.equal(keyReusable({ state: 'succeeded', createdAt: NOW }, NOW + DAY, DAY), true);
    assert.equal(keyReusable({ state: 'running', createdAt: NOW }, NOW + 10 * DAY, undefined), false, 'no lifetime: the key holds');
  });
});
