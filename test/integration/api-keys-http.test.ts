/**
 * API keys kept in the database (issue 36; facade/api-keys.ts, server/key-check.ts), on SQLite
 * and PostgreSQL: a server over a database holding keys requires them; a key made by
 * `lh.apiKeys.create` serves its own tenant's jobs only, an `--admin` key acts on every tenant;
 * a wrong secret is refused; environment keys keep working beside them; a revoked key is refused
 * at once by the server whose process revoked it, and by a second server over the same database
 * (another Longhaul instance: another process's cache) within its cache time (default 5 s).
 * Then what the cache and the last-use writes cost, on an injected clock.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { resolveConfig } from '../../src/config.js';
import { ApiKeys } from '../../src/facade/api-keys.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase } from '../support/postgres.js';

const ENV_KEY = 'env-key-for-globex-0123456789';
const silent = pino({ level: 'silent' });
// No worker runs: the jobs stay queued.
const tasks = [defineTask({ type: 'keys.wait', run: async () => 1 })];

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const pgDb = await createTestDatabase('lh_api_keys');
after(() => pgDb.drop());

const backends: Array<{ name: string; open(): () => Store }> = [
  {
    name: 'sqlite',
    open() {
      const dir = mkdtempSync(join(tmpdir(), 'longhaul-api-keys-'));
      dirs.push(dir);
      const path = join(dir, 'jobs.db');
      return () => new SqliteStore({ path });
    },
  },
  { name: 'postgres', open: () => () => new PostgresStore({ connectionString: pgDb.url, schema: 'keys_http' }) },
];

async function call(base: string, path: string, key: string | null, init: RequestInit = {}): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, { ...init, headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(init.headers ?? {}) } });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

for (const backend of backends) {
  describe(`API keys in the database: two servers over one ${backend.name} database`, () => {
    const opened: Array<{ lh: Longhaul; app: FastifyInstance; store: Store }> = [];
    let a: string;
    let b: string;
    let lhA: Longhaul;
    let lhB: Longhaul;

    before(async () => {
      const makeStore = backend.open();
      // The first instance makes the keys (as `longhaul keys create` does) before the servers start.
      for (let i = 0; i < 2; i++) {
        const store = makeStore();
        const lh = await Longhaul.open({ store, tasks, logger: silent, channel: false });
        opened.push({ lh, store, app: null as unknown as FastifyInstance });
      }
      lhA = (opened[0] as { lh: Longhaul }).lh;
      lhB = (opened[1] as { lh: Longhaul }).lh;
    });
    after(async () => {
      for (const o of opened) {
        await o.app?.close();
        await o.lh.close();
        await o.store.close();
      }
    });

    it('a key made in the database is required, serves its own tenant, and an admin key every tenant; the hash is what is stored', async () => {
      const acme = await lhA.apiKeys.create({ tenant: 'acme' });
      const ops = await lhA.apiKeys.create({ tenant: 'ops', admin: true });
      assert.match(acme.key, /^lh_[a-z2-7]{12}_[A-Za-z0-9_-]{43}$/);
      assert.equal(acme.view.prefix, `lh_${acme.view.id}_`);
      assert.ok(acme.key.startsWith(acme.view.prefix));
      const row = await (opened[0] as { store: Store }).store.getApiKey({ id: acme.view.id });
      assert.ok(row && row.hash !== acme.key && !row.hash.includes(acme.key.slice(-43)), 'the database keeps a hash, not the key');

      for (const [i, o] of opened.entries()) {
        // No LONGHAUL_API_KEYS besides one environment key of another tenant: both kinds pass.
        o.app = await buildServer({ lh: o.lh, apiKeys: parseApiKeys(`globex:${ENV_KEY}`), logger: false });
        const url = await o.app.listen({ port: 0, host: '127.0.0.1' });
        if (i === 0) a = url;
        else b = url;
      }
      for (const [tenant, n] of [['acme', 2], ['globex', 1], ['ops', 1]] as const) {
        for (let i = 0; i < n; i++) await lhA.submit('keys.wait', { i }, { tenant });
      }

      assert.equal((await call(a, '/v1/jobs', null)).status, 401, 'keys are required');
      for (const [i, base] of [a, b].entries()) {
        const mine = await call(base, '/v1/jobs', acme.key);
        assert.equal(mine.status, 200);
        assert.equal((mine.body.items as unknown[]).length, 2 + i, "acme's key lists acme's jobs (and the one it posted), nobody else's");
        const who = await call(base, '/v1/whoami', acme.key);
        assert.deepEqual([who.body.tenant, who.body.admin], ['acme', false]);
        const posted = await call(base, '/v1/jobs', acme.key, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ type: 'keys.wait', input: {} }) });
        assert.equal(posted.status, 202, JSON.stringify(posted.body));
        assert.equal((await call(base, '/v1/jobs?tenant=globex', acme.key)).status, 403, 'a tenant key is no admin');
        assert.equal(Array.isArray((await call(base, '/v1/jobs', ENV_KEY)).body.items), true, 'an environment key still works');
        const all = await call(base, '/v1/jobs?tenant=*', ops.key);
        assert.equal(all.status, 200, 'an admin database key reads every tenant');
        assert.ok((all.body.items as unknown[]).length >= 4);
        assert.deepEqual([(await call(base, '/v1/whoami', ops.key)).body.admin], [true]);
        const scraped = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${ops.key}` } });
        assert.equal(scraped.status, 200, 'an admin database key scrapes /metrics');
        assert.equal((await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${acme.key}` } })).status, 403);
        // The right id with a wrong secret, and junk in the key format.
        assert.equal((await call(base, '/v1/jobs', `${acme.key.slice(0, -2)}xx`)).status, 401);
        assert.equal((await call(base, '/v1/jobs', `lh_${'a'.repeat(12)}_${'b'.repeat(43)}`)).status, 401);
      }
      const listed = await lhB.apiKeys.list();
      assert.deepEqual(
        listed.map((k) => [k.id, k.tenant, k.admin, k.revokedAt]).sort((x, y) => String(x[1]).localeCompare(String(y[1]))),
        [
          [acme.view.id, 'acme', false, null],
          [ops.view.id, 'ops', true, null],
        ],
      );
      assert.ok(!JSON.stringify(listed).includes(acme.key.slice(-43)), 'a listing never shows a secret');
    });

    it('a key revoked through one server is refused by it at once, and by the other within seconds', async () => {
      const key = (await lhA.apiKeys.create({ tenant: 'acme' })).key;
      const id = key.slice(3, 15);
      assert.equal((await call(a, '/v1/jobs', key)).status, 200);
      assert.equal((await call(b, '/v1/jobs', key)).status, 200, 'the other server has looked the key up (and caches it)');
      const revokedAt = Date.now();
      await lhA.apiKeys.revoke(id);
      const refusedA = await call(a, '/v1/jobs', key);
      assert.equal(refusedA.status, 401, 'the revoking process refuses at once');
      assert.equal(refusedA.body.code, 'UNAUTHORIZED');
      let refusedAfter = -1;
      while (Date.now() - revokedAt < 8_000) {
        if ((await call(b, '/v1/jobs', key)).status === 401) {
          refusedAfter = Date.now() - revokedAt;
          break;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(refusedAfter >= 0, 'the second server refused the revoked key within 8 s');
      assert.ok(refusedAfter <= 5_500, `refused after ${refusedAfter} ms (cache 5 s)`);
      assert.equal((await lhB.apiKeys.list()).some((k) => k.id === id), false, 'a revoked key is not listed');
      assert.equal((await lhB.apiKeys.list({ revoked: true })).find((k) => k.id === id)?.revokedAt !== null, true);
      await assert.rejects(lhB.apiKeys.revoke('nosuchkey234'), /not found/);
    });
  });
}

describe('a server over a database without keys stays keyless; databaseKeys: false ignores them', () => {
  let dir: string;
  const open: Array<() => Promise<void>> = [];
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-api-keys-none-'));
  });
  afterEach(async () => {
    for (const close of open.splice(0).reverse()) await close();
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('keyless until the database holds a key (at the next start), and never with databaseKeys: false', async () => {
    const store = new SqliteStore({ path: join(dir, 'none.db') });
    const lh = await Longhaul.open({ store, tasks, logger: silent });
    open.push(() => store.close(), () => lh.close());
    const keyless = await buildServer({ lh, logger: false });
    open.push(() => keyless.close());
    assert.equal((await keyless.inject({ url: '/v1/jobs' })).statusCode, 200);
    await lh.apiKeys.create({ tenant: 'acme' });
    const required = await buildServer({ lh, logger: false });
    open.push(() => required.close());
    assert.equal((await required.inject({ url: '/v1/jobs' })).statusCode, 401);
    const ignoring = await buildServer({ lh, logger: false, databaseKeys: false });
    open.push(() => ignoring.close());
    assert.equal((await ignoring.inject({ url: '/v1/jobs' })).statusCode, 200);
  });
});

describe('the key cache and last-use writes (injected clock)', () => {
  it('one read per key per cache time, shared by concurrent requests; last use written at most once a minute', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'longhaul-api-keys-cache-'));
    dirs.push(dir);
    const store = new SqliteStore({ path: join(dir, 'cache.db') });
    await store.migrate();
    let now = 1_700_000_000_000;
    let reads = 0;
    let touches = 0;
    const getApiKey = store.getApiKey;
    const touchApiKey = store.touchApiKey;
    store.getApiKey = (p) => {
      reads++;
      return getApiKey(p);
    };
    store.touchApiKey = (p) => {
      touches++;
      return touchApiKey(p);
    };
    const keys = new ApiKeys({ store, logger: silent, cacheMs: 5_000, clock: () => now });
    try {
      const { key, view } = await keys.create({ tenant: 'acme' });
      const verified = await Promise.all([keys.verify(key), keys.verify(key), keys.verify(key)]);
      assert.deepEqual(verified, Array(3).fill({ tenant: 'acme', admin: false }));
      assert.equal(reads, 1, 'concurrent lookups of one key share one read');
      assert.deepEqual(keys.verify(key), { tenant: 'acme', admin: false }, 'a cached key is checked without waiting');
      assert.equal(keys.verify(`${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`), null, 'a wrong secret, from the cache');
      assert.equal(reads, 1);
      assert.equal(touches, 1, 'the first use is written');
      await new Promise((r) => setImmediate(r));
      assert.equal((await store.getApiKey({ id: view.id }))?.lastUsedAt, now);
      now += 4_999;
      keys.verify(key);
      assert.equal(reads, 2, 'still cached (the second read was the test’s own)');
      now += 1;
      assert.deepEqual(await keys.verify(key), { tenant: 'acme', admin: false });
      assert.equal(reads, 3, 'read again after the cache time');
      assert.equal(touches, 1, 'no second write within the minute');
      now += 60_000;
      await keys.verify(key);
      assert.equal(touches, 2, 'a minute later, one more');
      assert.equal(keys.verify('lh_short'), null, 'not the database format: no read');
      assert.equal(keys.verify(ENV_KEY), null);
      assert.equal(reads, 4, 'the minute later read the key again (past the cache time)');
      // Revoked through another handle on the database: refused once the cache time has passed.
      await store.revokeApiKey({ id: view.id, now });
      assert.deepEqual(keys.verify(key), { tenant: 'acme', admin: false }, 'the cached lookup is trusted for its time');
      now += 5_000;
      assert.equal(await keys.verify(key), null);
      await assert.rejects(keys.create({ tenant: '*' }), /tenant must be/);
      await assert.rejects(keys.create({ tenant: 'longhaul:internal' }), /tenant must be/);
    } finally {
      await store.close();
    }
  });
});

describe('LONGHAUL_API_KEY_CACHE_MS', () => {
  it('defaults to 5 s, takes 0 to 60000 ms, and refuses anything else naming the setting given', () => {
    assert.equal(resolveConfig({}, {}).apiKeyCacheMs, 5_000);
    assert.equal(resolveConfig({}, { LONGHAUL_API_KEY_CACHE_MS: '0' }).apiKeyCacheMs, 0);
    assert.equal(resolveConfig({}, { LONGHAUL_API_KEY_CACHE_MS: '60000' }).apiKeyCacheMs, 60_000);
    assert.equal(resolveConfig({ apiKeyCacheMs: 250 }, { LONGHAUL_API_KEY_CACHE_MS: 'junk' }).apiKeyCacheMs, 250, 'the option wins');
    for (const bad of ['-1', '60001', '1.5', '5s', 'junk']) {
      assert.throws(() => resolveConfig({}, { LONGHAUL_API_KEY_CACHE_MS: bad }), /LONGHAUL_API_KEY_CACHE_MS must be an integer of ms from 0 to 60000/);
    }
    assert.throws(() => resolveConfig({ apiKeyCacheMs: 120_000 }, {}), /apiKeyCacheMs must be an integer of ms from 0 to 60000/);
  });
});
