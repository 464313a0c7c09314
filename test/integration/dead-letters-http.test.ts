/**
 * Dead letters over HTTP (buildServer, app.inject) on SQLite and PostgreSQL: a job's attempts
 * (`GET /v1/jobs/{id}/attempts`), failed jobs by group and page (`GET /v1/dead-letters`,
 * `/v1/dead-letters/jobs`), bulk replay and discard in batches (`POST /v1/dead-letters/retry|discard`),
 * tenancy (admins via LONGHAUL_ADMIN_TENANTS), problem+json for bad filters, and the task types
 * (`GET /v1/task-types`).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { uuidv7 } from '../../src/core/ids.js';
import { FatalError } from '../../src/core/errors.js';
import type { JobSnapshot } from '../../src/core/job.js';
import type { JobAttempt } from '../../src/core/api-types.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { DEAD_LETTER_BATCH } from '../../src/core/limits.js';
import { failedThroughStore } from '../support/dead-letters.js';
import { settled } from '../support/jobs.js';
import { createTestDatabase } from '../support/postgres.js';

const ADMIN = 'admin-key-0123456789';
const USER = 'user-key-0123456789';
const OTHER = 'other-key-0123456789';
const auth = (key: string) => ({ authorization: `Bearer ${key}` });

/** Tasks that fail until healed (per instance: the set holds the healed types). */
const healed = new Set<string>();
class CodedError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}
const tasks = [
  defineTask({
    type: 'dl.twice',
    description: 'fails twice with E_TWICE, unless healed',
    maxAttempts: 2,
    backoff: { baseMs: 1, maxMs: 5 },
    input: { type: 'object', properties: { n: { type: 'integer' } } },
    async run() {
      if (healed.has('dl.twice')) return 'fine';
      throw new CodedError('flaky dependency', 'E_TWICE');
    },
  }),
  defineTask({
    type: 'dl.fatal',
    async run(input) {
      if (healed.has('dl.fatal')) return 'fine';
      throw new FatalError('bad input', { code: (input as { code?: string } | null)?.code ?? 'BAD_INPUT' });
    },
  }),
  defineTask({ type: 'dl.ok', async run() {
    return 1;
  } }),
];

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const pgDb = await createTestDatabase('lh_deadletters');
after(() => pgDb.drop());
let schemas = 0;

const backends: Array<{ name: string; open(): Store }> = [
  {
    name: 'sqlite',
    open() {
      const dir = mkdtempSync(join(tmpdir(), 'longhaul-dl-'));
      dirs.push(dir);
      return new SqliteStore({ path: join(dir, 'jobs.db') });
    },
  },
  { name: 'postgres', open: () => new PostgresStore({ connectionString: pgDb.url, schema: `dl${++schemas}` }) },
];

