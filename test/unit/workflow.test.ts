/**
 * Workflow rules without a store: the suspend transition, the reaping of a saga whose worker died
 * (and the attempt beyond maxAttempts it may get, which only compensates), the
 * aggregate progress of a parent, the journal's replay rules (a wait reached in another order
 * fails instead of taking another wait's outcome), and the checks of stages and steps.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JobBus } from '../../src/channel/bus.js';
import { FatalError } from '../../src/core/errors.js';
import type { JobRecord } from '../../src/core/job.js';
import { canTransition } from '../../src/core/states.js';
import { COMPENSATION_EXTRA_ATTEMPTS, eventsOf, reapLostWorker, suspend, ZOMBIE_REASONS } from '../../src/core/transitions.js';
import { aggregateProgress, compensationOnly, emptyWorkflow, NEVER, owesCompensation, readWorkflow, type WorkflowState } from '../../src/core/workflow.js';
import type { Store } from '../../src/store/store.js';
import { defineTask, type TaskContext } from '../../src/task-api/define.js';
import { Suspended, type WorkflowHost, WorkflowRun } from '../../src/workflow/run.js';
import { runSaga } from '../../src/workflow/saga.js';

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

/** A host whose store records calls; `suspend` always suspends; `saveWorkflow` keeps copies of the journals in `saved`. */
function host(now = NOW): { host: WorkflowHost; calls: string[]; saved: WorkflowState[] } {
  const calls: string[] = [];
  const saved: WorkflowState[] = [];
  const store = {
    suspend: async (p: { wait: { kind: string } }) => {
      calls.push(`suspend:${p.wait.kind}`);
      return { kind: 'suspended' };
    },
    consumedSignal: async () => {
      calls.push('consumedSignal');
      return null;
    },
    saveWorkflow: async (p: { workflow: WorkflowState }) => {
      calls.push('saveWorkflow');
      saved.push(structuredClone(p.workflow));
      return true;
    },
  } as unknown as Store;
  return {
    calls,
    saved,
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

describe('reaping a saga whose worker died in a step', () => {
  const done = (...names: string[]): WorkflowState => ({ ...emptyWorkflow(), steps: names.map((name, i) => ({ name, output: i })) });
  const exhausted = { message: 'worker stopped heartbeating (crashed or stuck); attempts exhausted: 2/2', code: 'HEARTBEAT_TIMEOUT', retryable: false };

  it('on its last attempt with steps done: requeued at once for an attempt that compensates, with the lost worker’s error', () => {
    const w = reapLostWorker(job({ attempts: 2, maxAttempts: 2, workflow: done('s1', 's2') }), NOW);
    assert.deepEqual(w, {
      id: 'j1',
      from: 'running',
      to: 'retrying',
      lease: 4,
      at: NOW,
      workerId: 'w1',
      reason: 'heartbeat lost; requeued',
      patch: { error: exhausted, runAt: NOW },
    });
    assert.ok(ZOMBIE_REASONS.includes(w.reason), 'still counted as a zombie reaped');
    assert.ok(owesCompensation(done('s1')));
    assert.ok(compensationOnly(3, 2) && !compensationOnly(2, 2));
  });

  it('with attempts left: requeued as any job (the step runs again); with no step done: failed', () => {
    const again = reapLostWorker(job({ attempts: 1, maxAttempts: 2, workflow: done('s1', 's2') }), NOW);
    assert.equal(again.to, 'retrying');
    assert.equal(again.patch?.error?.retryable, true);
    const none = reapLostWorker(job({ attempts: 2, maxAttempts: 2, workflow: done() }), NOW);
    assert.equal(none.to, 'failed');
    assert.equal(none.reason, 'heartbeat lost; attempts exhausted');
    assert.equal(owesCompensation(done()), false);
    // Every completed step compensated (the saga's own end, written or not): nothing more is owed.
    const undone = { ...done('s1', 's2'), compensation: { failedStep: 's3', error: { message: 'x', code: 'X', retryable: false }, done: ['s2', 's1'], failed: null } };
    assert.equal(owesCompensation(undone), false);
    assert.equal(owesCompensation({ ...undone, compensation: { ...undone.compensation, done: ['s2'] } }), true);
  });

  it('bounded: reaped again and again (a compensation that kills its process), it fails after COMPENSATION_EXTRA_ATTEMPTS more', () => {
    const ends: string[] = [];
    for (let attempts = 2; attempts <= 2 + COMPENSATION_EXTRA_ATTEMPTS; attempts++) {
      ends.push(reapLostWorker(job({ attempts, maxAttempts: 2, workflow: done('s1', 's2') }), NOW).to);
    }
    assert.deepEqual(ends, [...Array(COMPENSATION_EXTRA_ATTEMPTS).fill('retrying'), 'failed']);
    const last = reapLostWorker(job({ attempts: 2 + COMPENSATION_EXTRA_ATTEMPTS, maxAttempts: 2, workflow: done('s1', 's2') }), NOW);
    assert.equal(last.reason, 'heartbeat lost; attempts exhausted');
    assert.equal(last.patch?.error?.code, 'HEARTBEAT_TIMEOUT');
  });

  it('a cancel requested before the worker died still ends it cancelled', () => {
    assert.equal(reapLostWorker(job({ attempts: 2, maxAttempts: 2, workflow: done('s1'), cancelRequested: true, cancelReason: 'user' }), NOW).to, 'cancelled');
  });
});

describe('a saga’s attempt beyond maxAttempts (granted by the reaper)', () => {
  const exhausted = { message: 'worker stopped heartbeating (crashed or stuck); attempts exhausted: 2/2', code: 'HEARTBEAT_TIMEOUT', retryable: false };

  /** The saga s1, s2, s3; what its steps and compensations did goes to `did`. */
  function saga(did: string[]) {
    const step = (name: string) => ({
      name,
      run: () => {
        did.push(`run ${name}`);
        return name;
      },
      compensate: () => void did.push(`compensate ${name}`),
    });
    return defineTask({ type: 'saga', maxAttempts: 2, steps: [step('s1'), step('s2'), step('s3')] });
  }

  async function run(journal: WorkflowState, attempts: number): Promise<{ did: string[]; notes: string[]; saved: WorkflowState[]; outcome: unknown }> {
    const did: string[] = [];
    const notes: string[] = [];
    const h = host();
    const record = job({ attempts, maxAttempts: 2, error: exhausted, workflow: journal });
    const wf = new WorkflowRun(record, h.host);
    const ctx = { signal: new AbortController().signal } as unknown as TaskContext;
    const outcome = await runSaga(saga(did), record, null, ctx, wf, { note: async (r) => void notes.push(r) }).catch((err: unknown) => err);
    return { did, notes, saved: h.saved, outcome };
  }

  const done = (...names: string[]): WorkflowState => ({ ...emptyWorkflow(), steps: names.map((name) => ({ name, output: name })) });

  it('does not run the step its worker died in: compensates the steps done, in reverse, and fails with the lost worker’s error', async () => {
    const r = await run(done('s1', 's2'), 3);
    assert.deepEqual(r.did, ['compensate s2', 'compensate s1']);
    assert.deepEqual(r.notes, ['step s3 lost with its worker on the last attempt; compensating', 'compensated s2', 'compensated s1']);
    assert.ok(r.outcome instanceof FatalError);
    assert.equal(r.outcome.code, 'HEARTBEAT_TIMEOUT');
    assert.equal(r.outcome.message, `step "s3" failed: ${exhausted.message}`);
    assert.deepEqual(r.outcome.details, { compensated: true });
    // The first save records why it compensates before any compensation runs (a crash then resumes compensating).
    assert.deepEqual(r.saved[0]?.compensation, { failedStep: 's3', error: exhausted, done: [], failed: null });
  });

  it('an ordinary attempt runs the remaining step; one that finds every step done returns the last output', async () => {
    const ordinary = await run(done('s1', 's2'), 2);
    assert.deepEqual(ordinary.did, ['run s3']);
    assert.equal(ordinary.outcome, 's3');
    const complete = await run(done('s1', 's2', 's3'), 3);
    assert.deepEqual(complete.did, []);
    assert.equal(complete.outcome, 's3');
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
