/**
 * The public surfaces of workflows, on both stores: signals (library and HTTP), batches (all or
 * none, one idempotency key, the queue limit), children listing and counts in snapshots, and
 * the cancel cascade. Parents are made with `store.suspend` directly (as a handler's ctx.spawn
 * would), and jobs are claimed by hand: the harness runs no worker, so nothing moves unless the
 * test moves it.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { uuidv7 } from '../../src/core/ids.js';
import type { JobRecord, JobSnapshot } from '../../src/core/job.js';
import { JOB_STATES, type JobState } from '../../src/core/states.js';
import { suspend } from '../../src/core/transitions.js';
import { emptyWorkflow, NEVER, type WaitCondition } from '../../src/core/workflow.js';
import type { NewJob } from '../../src/store/store.js';
import { cancelChildren } from '../../src/workflow/cancel-children.js';
import { newJob } from '../contract/store-contract/fixtures.js';
import { call, type Harness, KEY_A, KEY_B, problemOf, startHarness } from '../support/http-harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/** The harness's API key KEY_A is this tenant's. */
const TENANT = 'tenantA';

/** A value nested `depth` arrays deep. */
function nest(depth: number): unknown {
  return depth === 0 ? 1 : [nest(depth - 1)];
}

function counts(partial: Partial<Record<JobState, number>>): Record<JobState, number> {
  return Object.fromEntries(JOB_STATES.map((s) => [s, partial[s] ?? 0])) as Record<JobState, number>;
}

interface Target {
  name: string;
  start(options?: { maxQueued?: number }): Promise<Harness>;
  cleanup(): Promise<void>;
}

const dbs: TestDatabase[] = [];
const TARGETS: Target[] = [
  { name: 'SQLite', start: (o = {}) => startHarness({ worker: false, ...o }), cleanup: async () => {} },
  {
    name: 'PostgreSQL',
    async start(o = {}) {
      const db = await createTestDatabase('lh_wf_api');
      dbs.push(db);
      return startHarness({ worker: false, database: db.url, ...o });
    },
    async cleanup() {
      for (const db of dbs.splice(0)) await db.drop();
    },
  },
];

