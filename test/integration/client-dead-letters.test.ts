/**
 * The client's dead-letter methods against a real server (the in-process HTTP harness): a job's
 * attempts, groups and pages of failed jobs, bulk replay and discard, task types, and the
 * problem a bad filter gets as a LonghaulApiError.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { randomUUID } from 'node:crypto';
import { LonghaulApiError, LonghaulClient } from '../../src/client/index.js';
import { failedThroughStore } from '../support/dead-letters.js';
import { KEY_A, type Harness, startHarness } from '../support/http-harness.js';

describe('client: dead letters', () => {
  let h: Harness;
  let client: LonghaulClient;

  before(async () => {
    h = await startHarness();
    client = new LonghaulClient({ baseUrl: h.base, apiKey: KEY_A });
  });
  after(async () => {
    await h.close();
  });

  /** A t.flaky job (fails on its first run with FIRST_RUN), failed. */
  async function failed(): Promise<string> {
    const job = await client.submit('t.flaky', { key: randomUUID() });
    const end = await client.wait(job.id, { timeoutMs: 20_000 });
    assert.equal(end.status, 'failed');
    return job.id;
  }

  it('lists attempts, groups and pages, replays a group, discards by ids', async () => {
    const a = await failed();
    const b = await failed();
    const attempts = await client.attempts(a);
    assert.equal(attempts.nextCursor, null);
    assert.deepEqual(
      attempts.items.map((x) => [x.attempt, x.outcome, x.error?.code]),
      [[1, 'failed', 'FIRST_RUN']],
    );
    assert.match(attempts.items[0]?.stack ?? '', /first run fails/);

    const groups = await client.deadLetters({ type: 't.flaky' });
    assert.deepEqual(
      groups.map((g) => [g.type, g.code, g.count]),
      [['t.flaky', 'FIRST_RUN', 2]],
    );
    const page1 = await client.deadLetterJobs({ type: 't.flaky', code: 'FIRST_RUN', limit: 1 });
    assert.equal(page1.items.length, 1);
    assert.ok(page1.nextCursor);
    const page2 = await client.deadLetterJobs({ type: 't.flaky', code: 'FIRST_RUN', limit: 1, cursor: page1.nextCursor });
    assert.deepEqual([...page1.items, ...page2.items].map((j) => j.id).sort(), [a, b].sort());

    assert.deepEqual(await client.discardDeadLetters({ ids: [b] }), { count: 1 });
    await assert.rejects(client.get(b), (err: unknown) => err instanceof LonghaulApiError && err.status === 404);

    assert.deepEqual(await client.retryDeadLetters({ type: 't.flaky', code: 'FIRST_RUN', failedAfter: new Date(Date.now() - 3_600_000) }), { count: 1 });
    const again = await client.wait(a, { timeoutMs: 20_000 });
    assert.equal(again.status, 'succeeded');
    assert.deepEqual(
      (await client.attempts(a)).items.map((x) => [x.attempt, x.outcome]),
      [
        [1, 'failed'],
        [1, 'succeeded'],
      ],
    );
    assert.deepEqual(await client.deadLetters({ type: 't.flaky' }), []);
  });

  it('code null names the group of jobs that failed without an error code (noCode=true in a listing)', async () => {
    const type = 't.nocode';
    const bare = await failedThroughStore(h.lh.store, { tenant: 'tenantA', type, count: 2 });
    const [coded] = await failedThroughStore(h.lh.store, { tenant: 'tenantA', type, count: 1, code: 'E_CODE' });
    const groups = await client.deadLetters({ type, code: null });
    assert.deepEqual(
      groups.map((g) => [g.code, g.count]),
      [[null, 2]],
    );
    const page = await client.deadLetterJobs({ type, code: null });
    assert.deepEqual(page.items.map((j) => j.id).sort(), [...bare].sort());
    assert.deepEqual(await client.discardDeadLetters({ type, code: null }), { count: 2 });
    assert.deepEqual(
      (await client.deadLetters({ type })).map((g) => g.code),
      ['E_CODE'],
    );
    assert.deepEqual(await client.discardDeadLetters({ ids: [coded as string] }), { count: 1 });
  });

  it('a bad filter is a LonghaulApiError with the problem; task types carry their input schema', async () => {
    await assert.rejects(
      client.retryDeadLetters({ failedAfter: 'last tuesday' }),
      (err: unknown) => err instanceof LonghaulApiError && err.status === 400 && err.code === 'INVALID_REQUEST' && /failedAfter/.test(err.message),
    );
    await assert.rejects(client.deadLetters({ tenant: '*' }), (err: unknown) => err instanceof LonghaulApiError && err.status === 403);
    const types = await client.taskTypes();
    const schema = types.find((t) => t.type === 't.schema');
    assert.equal((schema?.inputSchema as { required?: string[] } | null)?.required?.[0], 'n');
    assert.equal(types.find((t) => t.type === 't.quick')?.inputSchema, null);
  });
});
