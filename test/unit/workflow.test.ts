/**
 * Workflow rules without a store: the suspend transition, a compensating saga's reaping, the
 * aggregate progress of a parent, the journal's replay rules (a wait reached in another order
 * fails instead of taking another wait's outcome), and the checks of stages and steps.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JobBus } from '../../src/channel/bus.js';
import { FatalError } from '../../src/core/errors.js';
import type { JobRecord } from '../../src/core/job.js';
import { canTransition } from '../../src/core/states.js';
import { COMPENSATION_EXTRA_ATTEMPTS, eventsOf, reapLostWorker, suspend } from '../../src/core/transitions.js';
import { aggregateProgress, emptyWorkflow, NEVER, readWorkflow, type WorkflowState } from '../../src/core/workflow.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { Suspended, type WorkflowHost, WorkflowRun } from '../../src/workflow/run.js';

import { runningJob } from '../support/job-record.js';

const NOW = 1_700_000_000_000;

function job(overrides: Partial<JobRecord> = {}): JobRecord {
  return runningJob(NOW, overrides);
}

describe('the suspend transition', () => {
  it('running → waiting under the lease, the attempt refunded, the wake-up time set', () => {
    const w = suspend(job(), 'w1', NOW, NOW + 5000, 'sleeping');
    assert.deepEqual(w, {
      id: 'j1',
      from: 'running',
      to: 'waiting',
      lease: 4,
      cancelRequested: false,
      workerId: 'w1',
      at: NOW,
      reason: 'sleeping',
      patch: { runAt: NOW + 5000, refundAttempt: true },
    });
    assert.ok(canTransition(w.from, w.to));
    assert.ok(canTransition('waiting', 'queued') && canTransition('waiting', 'cancelled'));
  });

  it("a child's announcements name its parent; other jobs' do not", () => {
    const child = eventsOf({ id: 'c', tenant: 't', type: 'x', parentId: 'p' }, suspend(job(), 'w1', NOW, NEVER, 'r'));
    assert.equal((child[0]?.data as { parentId?: string } | undefined)?.parentId, 'p');
    const plain = eventsOf({ id: 'c', tenant: 't', type: 'x', parentId: null }, suspend(job(), 'w1', NOW, NEVER, 'r'));
    assert.equal('parentId' in (plain[0]?.data ?? {}), false);
  });
});

describe('reaping a compensating saga', () => {
  const compensating = (failed: boolean): WorkflowState => ({
    ...emptyWorkflow(),
    steps: [{ name: 'a', output: 1 }],
    compensation: { failedStep: 'b', error: { message: 'x', code: 'X', retryable: false }, done: [], failed: failed ? { step: 'a', error: { message: 'y', code: 'Y', retryable: false } } : null },
  });

  it('requeues it on its last attempt, so that compensation goes on', () => {
    const w = reapLostWorker(job({ attempts: 3, maxAttempts: 3, workflow: compensating(false) }), NOW);
    assert.equal(w.to, 'retrying');
  });

  it('fails it once the extra attempts are spent, or when a compensation already failed', () => {
    assert.equal(reapLostWorker(job({ attempts: 3 + COMPENSATION_EXTRA_ATTEMPTS, maxAttempts: 3, workflow: compensating(false) }), NOW).to, 'failed');
    assert.equal(reapLostWorker(job({ attempts: 3, maxAttempts: 3, workflow: compensating(true) }), NOW).to, 'failed');
    assert.equal(reapLostWorker(job({ attempts: 3, maxAttempts: 3 }), NOW).to, 'failed');
  });
});

describe('a parent’s aggregate progress', () => {
  it('counts ended children whole and running ones by their percent', () => {
    const p = aggregateProgress(4, 1, [50, 25], NOW);
    assert.equal(p.percent, 43.75);
    assert.equal(p.itemsDone, 1);
    assert.equal(p.itemsTotal, 4);
    assert.equal(p.stage, 'children');
    assert.equal(aggregateProgress(3, 3, [], NOW).percent, 100);
    assert.equal(aggregateProgress(2, 0, [150, -5], NOW).percent, 50, 'percents are clamped');
  });
});

describe('the journal', () => {
  it('reads journals written before a field existed', () => {
    assert.deepEqual(readWorkflow({ waits: { '#0': { kind: 'sleep', until: 1 } } }), { ...emptyWorkflow(), waits: { '#0': { kind: 'sleep', until: 1 } } });
    assert.deepEqual(readWorkflow(null), emptyWorkflow());
  });

  /** A host whose store records calls; `suspend` always suspends. */
  function host(now = NOW): { host: WorkflowHost; calls: string[] } {
    const calls: string[] = [];
    const store = {
      suspend: async (p: { wait: { kind: string } }) => {
        calls.push(`suspend:${p.wait.kind}`);
        return { kind: 'suspended' };
      },
      consumedSignal: async () => {
        calls.push('consumedSignal');
        return null;
      },
    } as unknown as Store;
    return {
      calls,
      host: {
        store,
        bus: new JobBus(),
        clock: () => now,
        workerId: 'w1',
        prepareChild: () => {
          throw new Error('no children here');
        },
        cancelChildren: async () => 0,
        retry: (_what, write) => write(),
        onSuspended: () => undefined,
        onCancelRequested: () => undefined,
        onLeaseLost: () => undefined,
        signal: new AbortController().signal,
      },
    };
  }

  it('a sleep whose time has come returns from the journal without a store call; one not yet over suspends again', async () => {
    const past = { ...emptyWorkflow(), waits: { '#0': { kind: 'sleep' as const, until: NOW - 1 }, '#1': { kind: 'sleep' as const, until: NOW + 1000 } } };
    const h = host();
    const run = new WorkflowRun(job({ workflow: past }), h.host);
    await run.sleepUntil(NOW + 999_999); // the first run's time wins over this run's
    assert.deepEqual(h.calls, []);
    await assert.rejects(run.sleepUntil(NOW + 5), Suspended);
    assert.deepEqual(h.calls, ['suspend:sleep']);
  });

  it('a wait reached where an earlier run had another kind of wait fails the job (NONDETERMINISTIC_WORKFLOW)', async () => {
    const journal = { ...emptyWorkflow(), waits: { '#0': { kind: 'signal' as const, name: 'approval', deadline: null } } };
    const run = new WorkflowRun(job({ workflow: journal }), host().host);
    await assert.rejects(run.sleepUntil(NOW + 10), (err: unknown) => err instanceof FatalError && err.code === 'NONDETERMINISTIC_WORKFLOW');
    const other = new WorkflowRun(job({ workflow: journal }), host().host);
    await assert.rejects(other.waitFor('payment', undefined), (err: unknown) => err instanceof FatalError && err.code === 'NONDETERMINISTIC_WORKFLOW');
  });

  it('waits are keyed per scope, so a stage skipped on replay does not shift the waits after it', async () => {
    const journal = { ...emptyWorkflow(), waits: { 'stage:b#0': { kind: 'sleep' as const, until: NOW - 1 } } };
    const h = host();
    const run = new WorkflowRun(job({ workflow: journal }), h.host);
    // Stage a (done, skipped) made no waits on this run; stage b's first wait is still b#0.
    await run.inScope('stage:b', () => run.sleepUntil(NOW + 100));
    assert.deepEqual(h.calls, []);
  });

  it('a signal wait past its deadline throws WaitTimeoutError; signal names are checked', async () => {
    const journal = { ...emptyWorkflow(), waits: { '#0': { kind: 'signal' as const, name: 'ok', deadline: NOW - 1 } } };
    const run = new WorkflowRun(job({ workflow: journal }), host().host);
    await assert.rejects(run.waitFor('ok', 10), (err: Error) => err.name === 'WaitTimeoutError');
    await assert.rejects(new WorkflowRun(job(), host().host).waitFor('bad name', undefined), TypeError);
  });
});