for (const target of TARGETS) {
  describe(`workflow API on ${target.name}`, () => {
    let h: Harness;
    before(async () => {
      h = await target.start();
    });
    after(async () => {
      await h?.close();
      await target.cleanup();
    });

    /** A job of its own type (so claiming that type finds it and nothing else), inserted in the harness tenant. */
    function jobOf(overrides: Partial<NewJob> = {}): NewJob {
      const now = Date.now();
      return newJob({ tenant: TENANT, type: `wf-${uuidv7().slice(-12)}`, createdAt: now, runAt: now, ...overrides });
    }

    async function insert(overrides: Partial<NewJob> = {}): Promise<JobRecord> {
      const r = await h.lh.store.insertJob({ job: jobOf(overrides) });
      assert.equal(r.kind, 'created');
      return (r as { job: JobRecord }).job;
    }

    async function claim(type: string, limit = 1): Promise<JobRecord[]> {
      return h.lh.store.claimJobs({ workerId: 'w1', types: [{ type }], limit, now: Date.now() });
    }

    async function runningJob(): Promise<JobRecord> {
      const job = await insert();
      const [claimed] = await claim(job.type);
      assert.ok(claimed);
      return claimed;
    }

    async function record(id: string): Promise<JobRecord> {
      const job = await h.lh.store.getJob({ id });
      assert.ok(job, `job ${id} exists`);
      return job;
    }

    /** Suspends the running job on `wait` (with `children` inserted for a children wait). */
    async function suspendOn(job: JobRecord, wait: WaitCondition, children?: NewJob[]) {
      const workflow = emptyWorkflow();
      if (wait.kind === 'signal') workflow.waits[wait.key] = { kind: 'signal', name: wait.name, deadline: null };
      const write = suspend(job, 'w1', Date.now(), NEVER, `waiting for ${wait.kind}`);
      return h.lh.store.suspend({ write, wait, workflow, ...(children ? { children } : {}) });
    }

    /** A running job suspended on `n` new children of one type: the parent (waiting) and the children. */
    async function parentWith(n: number, parent?: JobRecord): Promise<{ parent: JobRecord; children: NewJob[] }> {
      const p = parent ?? (await runningJob());
      const type = `child-${uuidv7().slice(-12)}`;
      const children = Array.from({ length: n }, () => jobOf({ type, parentId: p.id }));
      assert.deepEqual(await suspendOn(p, { kind: 'children', failFast: false }, children), { kind: 'suspended' });
      return { parent: await record(p.id), children };
    }

    function recordEvents() {
      const changed: Array<{ id: string; from: JobState; to: JobState; reason: string }> = [];
      const requested: Array<{ id: string; reason: string }> = [];
      const offs = [h.lh.bus.on('job:changed', (e) => changed.push(e)), h.lh.bus.on('job:cancel-requested', (e) => requested.push(e))];
      const stop = () => {
        for (const off of offs) off();
      };
      return { changed, requested, stop };
    }

    /** The first snapshot frame of the job's SSE stream. */
    async function firstSseSnapshot(id: string): Promise<JobSnapshot> {
      const ctrl = new AbortController();
      const res = await fetch(`${h.base}/v1/jobs/${id}/events`, { headers: { authorization: `Bearer ${KEY_A}` }, signal: ctrl.signal });
      assert.equal(res.status, 200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let text = '';
      try {
        for (;;) {
          const { value, done } = await reader.read();
          assert.ok(!done, `the stream ended before a snapshot: ${text}`);
          text += decoder.decode(value, { stream: true });
          // Only whole frames (ended by a blank line) are read: a chunk may end mid-line.
          for (const frame of text.split('\n\n').slice(0, -1)) {
            const data = frame.split('\n').find((l) => l.startsWith('data: '));
            if (data) return JSON.parse(data.slice(6)) as JobSnapshot;
          }
        }
      } finally {
        ctrl.abort();
      }
    }

    /** The tenant's jobs by state (nothing runs on its own here, so a difference is what a request did). */
    const tenantCounts = () => h.lh.store.countByState({ tenant: TENANT });

    describe('signals', () => {
      it('a running job: 202 resumed false (kept); its next wait for that name consumes it, payload intact', async () => {
        const job = await runningJob();
        const payload = { approved: true, by: 'ops', notes: ['a', 'ü'] };
        const res = await call(h.base, `/v1/jobs/${job.id}/signals/approve`, { body: payload });
        assert.equal(res.status, 202, res.text);
        assert.deepEqual(res.json, { jobId: job.id, name: 'approve', resumed: false });
        assert.equal((await record(job.id)).state, 'running');
        const waited = await suspendOn(job, { kind: 'signal', name: 'approve', key: 'main#0' });
        assert.deepEqual(waited, { kind: 'signalled', payload });
        assert.deepEqual(await h.lh.store.consumedSignal({ id: job.id, key: 'main#0' }), { payload });
      });

      it('a job waiting for the signal: 202 resumed true, queued again, the resumption announced; the payload is what the wait consumed', async () => {
        const job = await runningJob();
        assert.deepEqual(await suspendOn(job, { kind: 'signal', name: 'order.paid:v1', key: 'main#0' }), { kind: 'suspended' });
        const waiting = await call(h.base, `/v1/jobs/${job.id}`);
        assert.equal(waiting.json.status, 'waiting');
        assert.deepEqual(waiting.json.waitingFor, { kind: 'signal', name: 'order.paid:v1', failFast: false });
        const events = recordEvents();
        const res = await call(h.base, `/v1/jobs/${job.id}/signals/order.paid:v1`, { raw: '"paid in full"' });
        events.stop();
        assert.equal(res.status, 202, res.text);
        assert.deepEqual(res.json, { jobId: job.id, name: 'order.paid:v1', resumed: true });
        assert.equal((await record(job.id)).state, 'queued');
        const mine = events.changed.filter((e) => e.id === job.id);
        assert.equal(mine.length, 1);
        assert.deepEqual([mine[0]?.from, mine[0]?.to], ['waiting', 'queued']);
        const log = await h.lh.transitions(job.id);
        assert.equal(mine[0]?.reason, log.at(-1)?.reason, 'the event carries the reason the store logged');
        assert.deepEqual(await h.lh.store.consumedSignal({ id: job.id, key: 'main#0' }), { payload: 'paid in full' });
      });

      it('an empty body is a null payload; the library sends one too', async () => {
        const job = await runningJob();
        await suspendOn(job, { kind: 'signal', name: 'go', key: 'main#0' });
        const res = await call(h.base, `/v1/jobs/${job.id}/signals/go`, { method: 'POST' });
        assert.equal(res.status, 202, res.text);
        assert.equal(res.json.resumed, true);
        assert.deepEqual(await h.lh.store.consumedSignal({ id: job.id, key: 'main#0' }), { payload: null });

        const other = await runningJob();
        assert.deepEqual(await h.lh.signal(other.id, 'later', [1, 2], { tenant: TENANT }), { jobId: other.id, name: 'later', resumed: false });
      });

      it('404 for an unknown job and for another tenant’s (400 for an id that is not one); 409 JOB_ENDED for an ended one', async () => {
        problemOf(await call(h.base, `/v1/jobs/${uuidv7()}/signals/go`, { body: 1 }), 404, 'NOT_FOUND');
        problemOf(await call(h.base, '/v1/jobs/not-a-uuid/signals/go', { body: 1 }), 400, 'INVALID_REQUEST');
        const job = await insert();
        problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/go`, { body: 1, key: KEY_B }), 404, 'NOT_FOUND');
        await h.lh.cancel(job.id);
        const p = problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/go`, { body: 1 }), 409, 'JOB_ENDED');
        assert.match(String(p.detail), /cancelled/);
      });

      it('a bad name is a 400 naming it; an unstorable or too deep payload, or a body that is not JSON, is refused, and nothing is stored', async () => {
        const job = await runningJob();
        for (const name of ['has%20space', 'x'.repeat(129), 'semi%3Bcolon', 'slash%2Fin']) {
          const p = problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/${name}`, { body: 1 }), 400, 'INVALID_REQUEST');
          assert.match(String(p.detail), /signal name/);
        }
        assert.equal((await call(h.base, `/v1/jobs/${job.id}/signals/${'x'.repeat(128)}`, { body: 1 })).status, 202);
        const p = problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/bad`, { raw: '{"s":"a\\u0000b"}' }), 422, 'UNSTORABLE_STRING');
        assert.deepEqual(
          (p.errors as Array<{ path: string }>).map((e) => e.path),
          ['payload.s'],
        );
        const deep = problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/bad`, { body: nest(65) }), 400, 'INVALID_REQUEST');
        assert.match(String(deep.detail), /payload nests deeper than 64 levels/);
        problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/bad`, { raw: '{"a":' }), 400, 'MALFORMED_JSON');
        problemOf(await call(h.base, `/v1/jobs/${job.id}/signals/bad`, { raw: 'x', contentType: 'text/plain' }), 415);
        // None of the refused ones was kept: the next wait for "bad" waits.
        assert.deepEqual(await suspendOn(job, { kind: 'signal', name: 'bad', key: 'main#0' }), { kind: 'suspended' });
      });
    });

    describe('batches', () => {
      it('POST /v1/batches and an array to POST /v1/jobs: 202 with every snapshot, in order', async () => {
        const res = await call(h.base, '/v1/batches', {
          body: {
            jobs: [
              { type: 't.quick', input: { n: 1 } },
              { type: 't.quick', input: { n: 2 }, priority: 'high' },
            ],
          },
        });
        assert.equal(res.status, 202, res.text);
        assert.equal(res.json.jobs.length, 2);
        assert.deepEqual(
          res.json.jobs.map((j: JobSnapshot) => [j.input, j.priority, j.status]),
          [
            [{ n: 1 }, 'normal', 'queued'],
            [{ n: 2 }, 'high', 'queued'],
          ],
        );
        for (const j of res.json.jobs) assert.equal((await call(h.base, `/v1/jobs/${j.id}`)).json.id, j.id);
        assert.equal(res.headers.get('location'), null, 'a batch has no one Location');

        const nested = await call(h.base, '/v1/batches', { body: { jobs: [{ type: 't.quick', input: nest(64) }] } });
        assert.equal(nested.status, 202, nested.text);
        const arr = await call(h.base, '/v1/jobs', {
          body: [{ type: 't.quick' }, { type: 't.schema', input: { n: 3 } }, { type: 't.quick', delayMs: 60_000 }],
        });
        assert.equal(arr.status, 202, arr.text);
        assert.deepEqual(
          arr.json.jobs.map((j: JobSnapshot) => [j.type, j.status]),
          [
            ['t.quick', 'queued'],
            ['t.schema', 'queued'],
            ['t.quick', 'pending'],
          ],
        );
      });

      it('one refused job refuses the batch, naming it, and creates nothing', async () => {
        const before = await tenantCounts();
        const unknown = problemOf(await call(h.base, '/v1/batches', { body: { jobs: [{ type: 't.quick' }, { type: 'no.such' }] } }), 422, 'UNKNOWN_TASK');
        assert.match(String(unknown.detail), /^jobs\[1\]: unknown task type "no\.such"/);
        const input = problemOf(
          await call(h.base, '/v1/jobs', { body: [{ type: 't.quick' }, { type: 't.quick' }, { type: 't.schema', input: { n: 0 } }] }),
          422,
          'INVALID_INPUT',
        );
        assert.match(String(input.detail), /^jobs\[2\]: /);
        assert.ok(
          (input.errors as Array<{ path: string }>).every((e) => e.path.startsWith('jobs[2]')),
          JSON.stringify(input.errors),
        );
        const shape = problemOf(
          await call(h.base, '/v1/jobs', { body: [{ type: 't.quick' }, { type: 't.quick', priority: 'urgent' }] }),
          400,
          'INVALID_REQUEST',
        );
        assert.deepEqual(shape.errors, [{ path: 'jobs[1].priority', message: 'must be one of critical, high, normal, low' }]);
        problemOf(
          await call(h.base, '/v1/batches', { body: { jobs: [{ type: 't.quick' }, { type: 't.quick', input: 'a\u0000' }] } }),
          422,
          'UNSTORABLE_STRING',
        );
        // A batch's job may nest its input as deeply as a single job's (64 levels), no deeper.
        const deepest = problemOf(await call(h.base, '/v1/batches', { body: { jobs: [{ type: 't.quick', input: nest(65) }] } }), 400, 'INVALID_REQUEST');
        assert.deepEqual(
          (deepest.errors as Array<{ path: string }>).map((e) => e.path),
          ['jobs[0].input'],
        );
        problemOf(await call(h.base, '/v1/batches', { body: { jobs: [] } }), 400, 'INVALID_REQUEST');
        problemOf(await call(h.base, '/v1/batches', { body: { jobs: [{ type: 't.quick' }], extra: 1 } }), 400, 'INVALID_REQUEST');
        const big = problemOf(
          await call(h.base, '/v1/batches', { body: { jobs: Array.from({ length: 1001 }, () => ({ type: 't.quick' })) } }),
          413,
          'BATCH_TOO_LARGE',
        );
        assert.match(String(big.detail), /at most 1000 jobs/);
        assert.deepEqual(await tenantCounts(), before);
      });

      it('one Idempotency-Key for the batch: the same batch answers the same jobs (200, replayed); a different one is a conflict that creates nothing', async () => {
        const key = `batch-${randomUUID()}`;
        const jobs = [
          { type: 't.quick', input: { a: 1 } },
          { type: 't.schema', input: { n: 2 } },
        ];
        const first = await call(h.base, '/v1/batches', { body: { jobs }, headers: { 'idempotency-key': key } });
        assert.equal(first.status, 202, first.text);
        const again = await call(h.base, '/v1/jobs', { body: jobs, headers: { 'idempotency-key': key } });
        assert.equal(again.status, 200, again.text);
        assert.equal(again.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(
          again.json.jobs.map((j: JobSnapshot) => j.id),
          first.json.jobs.map((j: JobSnapshot) => j.id),
        );
        const before = await tenantCounts();
        const reordered = [jobs[1], jobs[0]];
        problemOf(await call(h.base, '/v1/batches', { body: { jobs: reordered }, headers: { 'idempotency-key': key } }), 422, 'IDEMPOTENCY_CONFLICT');
        problemOf(await call(h.base, '/v1/batches', { body: { jobs: [jobs[0]] }, headers: { 'idempotency-key': key } }), 422, 'IDEMPOTENCY_CONFLICT');
        assert.deepEqual(await tenantCounts(), before);
        // A longer batch under the same key: its extra job is withdrawn (cancelled), nothing is left to run.
        problemOf(
          await call(h.base, '/v1/batches', { body: { jobs: [...jobs, { type: 't.quick' }] }, headers: { 'idempotency-key': key } }),
          422,
          'IDEMPOTENCY_CONFLICT',
        );
        const after = await tenantCounts();
        assert.deepEqual({ ...after, cancelled: before.cancelled }, before);
        // The key of a batch is not the key of a single job.
        assert.equal((await call(h.base, '/v1/jobs', { body: jobs[0], headers: { 'idempotency-key': key } })).status, 202);
      });

      it('the library: enqueueMany replays by key, submitMany throws what a single submit would', async () => {
        const key = `lib-${randomUUID()}`;
        const items = [{ type: 't.quick', input: 1, options: { tenant: TENANT } }];
        const a = await h.lh.enqueueMany(items, { idempotencyKey: key });
        const b = await h.lh.enqueueMany(items, { idempotencyKey: key });
        assert.deepEqual([a.replayed, b.replayed], [false, true]);
        assert.equal(b.jobs[0]?.id, a.jobs[0]?.id);
        await assert.rejects(h.lh.submitMany([{ type: 't.quick' }, { type: 'nope' }]), { name: 'UnknownTaskError', code: 'UNKNOWN_TASK' });
        await assert.rejects(h.lh.enqueueMany([{ type: 't.quick' }, { type: 'nope' }]), { name: 'BatchItemError', index: 1, code: 'UNKNOWN_TASK' });
        await assert.rejects(h.lh.enqueueMany([{ type: 't.quick', options: { idempotencyKey: 'own' } }], { idempotencyKey: key }), { code: 'INVALID_OPTIONS' });
      });
    });

    describe('children', () => {
      it('GET /v1/jobs?parentId lists the children (paged, tenant-scoped); every snapshot of the parent counts them', async () => {
        const { parent, children } = await parentWith(3);
        const page1 = await call(h.base, `/v1/jobs?parentId=${parent.id}&limit=2`);
        assert.equal(page1.status, 200, page1.text);
        assert.equal(page1.json.items.length, 2);
        assert.ok(page1.json.nextCursor);
        const page2 = await call(h.base, `/v1/jobs?parentId=${parent.id}&limit=2&cursor=${encodeURIComponent(page1.json.nextCursor)}`);
        const listed = [...page1.json.items, ...page2.json.items].map((j: JobSnapshot) => j.id);
        assert.deepEqual(listed.sort(), children.map((c) => c.id).sort());
        assert.ok([...page1.json.items, ...page2.json.items].every((j: JobSnapshot) => j.parentId === parent.id && j.children === null));
        assert.deepEqual((await call(h.base, `/v1/jobs?parentId=${parent.id}&status=running`)).json.items, []);
        assert.deepEqual((await call(h.base, `/v1/jobs?parentId=${parent.id}`, { key: KEY_B })).json.items, []);
        assert.deepEqual((await call(h.base, `/v1/jobs?parentId=${uuidv7()}`)).json.items, []);

        const expected = { total: 3, byState: counts({ queued: 3 }) };
        assert.deepEqual((await call(h.base, `/v1/jobs/${parent.id}`)).json.children, expected);
        assert.deepEqual((await h.lh.get(parent.id))?.children, expected);
        const listedParent = (await h.lh.list({ tenant: TENANT, status: 'waiting', limit: 1000 })).items.find((j) => j.id === parent.id);
        assert.deepEqual(listedParent?.children, expected);
        const watch = h.lh.watch(parent.id);
        assert.deepEqual((await watch.next()).value?.children, expected);
        await watch.return(undefined);
        assert.deepEqual((await firstSseSnapshot(parent.id)).children, expected);

        // A child that runs changes the counts.
        const [c] = await claim((children[0] as NewJob).type);
        assert.ok(c);
        assert.deepEqual((await call(h.base, `/v1/jobs/${parent.id}`)).json.children, { total: 3, byState: counts({ queued: 2, running: 1 }) });
        assert.equal((await call(h.base, `/v1/jobs/${c.id}`)).json.children, null);
        problemOf(await call(h.base, `/v1/jobs?parentId=${'x'.repeat(65)}`), 400, 'INVALID_REQUEST');
      });
    });

    describe('cancel cascade', () => {
      it('a waiting parent: queued children cancelled, the running one asked to stop, each write announced', async () => {
        const { parent, children } = await parentWith(4);
        const [running] = await claim((children[0] as NewJob).type);
        assert.ok(running);
        const events = recordEvents();
        const res = await call(h.base, `/v1/jobs/${parent.id}/cancel`, { method: 'POST' });
        events.stop();
        assert.equal(res.status, 202, res.text);
        assert.equal(res.json.status, 'cancelled');
        assert.deepEqual(res.json.children, { total: 4, byState: counts({ cancelled: 3, running: 1 }) });
        for (const c of children) {
          const job = await record(c.id);
          if (c.id === running.id) {
            assert.deepEqual([job.state, job.cancelRequested, job.cancelReason], ['running', true, 'parent cancelled']);
          } else {
            assert.equal(job.state, 'cancelled');
            assert.equal(job.error?.message, 'cancelled; parent cancelled');
            assert.equal((await h.lh.transitions(c.id)).at(-1)?.reason, 'parent cancelled');
          }
        }
        const cancelled = events.changed.filter((e) => e.to === 'cancelled').map((e) => e.id);
        assert.deepEqual(cancelled.sort(), [parent.id, ...children.filter((c) => c.id !== running.id).map((c) => c.id)].sort());
        assert.deepEqual(events.requested, [{ id: running.id, reason: 'parent cancelled' }]);
      });

      it('grandchildren are cancelled too; cancelChildren counts every job it stopped', async () => {
        const { parent, children } = await parentWith(2);
        const [c1] = await claim((children[0] as NewJob).type);
        assert.ok(c1);
        const { children: grandchildren } = await parentWith(3, c1);
        assert.equal((await record(c1.id)).state, 'waiting');
        const n = await cancelChildren(h.lh.store, h.lh.bus, parent.id, Date.now(), 'sibling failed');
        assert.equal(n, 5);
        for (const j of [...children, ...grandchildren]) {
          const job = await record(j.id);
          assert.equal(job.state, 'cancelled', `${j.id} of ${j.parentId}`);
          assert.equal((await h.lh.transitions(j.id)).at(-1)?.reason, 'sibling failed');
        }
        // The parent itself is not cancelled (with all its children ended, it may be woken meanwhile).
        assert.ok(['waiting', 'queued'].includes((await record(parent.id)).state));
        assert.equal(await cancelChildren(h.lh.store, h.lh.bus, parent.id, Date.now(), 'sibling failed'), 0, 'nothing left to stop');
      });

      it('a running parent: a cancel request on it, and its children cancelled', async () => {
        const { parent, children } = await parentWith(2);
        // Woken and claimed again: running, with children.
        assert.deepEqual(
          await h.lh.store.transition({
            items: [{ id: parent.id, from: 'waiting', to: 'queued', reason: 'test', at: Date.now(), patch: { runAt: Date.now() } }],
          }),
          [true],
        );
        const [again] = await claim(parent.type);
        assert.equal(again?.childrenTotal, 2);
        const snap = await h.lh.cancel(parent.id, { tenant: TENANT });
        assert.deepEqual([snap.status, snap.cancelRequested], ['running', true]);
        assert.deepEqual(snap.children, { total: 2, byState: counts({ cancelled: 2 }) });
        for (const c of children) assert.equal((await record(c.id)).state, 'cancelled');
      });

      it('pages through many children (more than one page of 500)', async () => {
        const { parent, children } = await parentWith(1201);
        const t0 = performance.now();
        const snap = await h.lh.cancel(parent.id, { tenant: TENANT });
        const ms = performance.now() - t0;
        assert.deepEqual(snap.children, { total: 1201, byState: counts({ cancelled: 1201 }) });
        assert.equal(children.length, 1201);
        assert.ok(ms < 10_000, `cancelling 1,201 children took ${Math.round(ms)} ms`);
      });
    });
  });
}

