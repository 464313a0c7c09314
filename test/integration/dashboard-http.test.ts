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
    app = await buildServer({ lh, apiKeys: parseApiKeys('t:dashboard-key-1'), logger: false, dashboard: { dir: web } });
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
    const ok = await fetch(`${base}/v1/jobs`, { headers: { authorization: 'Bearer dashboard-key-1' } });
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
