/**
 * Failed jobs made through a store (the worker need not run their type), for dead-letter tests:
 * some that failed without an error (their group's code is null), some with a code.
 */
import assert from 'node:assert/strict';
import { uuidv7 } from '../../src/core/ids.js';
import type { Store } from '../../src/store/store.js';

/** `count` jobs of `type` and `tenant`, claimed and failed at `at`; with `code`, with an error of that code, else with none. Resolves to their ids. */
export async function failedThroughStore(store: Store, params: { tenant: string; type: string; count: number; code?: string; at?: number }): Promise<string[]> {
  const at = params.at ?? Date.now();
  const jobs = Array.from({ length: params.count }, () => ({
    id: uuidv7(),
    tenant: params.tenant,
    type: params.type,
    state: 'queued' as const,
    priority: 'normal' as const,
    input: null,
    metadata: null,
    maxAttempts: 1,
    runAt: at,
    createdAt: at,
    timeoutMs: null,
    heartbeatTimeoutMs: 30_000,
    stallTimeoutMs: null,
    resultTtlMs: 60_000,
    parentId: null,
    idempotencyKey: null,
    requestHash: null,
  }));
  await store.insertJobs({ jobs });
  const ids = new Set(jobs.map((j) => j.id));
  const claimed = (await store.claimJobs({ workerId: 'test', types: [{ type: params.type }], limit: params.count + 100, now: at })).filter((j) =>
    ids.has(j.id),
  );
  assert.equal(claimed.length, params.count, 'every job made is claimed');
  const error = params.code === undefined ? {} : { error: { message: `failed with ${params.code}`, code: params.code, retryable: false } };
  const applied = await store.transition({
    items: claimed.map((j) => ({
      id: j.id,
      from: 'running' as const,
      to: 'failed' as const,
      lease: j.lease,
      reason: 'fatal',
      at,
      patch: { finishedAt: at, ...error },
    })),
  });
  assert.ok(applied.every(Boolean), 'every job failed');
  return jobs.map((j) => j.id);
}
