/**
 * The typed client's workflow methods against the real server: submitBatch (all or none, one
 * idempotency key), signal (kept or waking the job, errors as LonghaulApiError) and
 * list({ parentId }), list({ q }).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { LonghaulApiError, LonghaulClient } from '../../src/client/index.js';
import { uuidv7 } from '../../src/core/ids.js';
import type { JobRecord } from '../../src/core/job.js';
import { suspend } from '../../src/core/transitions.js';
import { emptyWorkflow, NEVER } from '../../src/core/workflow.js';
import { newJob } from '../contract/store-contract/fixtures.js';
import { type Harness, KEY_A, startHarness } from '../support/http-harness.js';

describe('client: batches, signals, children', () => {
  let h: Harness;
  let c: LonghaulClient;
  before(async () => {
    h = await startHarness({ worker: false });
    c = new LonghaulClient({ baseUrl: h.base, apiKey: KEY_A });
  });
  after(async () => {
    await h?.close();
  });

  /** A running job of its own type in the client's tenant, claimed by hand. */
  async function running(overrides: Parameters<typeof newJob>[0] = {}): Promise<JobRecord> {
    const now = Date.now();
    const job = newJob({ tenant: 'tenantA', type: `cw-${uuidv7().slice(-12)}`, createdAt: now, runAt: now, ...overrides });
    await h.lh.store.insertJob({ job });
    const [claimed] = await h.lh.store.claimJobs({ workerId: 'w1', types: [{ type: job.type }], limit: 1, now });
    assert.ok(claimed);
    return claimed;
  }

  it('submitBatch creates every job, replays by key, and names the job a refused batch fails on', async () => {
    const jobs = [
      { type: 't.quick', input: { n: 1 } },
      { type: 't.quick', options: { priority: 'low' as const, delayMs: 60_000, metadata: { batch: 'b1' } } },
    ];
    const key = `cb-${randomUUID()}`;
    const first = await c.submitBatch(jobs, { idempotencyKey: key });
    assert.equal(first.replayed, false);
    assert.deepEqual(
      first.jobs.map((j) => [j.type, j.status, j.priority, j.metadata]),
      [
        ['t.quick', 'queued', 'normal', null],
        ['t.quick', 'pending', 'low', { batch: 'b1' }],
      ],
    );
    const again = await c.submitBatch(jobs, { idempotencyKey: key });
    assert.equal(again.replayed, true);
    assert.deepEqual(
      again.jobs.map((j) => j.id),
      first.jobs.map((j) => j.id),
    );
    await assert.rejects(c.submitBatch([{ type: 't.quick' }, { type: 't.schema', input: { n: 'x' } }]), (err: unknown) => {
      assert.ok(err instanceof LonghaulApiError);
      assert.equal(err.status, 422);
      assert.equal(err.code, 'INVALID_INPUT');
      assert.match(err.detail ?? '', /^jobs\[1\]: /);
      assert.ok((err.errors ?? []).every((e) => e.path.startsWith('jobs[1]')));
      return true;
    });
    await assert.rejects(c.submitBatch([{ type: 't.quick' }], { idempotencyKey: 'clé' }), TypeError);
  });

  it('signal: kept for a running job, wakes a waiting one; an ended job is a 409 JOB_ENDED', async () => {
    const job = await running();
    assert.deepEqual(await c.signal(job.id, 'approve', { ok: true }), { jobId: job.id, name: 'approve', resumed: false });
    const w = await running();
    const workflow = emptyWorkflow();
    workflow.waits['main#0'] = { kind: 'signal', name: 'go:now', deadline: null };
    await h.lh.store.suspend({ write: suspend(w, 'w1', Date.now(), NEVER, 'waiting for signal'), wait: { kind: 'signal', name: 'go:now', key: 'main#0' }, workflow });
    assert.deepEqual(await c.signal(w.id, 'go:now'), { jobId: w.id, name: 'go:now', resumed: true });
    assert.deepEqual(await h.lh.store.consumedSignal({ id: w.id, key: 'main#0' }), { payload: null });
    assert.equal((await c.get(w.id)).status, 'queued');
    await h.lh.cancel(w.id);
    await assert.rejects(c.signal(w.id, 'go:now', 1), { name: 'LonghaulApiError', status: 409, code: 'JOB_ENDED' });
    await assert.rejects(c.signal(w.id, 'no spaces', 1), { name: 'LonghaulApiError', status: 400, code: 'INVALID_REQUEST' });
  });

  it('list({ parentId }) lists only that job’s children', async () => {
    const parent = await running();
    const type = `cw-child-${uuidv7().slice(-8)}`;
    const children = [1, 2].map(() => newJob({ tenant: 'tenantA', type, parentId: parent.id, createdAt: Date.now(), runAt: Date.now() }));
    await h.lh.store.suspend({
      write: suspend(parent, 'w1', Date.now(), NEVER, 'waiting for children'),
      wait: { kind: 'children', failFast: false },
      workflow: emptyWorkflow(),
      children,
    });
    const page = await c.list({ parentId: parent.id });
    assert.deepEqual(page.items.map((j) => j.id).sort(), children.map((j) => j.id).sort());
    assert.deepEqual((await c.get(parent.id)).children?.total, 2);
  });

  it('list({ q }) finds jobs by text in their metadata', async () => {
    const tag = `tag-${uuidv7().slice(-12)}`;
    const job = await h.lh.submit('t.quick', {}, { tenant: 'tenantA', metadata: { tag } });
    const page = await c.list({ q: tag.toUpperCase() });
    assert.deepEqual(
      page.items.map((j) => j.id),
      [job.id],
    );
  });
});