for (const backend of backends) {
  describe(`dead letters over HTTP: ${backend.name}`, () => {
    let lh: Longhaul;
    let app: FastifyInstance;
    let store: Store;

    before(async () => {
      healed.clear();
      store = backend.open();
      const blobDir = mkdtempSync(join(tmpdir(), 'longhaul-dl-blobs-'));
      dirs.push(blobDir);
      lh = await Longhaul.open({ store, tasks, logger: pino({ level: 'silent' }), files: { blobs: await FsBlobStore.open(blobDir) } });
      await lh.startWorker({ concurrency: 8 });
      app = await buildServer({ lh, apiKeys: parseApiKeys(`ops:${ADMIN},acme:${USER},other:${OTHER}`), adminTenants: ['ops'], logger: false });
    });
    after(async () => {
      await app.close();
      await lh.close();
      await store.close();
    });

    const get = async (url: string, key = USER) => app.inject({ method: 'GET', url, headers: auth(key) });
    const post = async (url: string, body: unknown, key = USER) => app.inject({ method: 'POST', url, headers: auth(key), payload: body as object });
    const failedJob = async (type: string, tenant: string, input: unknown = {}) => settled(lh, (await lh.submit(type, input, { tenant })).id, 20_000);

    it("lists a job's attempts with errors, stacks, workers and times, in pages; another tenant's job is a 404", async () => {
      const job = await failedJob('dl.twice', 'acme');
      assert.equal(job.status, 'failed');
      const res = await get(`/v1/jobs/${job.id}/attempts`);
      assert.equal(res.statusCode, 200, res.body);
      const { items, nextCursor } = res.json() as { items: JobAttempt[]; nextCursor: string | null };
      assert.equal(nextCursor, null);
      assert.deepEqual(
        items.map((a) => [a.attempt, a.outcome, a.reason, a.error?.code, a.error?.retryable]),
        [
          [1, 'retrying', 'retry scheduled', 'E_TWICE', true],
          [2, 'failed', 'attempts exhausted', 'E_TWICE', true],
        ],
      );
      for (const a of items) {
        assert.match(a.stack ?? '', /flaky dependency\n\s+at /, 'the stack of what the handler threw');
        assert.ok(a.workerId);
        assert.ok(a.startedAt && a.endedAt && Date.parse(a.startedAt) <= Date.parse(a.endedAt));
      }
      assert.equal(job.error?.code, 'E_TWICE');
      assert.ok(!('stack' in (job.error ?? {})), 'the snapshot carries no stack');

      const page1 = (await get(`/v1/jobs/${job.id}/attempts?limit=1`)).json() as { items: JobAttempt[]; nextCursor: string };
      assert.equal(page1.items.length, 1);
      assert.ok(page1.nextCursor);
      const page2 = (await get(`/v1/jobs/${job.id}/attempts?limit=1&cursor=${page1.nextCursor}`)).json() as { items: JobAttempt[]; nextCursor: string | null };
      assert.deepEqual([page2.items[0]?.attempt, page2.nextCursor], [2, null]);

      assert.equal((await get(`/v1/jobs/${job.id}/attempts`, OTHER)).statusCode, 404);
      assert.equal((await get(`/v1/jobs/${uuidv7()}/attempts`)).statusCode, 404);
      for (const q of ['limit=0', 'limit=abc', 'cursor=zz']) {
        const bad = await get(`/v1/jobs/${job.id}/attempts?${q}`);
        assert.equal(bad.statusCode, 400, q);
        assert.match(bad.headers['content-type'] as string, /application\/problem\+json/);
      }

      // A success is listed from the job itself.
      const ok = await settled(lh, (await lh.submit('dl.ok', {}, { tenant: 'acme' })).id, 20_000);
      const okAttempts = (await get(`/v1/jobs/${ok.id}/attempts`)).json() as { items: JobAttempt[] };
      assert.deepEqual(
        okAttempts.items.map((a) => [a.attempt, a.outcome, a.error, a.endedAt]),
        [[1, 'succeeded', null, ok.finishedAt]],
      );
      // The library and the HTTP API agree.
      assert.deepEqual((await lh.attempts(job.id, { tenant: 'acme' })).items, items);
    });

    it('groups failed jobs by type and error code per tenant, pages a group, and scopes tenants (admins may see all)', async () => {
      await failedJob('dl.fatal', 'acme', { code: 'G_ONE' });
      await failedJob('dl.fatal', 'acme', { code: 'G_ONE' });
      await failedJob('dl.fatal', 'acme', { code: 'G_TWO' });
      await failedJob('dl.fatal', 'other', { code: 'G_ONE' });
      const res = await get('/v1/dead-letters?type=dl.fatal');
      assert.equal(res.statusCode, 200, res.body);
      const groups = (res.json() as { items: Array<{ type: string; code: string; count: number; lastFailedAt: string; tenant?: string }> }).items;
      assert.deepEqual(
        groups.map((g) => [g.type, g.code, g.count, g.tenant]).sort(),
        [
          ['dl.fatal', 'G_ONE', 2, undefined],
          ['dl.fatal', 'G_TWO', 1, undefined],
        ],
      );
      assert.ok(groups.every((g) => Number.isFinite(Date.parse(g.lastFailedAt))));

      const forbidden = await get('/v1/dead-letters?tenant=*');
      assert.equal(forbidden.statusCode, 403);
      assert.equal(forbidden.json().code, 'FORBIDDEN');
      assert.equal((await get('/v1/dead-letters?tenant=other')).statusCode, 403);
      assert.equal((await get('/v1/dead-letters?tenant=acme')).statusCode, 200, 'naming your own tenant is fine');
      const all = (await get('/v1/dead-letters?tenant=*&type=dl.fatal&code=G_ONE', ADMIN)).json() as { items: Array<{ tenant: string; count: number }> };
      assert.deepEqual(all.items.map((g) => [g.tenant, g.count]).sort(), [
        ['acme', 2],
        ['other', 1],
      ]);
      const theirs = (await get('/v1/dead-letters?tenant=other&type=dl.fatal', ADMIN)).json() as { items: Array<{ code: string; count: number }> };
      assert.deepEqual(
        theirs.items.map((g) => [g.code, g.count]),
        [['G_ONE', 1]],
      );

      // The jobs of one group, a page at a time, newest failure first.
      const seen: JobSnapshot[] = [];
      let cursor: string | null = null;
      do {
        const page = await get(`/v1/dead-letters/jobs?type=dl.fatal&code=G_ONE&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
        assert.equal(page.statusCode, 200, page.body);
        const body = page.json() as { items: JobSnapshot[]; nextCursor: string | null };
        seen.push(...body.items);
        cursor = body.nextCursor;
      } while (cursor);
      assert.equal(seen.length, 2);
      assert.ok(seen.every((j) => j.status === 'failed' && j.error?.code === 'G_ONE' && j.type === 'dl.fatal'));
      assert.ok(Date.parse(seen[0]?.finishedAt as string) >= Date.parse(seen[1]?.finishedAt as string));
      assert.equal((await get('/v1/dead-letters/jobs?cursor=nonsense')).statusCode, 400);
    });

    it('refuses bad filters with problem+json', async () => {
      const cases: Array<[string, unknown, number]> = [
        ['/v1/dead-letters/retry', { failedAfter: 'yesterday' }, 400],
        ['/v1/dead-letters/retry', { failedAfter: '2026-01-02T00:00:00Z', failedBefore: '2026-01-01T00:00:00Z' }, 400],
        ['/v1/dead-letters/discard', { ids: [] }, 400],
        ['/v1/dead-letters/discard', { ids: 'x' }, 400],
        ['/v1/dead-letters/discard', { colour: 'red' }, 400],
        ['/v1/dead-letters/retry', { tenant: 'other' }, 403],
        ['/v1/dead-letters/discard', { tenant: '*' }, 403],
      ];
      for (const [url, body, status] of cases) {
        const res = await post(url, body);
        assert.equal(res.statusCode, status, `${url} ${JSON.stringify(body)}: ${res.body}`);
        assert.match(res.headers['content-type'] as string, /application\/problem\+json/);
        assert.equal(typeof res.json().detail, 'string');
      }
      const badTime = await get('/v1/dead-letters?failedBefore=soon');
      assert.equal(badTime.statusCode, 400);
      assert.equal(badTime.json().errors?.[0]?.path, 'failedBefore');
    });

    it('replays a group (its jobs run again and succeed), and discards another with its rows; other tenants are untouched', async () => {
      const mine = [await failedJob('dl.fatal', 'acme', { code: 'R_ME' }), await failedJob('dl.fatal', 'acme', { code: 'R_ME' })];
      const gone = [await failedJob('dl.fatal', 'acme', { code: 'D_ME' })];
      const theirs = await failedJob('dl.fatal', 'other', { code: 'R_ME' });
      healed.add('dl.fatal');
      try {
        const res = await post('/v1/dead-letters/retry', { type: 'dl.fatal', code: 'R_ME' });
        assert.equal(res.statusCode, 200, res.body);
        assert.deepEqual(res.json(), { count: 2 });
        for (const j of mine) {
          const end = await settled(lh, j.id, 20_000);
          assert.equal(end.status, 'succeeded');
          const attempts = (await lh.attempts(j.id)).items;
          assert.deepEqual(
            attempts.map((a) => [a.attempt, a.outcome]),
            [
              [1, 'failed'],
              [1, 'succeeded'],
            ],
            'the failed attempt stays in the history; the replay starts a new budget',
          );
        }
        assert.equal((await lh.get(theirs.id))?.status, 'failed', "another tenant's job is not replayed");
        assert.deepEqual((await post('/v1/dead-letters/retry', { type: 'dl.fatal', code: 'R_ME' })).json(), { count: 0 }, 'nothing left to replay');

        const discarded = await post('/v1/dead-letters/discard', { code: 'D_ME', failedBefore: new Date(Date.now() + 60_000).toISOString() });
        assert.deepEqual(discarded.json(), { count: 1 });
        assert.equal((await get(`/v1/jobs/${gone[0]?.id}`)).statusCode, 404);
        assert.equal(await store.listAttempts({ id: gone[0]?.id as string, limit: 10 }), null);
        // An admin acts on another tenant's by naming it; ids pick jobs out.
        assert.deepEqual((await post('/v1/dead-letters/discard', { tenant: 'other', ids: [theirs.id, uuidv7()] }, ADMIN)).json(), { count: 1 });
        assert.equal(await lh.get(theirs.id), null);
      } finally {
        healed.delete('dl.fatal');
      }
    });

    it(`works through more failed jobs than one batch (${DEAD_LETTER_BATCH}), batch after batch`, async () => {
      const n = DEAD_LETTER_BATCH * 2 + 7;
      const type = `dl.bulk.${backend.name}`;
      // Failed jobs made through the store (the worker does not run this type).
      const jobs = Array.from({ length: n }, () => ({
        id: uuidv7(),
        tenant: 'bulk',
        type,
        state: 'queued' as const,
        priority: 'normal' as const,
        input: null,
        metadata: null,
        maxAttempts: 1,
        runAt: Date.now(),
        createdAt: Date.now(),
        timeoutMs: null,
        heartbeatTimeoutMs: 30_000,
        stallTimeoutMs: null,
        resultTtlMs: 60_000,
        parentId: null,
        idempotencyKey: null,
        requestHash: null,
      }));
      await store.insertJobs({ jobs });
      const claimed = await store.claimJobs({ workerId: 'bulk', types: [{ type }], limit: n, now: Date.now() });
      assert.equal(claimed.length, n);
      const at = Date.now();
      const applied = await store.transition({
        items: claimed.map((j, i) => ({
          id: j.id,
          from: 'running' as const,
          to: 'failed' as const,
          lease: j.lease,
          reason: 'fatal',
          at: at + (i % 3),
          patch: { error: { message: 'no', code: 'BULK', retryable: false }, finishedAt: at + (i % 3) },
        })),
      });
      assert.ok(applied.every(Boolean));
      const groups = (await get('/v1/dead-letters', ADMIN)).statusCode;
      assert.equal(groups, 200);
      assert.deepEqual(await lh.deadLetterGroups({ tenant: 'bulk' }), [{ type, code: 'BULK', count: n, lastFailedAt: new Date(at + 2).toISOString() }]);
      const retried = await lh.retryDeadLetters({ tenant: 'bulk', type });
      assert.equal(retried.count, n);
      assert.equal((await store.countByState({ tenant: 'bulk' })).queued, n);
      // Back to failed, then discarded in batches too.
      const all = await store.claimJobs({ workerId: 'bulk', types: [{ type }], limit: n, now: Date.now() });
      assert.equal(all.length, n);
      await store.transition({
        items: all.map((j) => ({ id: j.id, from: 'running' as const, to: 'failed' as const, lease: j.lease, reason: 'fatal', at, patch: { error: { message: 'no', code: 'BULK', retryable: false }, finishedAt: at } })),
      });
      const discarded = await lh.discardDeadLetters({ tenant: 'bulk' });
      assert.equal(discarded.count, n);
      assert.equal((await store.countByState({ tenant: 'bulk' })).failed, 0);
    });

    it('names the group without an error code: code null in a body, noCode=true in a query; the client and the library agree', async () => {
      const type = `dl.nocode.${backend.name}`;
      // Failed jobs made through the store (the worker does not run this type): acme's one with a
      // code and two without; other's two without.
      const [codedId] = await failedThroughStore(store, { tenant: 'acme', type, count: 1, code: 'HAS_CODE' });
      const mine = await failedThroughStore(store, { tenant: 'acme', type, count: 2 });
      const theirs = await failedThroughStore(store, { tenant: 'other', type, count: 2 });
      const coded = { id: codedId as string };
      const jobs = [coded, ...mine, ...theirs].map((id) => (typeof id === 'string' ? { id } : id));
      const groups = (await get(`/v1/dead-letters?type=${type}`)).json() as { items: Array<{ code: string | null; count: number }> };
      assert.deepEqual(groups.items.map((g) => [g.code, g.count]).sort(), [
        [null, 2],
        ['HAS_CODE', 1],
      ]);
      const listed = await get(`/v1/dead-letters/jobs?type=${type}&noCode=true`);
      assert.equal(listed.statusCode, 200, listed.body);
      const page = listed.json() as { items: JobSnapshot[] };
      assert.equal(page.items.length, 2);
      assert.ok(page.items.every((j) => j.error === null && j.id !== coded.id));
      assert.deepEqual((await get(`/v1/dead-letters?type=${type}&noCode=true`)).json().items.map((g: { code: null; count: number }) => [g.code, g.count]), [[null, 2]]);
      for (const [url, status] of [
        [`/v1/dead-letters/jobs?type=${type}&noCode=true&code=X`, 400],
        [`/v1/dead-letters?noCode=yes`, 400],
      ] as const) {
        const bad = await get(url);
        assert.equal(bad.statusCode, status, url);
        assert.match(bad.headers['content-type'] as string, /application\/problem\+json/);
      }

      // Replay the group by name: only the caller's jobs without a code.
      const retried = await post('/v1/dead-letters/retry', { type, code: null });
      assert.equal(retried.statusCode, 200, retried.body);
      assert.deepEqual(retried.json(), { count: 2 });
      const states = async () => Object.fromEntries(await Promise.all(jobs.map(async (j) => [j.id, (await store.getJob({ id: j.id }))?.state ?? 'gone'])));
      const after1 = await states();
      assert.equal(after1[coded.id], 'failed', 'the job with a code is not in the group');
      assert.equal(after1[jobs[4]?.id as string], 'failed', "another tenant's job is untouched");
      assert.deepEqual([after1[jobs[1]?.id as string], after1[jobs[2]?.id as string]], ['queued', 'queued']);
      // An admin discards every tenant's no-code group, through the library's selection too.
      assert.deepEqual((await post('/v1/dead-letters/discard', { tenant: '*', type, code: null }, ADMIN)).json(), { count: 2 });
      const after2 = await states();
      assert.deepEqual([after2[jobs[3]?.id as string], after2[jobs[4]?.id as string], after2[coded.id]], ['gone', 'gone', 'failed']);
      assert.deepEqual(await lh.deadLetterGroups({ type, code: null }), []);
      assert.deepEqual((await lh.discardDeadLetters({ type, code: 'HAS_CODE' })).count, 1);
    });

    it('lists the task types with their input JSON Schema (null when none)', async () => {
      const res = await get('/v1/task-types');
      assert.equal(res.statusCode, 200, res.body);
      const types = res.json() as Array<{ type: string; inputSchema: unknown; description: string | null; maxAttempts: number | null }>;
      assert.deepEqual(
        types.map((t) => t.type),
        ['dl.fatal', 'dl.ok', 'dl.twice'],
      );
      const twice = types.find((t) => t.type === 'dl.twice');
      assert.deepEqual(twice?.inputSchema, { type: 'object', properties: { n: { type: 'integer' } } });
      assert.equal(twice?.description, 'fails twice with E_TWICE, unless healed');
      assert.equal(twice?.maxAttempts, 2);
      assert.equal(types.find((t) => t.type === 'dl.ok')?.inputSchema, null);
      assert.equal((await app.inject({ method: 'GET', url: '/v1/task-types' })).statusCode, 401);
    });
  });
}