for (const target of TARGETS) {
  describe(`workflow API on ${target.name}: the queue limit applies to a batch as a whole`, () => {
    let h: Harness;
    before(async () => {
      h = await target.start({ maxQueued: 5 });
    });
    after(async () => {
      await h?.close();
      await target.cleanup();
    });

    it('503 for a batch that does not fit, nothing created; a replay of a stored batch still answers', async () => {
      const key = `full-${randomUUID()}`;
      const four = Array.from({ length: 4 }, (_, n) => ({ type: 't.quick', input: { n } }));
      assert.equal((await call(h.base, '/v1/batches', { body: { jobs: four }, headers: { 'idempotency-key': key } })).status, 202);
      const full = problemOf(await call(h.base, '/v1/batches', { body: { jobs: [{ type: 't.quick' }, { type: 't.quick' }] } }), 503, 'QUEUE_FULL');
      assert.ok(full);
      assert.equal((await h.lh.store.countByState({})).queued, 4, 'nothing of the refused batch was created');
      assert.equal((await call(h.base, '/v1/jobs', { body: [{ type: 't.quick' }] })).status, 202, 'one more fits');
      problemOf(await call(h.base, '/v1/jobs', { body: [{ type: 't.quick' }] }), 503, 'QUEUE_FULL');
      const replay = await call(h.base, '/v1/batches', { body: { jobs: four }, headers: { 'idempotency-key': key } });
      assert.equal(replay.status, 200, replay.text);
      problemOf(
        await call(h.base, '/v1/batches', { body: { jobs: [...four, { type: 't.quick' }] }, headers: { 'idempotency-key': key } }),
        422,
        'IDEMPOTENCY_CONFLICT',
      );
      assert.equal((await h.lh.store.countByState({})).queued, 5);
    });
  });
}
