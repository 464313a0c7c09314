/**
 * An admin's `tenant` parameter (src/server/tenant-scope.ts) on SQLite and PostgreSQL: `GET
 * /v1/jobs?tenant=` lists another tenant's jobs (or every tenant's with `*`, page by page), the
 * job's own routes read and act on it with the same parameter, `/v1/events?tenant=` streams its
 * changes; a tenant key naming another tenant gets a 403 problem, naming its own is fine; a
 * server without API keys treats every caller as an admin; `GET /v1/whoami` says which.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import type { JobSnapshot } from '../../src/core/job.js';
import { LonghaulApiError, LonghaulClient } from '../../src/client/index.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase } from '../support/postgres.js';

const ADMIN = 'admin-key-0123456789';
const ACME = 'acme-key-0123456789';
const OTHER = 'other-key-0123456789';
const auth = (key: string) => ({ authorization: `Bearer ${key}` });

// No worker runs: the jobs stay queued.
const tasks = [defineTask({ type: 'ts.wait', async run() {
  return 1;
} })];

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const pgDb = await createTestDatabase('lh_tenant_scope');
after(() => pgDb.drop());
let schemas = 0;

const backends: Array<{ name: string; open(): Store }> = [
  {
    name: 'sqlite',
    open() {
      const dir = mkdtempSync(join(tmpdir(), 'longhaul-tenant-scope-'));
      dirs.push(dir);
      return new SqliteStore({ path: join(dir, 'jobs.db') });
    },
  },
  { name: 'postgres', open: () => new PostgresStore({ connectionString: pgDb.url, schema: `ts${++schemas}` }) },
];

for (const backend of backends) {
  describe(`an admin's tenant parameter: ${backend.name}`, () => {
    let lh: Longhaul;
    let app: FastifyInstance;
    let open: FastifyInstance;
    let store: Store;
    let base: string;
    const ids: Record<'acme' | 'other' | 'ops', string[]> = { acme: [], other: [], ops: [] };

    before(async () => {
      store = backend.open();
      lh = await Longhaul.open({ store, tasks, logger: pino({ level: 'silent' }) });
      app = await buildServer({ lh, apiKeys: parseApiKeys(`ops:${ADMIN},acme:${ACME},other:${OTHER}`), adminTenants: ['ops'], logger: false });
      open = await buildServer({ lh, logger: false });
      base = await app.listen({ port: 0, host: '127.0.0.1' });
      for (const [tenant, n] of [['acme', 3], ['other', 2], ['ops', 1]] as const) {
        for (let i = 0; i < n; i++) ids[tenant].push((await lh.submit('ts.wait', { i }, { tenant, metadata: { owner: tenant } })).id);
      }
    });
    after(async () => {
      await app.close();
      await open.close();
      await lh.close();
      await store.close();
    });

    const get = (url: string, key: string) => app.inject({ method: 'GET', url, headers: auth(key) });
    const listed = async (url: string, key: string) => {
      const res = await get(url, key);
      assert.equal(res.statusCode, 200, `${url}: ${res.body}`);
      return (res.json() as { items: JobSnapshot[]; nextCursor: string | null }).items.map((j) => j.id).sort();
    };
    const forbidden = (res: { statusCode: number; headers: Record<string, unknown>; json(): unknown }, what: string) => {
      assert.equal(res.statusCode, 403, what);
      assert.match(String(res.headers['content-type']), /application\/problem\+json/);
      assert.equal((res.json() as { code: string }).code, 'FORBIDDEN');
    };

    it('lists another tenant\'s jobs for an admin, every tenant\'s with *, and refuses a tenant key with 403', async () => {
      assert.deepEqual(await listed('/v1/jobs', ADMIN), [...ids.ops].sort(), "an admin's own by default");
      assert.deepEqual(await listed('/v1/jobs?tenant=acme', ADMIN), [...ids.acme].sort());
      assert.deepEqual(await listed('/v1/jobs?tenant=other&q=OTHER', ADMIN), [...ids.other].sort(), 'with the other filters');
      assert.deepEqual(await listed('/v1/jobs?tenant=nobody', ADMIN), []);
      const everyone = [...ids.acme, ...ids.other, ...ids.ops].sort();
      assert.deepEqual(await listed('/v1/jobs?tenant=*', ADMIN), everyone);
      // Every tenant's, page by page.
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const res = await get(`/v1/jobs?tenant=*&limit=4${cursor ? `&cursor=${cursor}` : ''}`, ADMIN);
        const page = res.json() as { items: JobSnapshot[]; nextCursor: string | null };
        seen.push(...page.items.map((j) => j.id));
        cursor = page.nextCursor;
      } while (cursor);
      assert.deepEqual(seen.sort(), everyone);

      assert.deepEqual(await listed('/v1/jobs?tenant=acme', ACME), [...ids.acme].sort(), 'naming your own tenant is fine');
      forbidden(await get('/v1/jobs?tenant=other', ACME), 'another tenant');
      forbidden(await get('/v1/jobs?tenant=*', ACME), 'every tenant');
      assert.equal((await get('/v1/jobs?tenant=', ADMIN)).statusCode, 400);

      // The client and a server without API keys (every caller an admin).
      const client = new LonghaulClient({ baseUrl: base, apiKey: ADMIN });
      assert.deepEqual((await client.list({ tenant: 'other' })).items.map((j) => j.id).sort(), [...ids.other].sort());
      const refused = new LonghaulClient({ baseUrl: base, apiKey: ACME });
      await assert.rejects(refused.list({ tenant: 'other' }), (err: unknown) => err instanceof LonghaulApiError && err.status === 403);
      const res = await open.inject({ method: 'GET', url: '/v1/jobs?tenant=acme' });
      assert.deepEqual((res.json() as { items: JobSnapshot[] }).items.map((j) => j.id).sort(), [...ids.acme].sort());
    });

    it("reads and acts on one of another tenant's jobs with the same parameter", async () => {
      const id = ids.acme[0] as string;
      assert.equal((await get(`/v1/jobs/${id}`, ADMIN)).statusCode, 404, "without it, another tenant's job is not found");
      const job = await get(`/v1/jobs/${id}?tenant=acme`, ADMIN);
      assert.equal(job.statusCode, 200, job.body);
      assert.equal((job.json() as JobSnapshot).id, id);
      for (const path of ['transitions', 'attempts', 'checkpoint', 'webhooks']) {
        assert.equal((await get(`/v1/jobs/${id}/${path}?tenant=acme`, ADMIN)).statusCode, 200, path);
        assert.equal((await get(`/v1/jobs/${id}/${path}`, ADMIN)).statusCode, 404, `${path} without the tenant`);
        forbidden(await get(`/v1/jobs/${id}/${path}?tenant=acme`, OTHER), `${path} by another tenant's key`);
      }
      forbidden(await get(`/v1/jobs/${id}?tenant=acme`, OTHER), 'a tenant key');
      assert.equal((await get(`/v1/jobs/${id}?tenant=acme`, ACME)).statusCode, 200, 'its own tenant, named');
      assert.equal((await get(`/v1/jobs/${id}?tenant=*`, ADMIN)).statusCode, 400, '* is for listings');

      const cancelled = await app.inject({ method: 'POST', url: `/v1/jobs/${id}/cancel?tenant=acme`, headers: auth(ADMIN) });
      assert.equal(cancelled.statusCode, 202, cancelled.body);
      assert.equal((cancelled.json() as JobSnapshot).status, 'cancelled');
      const retried = await app.inject({ method: 'POST', url: `/v1/jobs/${id}/retry?tenant=acme`, headers: auth(ADMIN) });
      assert.equal(retried.statusCode, 202, retried.body);
      forbidden(await app.inject({ method: 'POST', url: `/v1/jobs/${id}/cancel?tenant=acme`, headers: auth(OTHER) }), 'cancel by another tenant');
      assert.equal((await lh.get(id))?.status, 'queued');
    });

    it("streams another tenant's changes to an admin (/v1/events?tenant=); a tenant key is refused", async () => {
      const controller = new AbortController();
      try {
        const refused = await fetch(`${base}/v1/events?tenant=acme`, { headers: auth(OTHER) });
        assert.equal(refused.status, 403);
        const res = await fetch(`${base}/v1/events?tenant=acme`, { headers: auth(ADMIN), signal: controller.signal });
        assert.equal(res.status, 200);
        const id = ids.acme[1] as string;
        const reader = (res.body as ReadableStream<Uint8Array>).getReader();
        const decoder = new TextDecoder();
        // The stream is open once its first bytes arrive (a keepalive or a frame); then the change.
        setTimeout(() => void lh.cancel(id, { tenant: 'acme' }), 200);
        let text = '';
        const deadline = Date.now() + 10_000;
        while (!text.includes(`"id":"${id}"`) && Date.now() < deadline) {
          const { value, done } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
        }
        assert.ok(text.includes(`"id":"${id}"`), `the cancel of acme's job reached the admin's stream: ${text.slice(0, 300)}`);
        assert.ok(!ids.ops.some((x) => text.includes(x)), "no other tenant's jobs");
      } finally {
        controller.abort();
      }
    });

    it('GET /v1/whoami: the tenant, whether it is an admin, and the tenants an admin may name', async () => {
      assert.deepEqual((await get('/v1/whoami', ADMIN)).json(), { tenant: 'ops', admin: true, tenants: ['acme', 'ops', 'other'] });
      assert.deepEqual((await get('/v1/whoami', ACME)).json(), { tenant: 'acme', admin: false, tenants: ['acme'] });
      assert.equal((await app.inject({ method: 'GET', url: '/v1/whoami' })).statusCode, 401);
      assert.deepEqual((await open.inject({ method: 'GET', url: '/v1/whoami' })).json(), { tenant: 'default', admin: true, tenants: ['default'] });
    });
  });
}
