/**
 * `DELETE /v1/jobs` over HTTP (buildServer, app.inject): admin keys only (LONGHAUL_ADMIN_TENANTS),
 * problem+json for bad filters and for an unfiltered purge, counts in the answer.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { defineTask } from '../../src/task-api/define.js';
import { settled } from '../support/jobs.js';

const ADMIN = 'admin-key-0123456789';
const USER = 'user-key-0123456789';

describe('DELETE /v1/jobs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-purge-'));
  let lh: Longhaul;
  let app: FastifyInstance;
  const auth = (key: string) => ({ authorization: `Bearer ${key}` });

  before(async () => {
    lh = await Longhaul.open({
      database: join(dir, 'jobs.db'),
      tasks: [defineTask({ type: 't.ok', async run() {
        return 1;
      } })],
      logger: pino({ level: 'silent' }),
    });
    await lh.startWorker();
    app = await buildServer({ lh, apiKeys: parseApiKeys(`ops:${ADMIN},acme:${USER}`), adminTenants: ['ops'], logger: false });
  });
  after(async () => {
    await app.close();
    await lh.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses non-admin keys with 403', async () => {
    const res = await app.inject({ method: 'DELETE', url: '/v1/jobs?tenant=acme', headers: auth(USER) });
    assert.equal(res.statusCode, 403);
    assert.match(res.headers['content-type'] as string, /application\/problem\+json/);
  });

  it('refuses an unfiltered purge and bad filters with 400 problems', async () => {
    for (const url of ['/v1/jobs', '/v1/jobs?state=failed', '/v1/jobs?tenant=acme&state=nope', '/v1/jobs?tenant=acme&state=running', '/v1/jobs?before=yesterday']) {
      const res = await app.inject({ method: 'DELETE', url, headers: auth(ADMIN) });
      assert.equal(res.statusCode, 400, url);
      assert.match(res.headers['content-type'] as string, /application\/problem\+json/, url);
    }
  });

  it("erases a tenant's ended jobs and answers the counts", async () => {
    const a = await lh.submit('t.ok', {}, { tenant: 'acme' });
    const b = await lh.submit('t.ok', {}, { tenant: 'other' });
    await settled(lh, a.id, 10_000);
    await settled(lh, b.id, 10_000);
    const res = await app.inject({ method: 'DELETE', url: `/v1/jobs?tenant=acme&before=${new Date(Date.now() + 1000).toISOString()}`, headers: auth(ADMIN) });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { deleted: { jobs: number; files: number }; skipped: number };
    assert.equal(body.deleted.jobs, 1);
    assert.equal(body.deleted.files, 0);
    assert.equal(body.skipped, 0);
    assert.equal(await lh.get(a.id), null);
    assert.ok(await lh.get(b.id));
  });
});
