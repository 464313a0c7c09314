/**
 * The dashboard's files over HTTP: `/` is index.html with a strict CSP and no-cache, hashed
 * assets are immutable with their content types, the API beside them is unchanged, and a
 * server whose dashboard was never built says so at `/`.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { DASHBOARD_CSP } from '../../src/server/dashboard.js';
import { demoSleep } from '../../src/example-tasks/examples.js';

describe('dashboard files over HTTP', () => {
  let dir: string;
  let lh: Longhaul;
  let base: string;
  let app: Awaited<ReturnType<typeof buildServer>>;
  let close: () => Promise<void>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-dash-'));
    // A built dashboard of our own: the test does not depend on `npm run build`.
    const web = join(dir, 'web');
    mkdirSync(join(web, 'assets'), { recursive: true });
    writeFileSync(join(web, 'index.html'), '<!doctype html><script type="module" src="/assets/app-abc123.js"></script>');
    writeFileSync(join(web, 'assets', 'app-abc123.js'), 'export {};');
    writeFileSync(join(web, 'assets', 'app-abc123.css'), 'body{}');
    lh = await Longhaul.open({ database: join(dir, 'd.db'), logger: pino({ level: 'silent' }) });
    app = await buildServer({ lh, apiKeys: parseApiKeys('t:dashboard-key-0001'), logger: false, dashboard: { dir: web } });
    base = await app.listen({ port: 0, host: '127.0.0.1' });
    close = async () => {
      await app.close();
      await lh.close({ drainMs: 0 });
    };
  });
  after(async () => {
    await close?.();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves index.html at / without a key, revalidated on every load, with the CSP', async () => {
    const res = await fetch(`${base}/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    assert.equal(res.headers.get('content-security-policy'), DASHBOARD_CSP);
    assert.match(DASHBOARD_CSP, /script-src 'self'(;|$)/);
    assert.doesNotMatch(DASHBOARD_CSP, /unsafe-inline|unsafe-eval/);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
    assert.ok(res.headers.get('etag'));
    assert.match(await res.text(), /app-abc123\.js/);
    // (fetch would add Cache-Control: no-cache to a conditional request, as the Fetch standard says.)
    const again = await app.inject({ method: 'GET', url: '/', headers: { 'if-none-match': res.headers.get('etag') ?? '' } });
    assert.equal(again.statusCode, 304);
  });

  it('serves hashed assets as immutable, with their content types', async () => {
    const js = await fetch(`${base}/assets/app-abc123.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type') ?? '', /javascript/);
    assert.equal(js.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    assert.equal(js.headers.get('content-security-policy'), DASHBOARD_CSP);
    const css = await fetch(`${base}/assets/app-abc123.css`);
    assert.match(css.headers.get('content-type') ?? '', /^text\/css/);
  });

  it('leaves the API as it was: keys still required, unknown paths are problems', async () => {
    assert.equal((await fetch(`${base}/v1/jobs`)).status, 401);
    const ok = await fetch(`${base}/v1/jobs`, { headers: { authorization: 'Bearer dashboard-key-0001' } });
    assert.equal(ok.status, 200);
    const unknownApi = await fetch(`${base}/v1/nothing-here`);
    assert.equal(unknownApi.status, 401);
    const unknown = await fetch(`${base}/assets/nope.js`);
    assert.equal(unknown.status, 404);
    assert.match(unknown.headers.get('content-type') ?? '', /application\/problem\+json/);
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
  });

  it('answers / with a problem naming the fix when the dashboard is not built', async () => {
    const empty = join(dir, 'not-built');
    mkdirSync(empty);
    const app = await buildServer({ lh, logger: false, dashboard: { dir: empty } });
    try {
      const res = await app.inject({ method: 'GET', url: '/' });
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().code, 'DASHBOARD_NOT_BUILT');
      assert.match(res.json().detail, /npm run build/);
      assert.equal(readdirSync(empty).length, 0);
    } finally {
      await app.close();
    }
  });

  it('serves no dashboard when told not to', async () => {
    const app = await buildServer({ lh, logger: false, dashboard: false });
    try {
      const res = await app.inject({ method: 'GET', url: '/' });
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().code, 'NOT_FOUND');
    } finally {
      await app.close();
    }
  });
});

describe('GET /v1/jobs/{id}/checkpoint', () => {
  let dir: string;
  let lh: Longhaul;
  let app: Awaited<ReturnType<typeof buildServer>>;
  const auth = (key: string) => ({ authorization: `Bearer ${key}` });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-ckpt-'));
    lh = await Longhaul.open({ database: join(dir, 'c.db'), tasks: [demoSleep], logger: pino({ level: 'silent' }) });
    await lh.startWorker({ concurrency: 2, pollIntervalMs: 20 });
    app = await buildServer({ lh, apiKeys: parseApiKeys('ta:checkpoint-key-a,tb:checkpoint-key-b'), logger: false, dashboard: false });
  });
  after(async () => {
    await app?.close();
    await lh?.close({ drainMs: 0 });
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers the job's last checkpoint, null before one is saved and after success, 404 for another tenant", async () => {
    const queued = await lh.submit('demo.sleep', { steps: 1 }, { tenant: 'ta', delayMs: 60_000 });
    const none = await app.inject({ method: 'GET', url: `/v1/jobs/${queued.id}/checkpoint`, headers: auth('checkpoint-key-a') });
    assert.equal(none.statusCode, 200);
    assert.deepEqual(none.json(), { checkpoint: null });
    assert.equal(none.headers['cache-control'], 'no-store');

    // A cancelled job keeps the checkpoint its attempt saved (a retry resumes from it).
    const job = await lh.submit('demo.sleep', { steps: 10_000, stepMs: 10 }, { tenant: 'ta' });
    for (const deadline = Date.now() + 30_000; ; ) {
      if ((((await lh.checkpoint(job.id))?.data as { step?: number } | undefined)?.step ?? 0) >= 2) break;
      assert.ok(Date.now() < deadline, 'demo.sleep saved no checkpoint within 30 s');
      await new Promise((r) => setTimeout(r, 20));
    }
    await lh.cancel(job.id, { tenant: 'ta' });
    assert.equal((await lh.wait(job.id)).status, 'cancelled');
    const res = await app.inject({ method: 'GET', url: `/v1/jobs/${job.id}/checkpoint`, headers: auth('checkpoint-key-a') });
    assert.equal(res.statusCode, 200);
    assert.ok(res.json().checkpoint.data.step >= 2, res.body);
    assert.equal(typeof res.json().checkpoint.version, 'number');
    assert.equal(res.json().checkpoint.corrupt, false);
    // Success clears it.
    const done = await lh.submit('demo.sleep', { steps: 2, stepMs: 1 }, { tenant: 'ta' });
    assert.equal((await lh.wait(done.id)).status, 'succeeded');
    assert.deepEqual((await app.inject({ method: 'GET', url: `/v1/jobs/${done.id}/checkpoint`, headers: auth('checkpoint-key-a') })).json(), { checkpoint: null });

    const theirs = await app.inject({ method: 'GET', url: `/v1/jobs/${job.id}/checkpoint`, headers: auth('checkpoint-key-b') });
    assert.equal(theirs.statusCode, 404);
    assert.equal(theirs.json().code, 'NOT_FOUND');
    assert.equal((await app.inject({ method: 'GET', url: `/v1/jobs/${job.id}/checkpoint` })).statusCode, 401);
    assert.equal((await app.inject({ method: 'GET', url: '/v1/jobs/no-such-job/checkpoint', headers: auth('checkpoint-key-a') })).statusCode, 400);
  });
});

describe('GET /v1/jobs?q= (the dashboard search)', () => {
  let dir: string;
  let lh: Longhaul;
  let app: Awaited<ReturnType<typeof buildServer>>;
  const get = async (url: string, key = 'search-key-aaaa-0') => app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${key}` } });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-q-'));
    lh = await Longhaul.open({ database: join(dir, 'q.db'), tasks: [demoSleep], logger: pino({ level: 'silent' }) });
    app = await buildServer({ lh, apiKeys: parseApiKeys('ta:search-key-aaaa-0,tb:search-key-bbbb-0'), logger: false, dashboard: false });
  });
  after(async () => {
    await app?.close();
    await lh?.close({ drainMs: 0 });
    rmSync(dir, { recursive: true, force: true });
  });

  it("finds the tenant's jobs by text in id or metadata, with the other filters; refuses over 200 characters", async () => {
    const mine = await lh.submit('demo.sleep', {}, { tenant: 'ta', metadata: { customer: 'Initech' }, delayMs: 60_000 });
    await lh.submit('demo.sleep', {}, { tenant: 'ta', metadata: { customer: 'Hooli' }, delayMs: 60_000 });
    await lh.submit('demo.sleep', {}, { tenant: 'tb', metadata: { customer: 'Initech' }, delayMs: 60_000 });
    const found = await get('/v1/jobs?q=initech');
    assert.equal(found.statusCode, 200);
    assert.deepEqual(
      found.json().items.map((j: { id: string }) => j.id),
      [mine.id],
    );
    assert.equal((await get('/v1/jobs?q=initech&status=queued')).json().items.length, 0);
    assert.equal((await get('/v1/jobs?q=initech&status=pending')).json().items.length, 1);
    // Part of the id's random tail: its first 13 characters are the millisecond it was made in,
    // which the other two jobs, submitted in the same millisecond, may share.
    assert.equal((await get(`/v1/jobs?q=${mine.id.slice(-12)}`)).json().items[0].id, mine.id);
    assert.equal((await get('/v1/jobs?q=nothing-like-this')).json().items.length, 0);
    const long = await get(`/v1/jobs?q=${'x'.repeat(201)}`);
    assert.equal(long.statusCode, 400);
    assert.equal(long.json().errors[0].path, 'q');
  });
});