describe('defineTask with stages or steps', () => {
  const run = () => 1;
  it('takes exactly one of run, stages and steps', () => {
    assert.throws(() => defineTask({ type: 'a' }), /exactly one of run, stages and steps/);
    assert.throws(() => defineTask({ type: 'a', run, stages: [{ name: 's', run }] }), /exactly one/);
    assert.doesNotThrow(() => defineTask({ type: 'a', stages: [{ name: 's', run }] }));
    assert.doesNotThrow(() => defineTask({ type: 'a', steps: [{ name: 's', run, compensate: run }] }));
  });
  it('refuses unnamed, duplicate or badly set parts', () => {
    assert.throws(() => defineTask({ type: 'a', stages: [] }), /non-empty array/);
    assert.throws(() => defineTask({ type: 'a', stages: [{ name: 's', run }, { name: 's', run }] }), /two stages are named "s"/);
    assert.throws(() => defineTask({ type: 'a', stages: [{ name: 's', run, weight: -1 }] }), /weight/);
    assert.throws(() => defineTask({ type: 'a', stages: [{ name: 's', run, maxAttempts: 0 }] }), /maxAttempts/);
    assert.throws(() => defineTask({ type: 'a', steps: [{ name: 's', run, compensate: 3 as never }] }), /compensate must be a function/);
  });
});
