/**
 * What the store contract suites share (./job-queue.ts, ./result-files.ts, ./webhook-outbox.ts):
 * the job every test starts from, the log replay check, and helpers that drive a job through
 * the queue, which the result file and webhook outbox suites need to set up their jobs.
 */
import assert from 'node:assert/strict';
import { uuidv7 } from '../../../src/core/ids.js';
import type { JobRecord, TransitionEntry } from '../../../src/core/job.js';
import { canTransition, type JobState } from '../../../src/core/states.js';
import type { ClaimParams, JobQueueStore, NewJob, TransitionParams } from '../../../src/store/store.js';

/** Where the suites' explicit times start (`now`, `at`, `runAt`). */
export const T0 = 1_700_000_000_000;

export function newJob(overrides: Partial<NewJob> = {}): NewJob {
  return {
    id: uuidv7(),
    tenant: 'acme',
    type: 'report',
    state: 'queued',
    priority: 'normal',
    input: { n: 1 },
    metadata: null,
    maxAttempts: 3,
    runAt: T0,
    createdAt: T0,
    timeoutMs: null,
    heartbeatTimeoutMs: 30_000,
    stallTimeoutMs: null,
    resultTtlMs: 60_000,
    parentId: null,
    idempotencyKey: null,
    requestHash: null,
    ...overrides,
  };
}

/** The log must replay to the job's state (see test/contract/store-model.test.ts for the same check under random operations). */
export function assertLogReplays(log: TransitionEntry[], job: JobRecord): void {
  assert.ok(log.length >= 1, 'log is never empty');
  assert.equal(log[0]?.from, null, 'first entry comes from null');
  for (let i = 1; i < log.length; i++) {
    const prev = log[i - 1] as TransitionEntry;
    const e = log[i] as TransitionEntry;
    assert.equal(e.from, prev.to, `entry ${i} (${e.reason}) does not continue from ${prev.to}`);
    assert.ok(canTransition(e.from as JobState, e.to), `entry ${i}: ${e.from} → ${e.to} is not allowed`);
  }
  assert.equal(log[log.length - 1]?.to, job.state, 'last entry leads to the current state');
}

/** The helpers of one suite, on whichever store its current test has open (`current`). */
export function contractHelpers(current: () => JobQueueStore) {
  async function insert(overrides: Partial<NewJob> = {}): Promise<JobRecord> {
    const r = await current().insertJob({ job: newJob(overrides) });
    assert.equal(r.kind, 'created');
    return (r as { job: JobRecord }).job;
  }

  async function get(id: string): Promise<JobRecord> {
    const j = await current().getJob({ id });
    assert.ok(j, `job ${id} exists`);
    return j;
  }

  async function log(id: string): Promise<TransitionEntry[]> {
    const l = await current().getTransitions({ id });
    assert.ok(l, `log of ${id} exists`);
    return l;
  }

  function claimParams(overrides: Partial<ClaimParams> = {}): ClaimParams {
    return { workerId: 'w1', types: [{ type: 'report' }], limit: 10, now: T0, ...overrides };
  }

  async function claimOne(overrides: Partial<ClaimParams> = {}): Promise<JobRecord> {
    const jobs = await current().claimJobs(claimParams({ limit: 1, ...overrides }));
    assert.equal(jobs.length, 1, 'one job claimed');
    return jobs[0] as JobRecord;
  }

  /** A job of its own type, claimed: running with lease 1. */
  async function running(overrides: Partial<NewJob> = {}, now = T0): Promise<JobRecord> {
    const type = overrides.type ?? `t-${uuidv7().slice(-8)}`;
    const j = await insert({ ...overrides, type });
    const c = await claimOne({ types: [{ type }], now });
    assert.equal(c.id, j.id);
    return c;
  }

  async function apply(p: TransitionParams): Promise<boolean> {
    const [ok] = await current().transition({ items: [p] });
    assert.equal(typeof ok, 'boolean');
    return ok as boolean;
  }

  return { insert, get, log, claimParams, claimOne, running, apply };
}
