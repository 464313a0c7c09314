/** A running job's record as a store would hold it, for tests of pure rules (transitions, workflows). */
import type { JobRecord } from '../../src/core/job.js';
import { EMPTY_PROGRESS } from '../../src/core/progress.js';

/** Claimed 5 s before `now` (attempt 1 of 3, lease 4, worker w1), changed with `overrides`. */
export function runningJob(now: number, overrides: Partial<JobRecord> = {}): JobRecord {
  return {
    id: 'j1',
    tenant: 't',
    type: 'x',
    state: 'running',
    priority: 'normal',
    input: null,
    metadata: null,
    result: null,
    error: null,
    attempts: 1,
    maxAttempts: 3,
    lease: 4,
    workerId: 'w1',
    cancelRequested: false,
    cancelReason: null,
    cancelRequestedAt: null,
    stalled: false,
    parentId: null,
    createdAt: now - 10_000,
    startedAt: now - 5_000,
    finishedAt: null,
    updatedAt: now - 1_000,
    runAt: now - 10_000,
    expiresAt: null,
    heartbeatAt: now - 1_000,
    timeoutMs: 2_000,
    heartbeatTimeoutMs: 30_000,
    stallTimeoutMs: null,
    resultTtlMs: 60_000,
    checkpoint: null,
    idempotencyKey: null,
    progress: EMPTY_PROGRESS,
    workflow: null,
    wait: null,
    childrenTotal: 0,
    ...overrides,
  };
}
