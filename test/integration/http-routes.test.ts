/**
 * HTTP contract (docs/api.md): every route and every status code it lists, against the real
 * Fastify app listening on a loopback port, with an in-process Longhaul on a temp SQLite file.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runRuntime } from '../../src/cli/runtime.js';
import { JOB_STATES } from '../../src/core/states.js';
import { StreamTokens } from '../../src/server/stream-token.js';
import {
  call,
  type Harness,
  KEY_A,
  KEY_B,
  newGate,
  problemOf,
  release,
  startHarness,
  submit,
  TERMINAL,
  TOKEN_SECRET,
  untilJob,
} from '../support/http-harness.js';
import { createTestDatabase } from '../support/postgres.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('HTTP API', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ maxBodyBytes: 8 * 1024 });
  });
  after(async () => {
    await h?.close();
  });

  // ---- submit and read ------------------------------------------------------------------------

  describe('POST /v1/jobs and GET /v1/jobs/{id}', () => {
    it('answers 202 with Location, Retry-After and the snapshot; GET polls with no-store and Retry-After until terminal', async () => {
      const g = newGate();
      const res = await call(h.base, '/v1/jobs', {
        body: { type: 't.block', input: { gate: g }, priority: 'high', metadata: { who: 'test' }, maxAttempts: 2 },
      });
      assert.equal(res.status, 202);
      const job = res.json;
      assert.match(job.id, UUID);
      assert.equal(res.headers.get('location'), `/v1/jobs/${job.id}`);
      assert.equal(res.headers.get('retry-after'), '1');
      assert.ok(res.headers.get('content-type')?.startsWith('application/json'));
      assert.equal(job.type, 't.block');
      assert.ok(['queued', 'running'].includes(job.status), job.status);
      assert.equal(job.priority, 'high');
      assert.deepEqual(job.input, { gate: g });
      assert.deepEqual(job.metadata, { who: 'test' });
      assert.equal(job.maxAttempts, 2);
      assert.equal(job.cancelRequested, false);
      assert.deepEqual(job.links, { self: `/v1/jobs/${job.id}`, events: `/v1/jobs/${job.id}/events`, cancel: `/v1/jobs/${job.id}/cancel` });
      for (const f of ['createdAt', 'updatedAt', 'runAt']) assert.ok(!Number.isNaN(Date.parse(job[f])), f);

      await untilJob(h.lh, job.id, (s) => s.status === 'running', 'running');
      const running = await call(h.base, `/v1/jobs/${job.id}`);
      assert.equal(running.status, 200);
      assert.equal(running.json.status, 'running');
      assert.equal(running.headers.get('cache-control'), 'no-store');
      assert.equal(running.headers.get('retry-after'), '1');

      release(g);
      await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
      const done = await call(h.base, `/v1/jobs/${job.id}`);
      assert.equal(done.status, 200);
      assert.equal(done.json.status, 'succeeded');
      assert.equal(done.headers.get('cache-control'), 'no-store');
      assert.equal(done.headers.get('retry-after'), null, 'no Retry-After on a terminal job');
      assert.equal(done.json.progress.percent, 100);
      assert.deepEqual(done.json.result, { released: g });
      assert.equal(done.json.attempts, 1);
    });

    it('gives delayed jobs a Retry-After of the time until runAt, at most 60 s', async () => {
      const soon = await call(h.base, '/v1/jobs', { body: { type: 't.quick', delayMs: 30_000 } });
      assert.equal(soon.status, 202);
      assert.equal(soon.json.status, 'pending');
      const ra = Number(soon.headers.get('retry-after'));
      assert.ok(ra >= 29 && ra <= 30, `Retry-After ${ra}`);
      const read = await call(h.base, `/v1/jobs/${soon.json.id}`);
      assert.ok(Number(read.headers.get('retry-after')) <= 30);

      const runAt = new Date(Date.now() + 3_600_000).toISOString();
      const later = await call(h.base, '/v1/jobs', { body: { type: 't.quick', runAt } });
      assert.equal(later.status, 202);
      assert.equal(later.json.status, 'pending');
      assert.equal(later.json.runAt, runAt);
      assert.equal(later.headers.get('retry-after'), '60');
      // Tidy up: they would otherwise sit in the backlog.
      for (const id of [soon.json.id, later.json.id]) assert.equal((await call(h.base, `/v1/jobs/${id}`, { method: 'DELETE' })).status, 202);
    });

    it('gives a retrying job a Retry-After of the time until its next attempt', async () => {
      const job = await submit(h.base, 't.retrying');
      const retrying = await untilJob(h.lh, job.id, (s) => s.status === 'retrying', 'retrying');
      assert.equal(retrying.attempts, 1);
      const res = await call(h.base, `/v1/jobs/${job.id}`);
      assert.equal(res.json.status, 'retrying');
      const ra = Number(res.headers.get('retry-after'));
      assert.ok(ra >= 28 && ra <= 30, `Retry-After ${res.headers.get('retry-after')}`);
      assert.equal(res.json.error?.retryable, true);
      assert.equal((await call(h.base, `/v1/jobs/${job.id}/cancel`, { method: 'POST' })).json.status, 'cancelled');
    });

    it('accepts application/json with parameters and +json media types', async () => {
      const withCharset = await call(h.base, '/v1/jobs', { body: { type: 't.quick' }, contentType: 'application/json; charset=utf-8' });
      assert.equal(withCharset.status, 202, withCharset.text);
      const vendor = await call(h.base, '/v1/jobs', { body: { type: 't.quick' }, contentType: 'application/vnd.longhaul+json' });
      assert.equal(vendor.status, 202, vendor.text);
    });

    it('answers 404 for an unknown job, and 400 naming the parameter for an id that is not one', async () => {
      problemOf(await call(h.base, `/v1/jobs/${randomUUID()}`), 404, 'NOT_FOUND');
      for (const id of ['not-a-job', randomUUID().toUpperCase(), '%00']) {
        const p = problemOf(await call(h.base, `/v1/jobs/${id}`), 400, 'INVALID_REQUEST');
        assert.deepEqual((p.errors as Array<{ path: string }>).map((e) => e.path), ['id'], id);
        assert.match(String(p.detail), /UUID/);
      }
    });

    it('answers 410 Gone for an expired job', async () => {
      const job = await submit(h.base, 't.expiring');
      await untilJob(h.lh, job.id, (s) => s.status === 'expired', 'expired by the sweeper');
      const res = await call(h.base, `/v1/jobs/${job.id}`);
      const p = problemOf(res, 410, 'EXPIRED');
      assert.match(String(p.detail), new RegExp(job.id));
      assert.equal(res.headers.get('retry-after'), null);
    });
  });

  // ---- idempotency -----------------------------------------------------------------------------

  describe('Idempotency-Key', () => {
    it('replays the same key and body with 200 and Idempotent-Replayed, whatever the key order', async () => {
      const key = `idem-${randomUUID()}`;
      const first = await call(h.base, '/v1/jobs', {
        raw: '{"type":"t.quick","input":{"a":1,"b":[1,2]},"priority":"low"}',
        headers: { 'idempotency-key': key },
      });
      assert.equal(first.status, 202);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      const again = await call(h.base, '/v1/jobs', {
        raw: '{"priority":"low","input":{"b":[1,2],"a":1},"type":"t.quick"}',
        headers: { 'idempotency-key': key },
      });
      assert.equal(again.status, 200, again.text);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal(again.json.id, first.json.id);
      assert.equal(again.headers.get('location'), `/v1/jobs/${first.json.id}`);
    });

    it('refuses the same key with a different body with 422', async () => {
      const key = `idem-${randomUUID()}`;
      assert.equal((await call(h.base, '/v1/jobs', { body: { type: 't.quick', input: { n: 1 } }, headers: { 'idempotency-key': key } })).status, 202);
      const p = problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', input: { n: 2 } }, headers: { 'idempotency-key': key } }), 422);
      assert.equal(p.code, 'IDEMPOTENCY_CONFLICT');
      problemOf(
        await call(h.base, '/v1/jobs', { body: { type: 't.quick', input: { n: 1 }, priority: 'high' }, headers: { 'idempotency-key': key } }),
        422,
        'IDEMPOTENCY_CONFLICT',
      );
    });

    it('takes keys of up to 255 characters and refuses longer (and empty) ones with 400', async () => {
      const ok = `k${randomUUID()}`.padEnd(255, 'x');
      assert.equal((await call(h.base, '/v1/jobs', { body: { type: 't.quick' }, headers: { 'idempotency-key': ok } })).status, 202);
      problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick' }, headers: { 'idempotency-key': `${ok}y` } }), 400, 'INVALID_IDEMPOTENCY_KEY');
      problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick' }, headers: { 'idempotency-key': '' } }), 400, 'INVALID_IDEMPOTENCY_KEY');
    });

    it('scopes keys per tenant', async () => {
      const key = `shared-${randomUUID()}`;
      const a = await call(h.base, '/v1/jobs', { key: KEY_A, body: { type: 't.quick' }, headers: { 'idempotency-key': key } });
      const b = await call(h.base, '/v1/jobs', { key: KEY_B, body: { type: 't.quick' }, headers: { 'idempotency-key': key } });
      assert.equal(a.status, 202);
      assert.equal(b.status, 202, 'tenant B is not replayed tenant A’s job');
      assert.notEqual(a.json.id, b.json.id);
      // A different body under the same key is still fine for the other tenant.
      const b2 = await call(h.base, '/v1/jobs', { key: KEY_B, body: { type: 't.quick' }, headers: { 'idempotency-key': key } });
      assert.equal(b2.status, 200);
      assert.equal(b2.json.id, b.json.id);
    });
  });

  it('input and metadata nested 64 levels are accepted over HTTP, as by the library', async () => {
    const res = await call(h.base, '/v1/jobs', {
      raw: `{"type":"t.quick","input":${'['.repeat(64)}${']'.repeat(64)},"metadata":{"a":${'['.repeat(63)}${']'.repeat(63)}}}`,
    });
    assert.equal(res.status, 202, res.text);
  });

  // ---- errors ------------------------------------------------------------------------------------

  describe('problem+json errors on submit', () => {
    const cases: { name: string; raw?: string; body?: unknown; contentType?: string; status: number; code: string; field?: string }[] = [
      { name: 'malformed JSON', raw: '{"type": "t.quick",', status: 400, code: 'MALFORMED_JSON' },
      // An array of jobs is a batch (test/integration/workflow-api.test.ts): an array of anything else is refused.
      { name: 'an array of non-jobs', raw: '[1]', status: 400, code: 'INVALID_REQUEST', field: 'jobs[0]' },
      { name: 'a null body', raw: 'null', status: 400, code: 'INVALID_REQUEST' },
      { name: 'a string body', raw: '"t.quick"', status: 400, code: 'INVALID_REQUEST' },
      { name: 'an empty body', raw: '', status: 400, code: 'INVALID_REQUEST' },
      { name: 'a missing type', body: { input: {} }, status: 400, code: 'INVALID_REQUEST', field: 'type' },
      { name: 'a non-string type', body: { type: 42 }, status: 400, code: 'INVALID_REQUEST', field: 'type' },
      { name: 'an empty type', body: { type: '' }, status: 400, code: 'INVALID_REQUEST', field: 'type' },
      { name: 'a bad priority', body: { type: 't.quick', priority: 'urgent' }, status: 400, code: 'INVALID_REQUEST', field: 'priority' },
      { name: 'a negative delayMs', body: { type: 't.quick', delayMs: -1 }, status: 400, code: 'INVALID_REQUEST', field: 'delayMs' },
      { name: 'a fractional delayMs', body: { type: 't.quick', delayMs: 1.5 }, status: 400, code: 'INVALID_REQUEST', field: 'delayMs' },
      { name: 'a delayMs beyond any date', body: { type: 't.quick', delayMs: 9e15 }, status: 400, code: 'INVALID_REQUEST', field: 'delayMs' },
      { name: 'a string delayMs', body: { type: 't.quick', delayMs: '100' }, status: 400, code: 'INVALID_REQUEST', field: 'delayMs' },
      { name: 'runAt and delayMs together', body: { type: 't.quick', runAt: new Date().toISOString(), delayMs: 10 }, status: 400, code: 'INVALID_REQUEST' },
      { name: 'a runAt that is not a date', body: { type: 't.quick', runAt: 'tomorrow' }, status: 400, code: 'INVALID_REQUEST', field: 'runAt' },
      { name: 'maxAttempts 0', body: { type: 't.quick', maxAttempts: 0 }, status: 400, code: 'INVALID_REQUEST', field: 'maxAttempts' },
      { name: 'timeoutMs 0', body: { type: 't.quick', timeoutMs: 0 }, status: 400, code: 'INVALID_REQUEST', field: 'timeoutMs' },
      { name: 'a timeoutMs over 100 years', body: { type: 't.quick', timeoutMs: 4e12 }, status: 400, code: 'INVALID_REQUEST', field: 'timeoutMs' },
      { name: 'a runAt 200 years away', body: { type: 't.quick', runAt: '2226-01-01T00:00:00Z' }, status: 400, code: 'INVALID_REQUEST', field: 'runAt' },
      { name: 'a runAt in year 1', body: { type: 't.quick', runAt: '0001-01-01T00:00:00Z' }, status: 400, code: 'INVALID_REQUEST', field: 'runAt' },
      { name: 'non-object metadata', body: { type: 't.quick', metadata: [1] }, status: 400, code: 'INVALID_REQUEST', field: 'metadata' },
      { name: 'an unknown field', body: { type: 't.quick', webhooks: { url: 'x' } }, status: 400, code: 'INVALID_REQUEST' },
      { name: 'a __proto__ field', raw: '{"type":"t.quick","__proto__":{"polluted":true}}', status: 400, code: 'INVALID_REQUEST' },
      { name: 'absurdly deep nesting', raw: `{"type":"t.quick","metadata":${'{"a":'.repeat(1000)}1${'}'.repeat(1000)}}`, status: 400, code: 'INVALID_REQUEST' },
      { name: 'input nested 65 levels', raw: `{"type":"t.quick","input":${'['.repeat(65)}${']'.repeat(65)}}`, status: 400, code: 'INVALID_REQUEST', field: 'input' },
      { name: 'metadata nested 300 levels', raw: `{"type":"t.quick","metadata":{"a":${'['.repeat(299)}${']'.repeat(299)}}}`, status: 400, code: 'INVALID_REQUEST', field: 'metadata' },
      { name: 'text/plain', raw: '{"type":"t.quick"}', contentType: 'text/plain', status: 415, code: 'UNSUPPORTED_MEDIA_TYPE' },
      { name: 'form encoding', raw: 'type=t.quick', contentType: 'application/x-www-form-urlencoded', status: 415, code: 'UNSUPPORTED_MEDIA_TYPE' },
      { name: 'an unknown type', body: { type: 'no.such.task' }, status: 422, code: 'UNKNOWN_TASK' },
    ];
    for (const c of cases) {
      it(`${c.status} for ${c.name}`, async () => {
        const res = await call(h.base, '/v1/jobs', {
          ...(c.raw !== undefined ? { raw: c.raw } : { body: c.body }),
          ...(c.contentType ? { contentType: c.contentType } : {}),
        });
        const p = problemOf(res, c.status, c.code);
        if (c.field) {
          assert.ok(Array.isArray(p.errors), `errors list in ${res.text}`);
          assert.ok(
            (p.errors as { path: string }[]).some((e) => e.path === c.field),
            `errors name ${c.field}: ${JSON.stringify(p.errors)}`,
          );
        }
      });
    }

    it('names an unknown field in the errors list', async () => {
      const p = problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', colour: 'red' } }), 400, 'INVALID_REQUEST');
      assert.ok(
        (p.errors as { message: string }[]).some((e) => /colour/.test(e.message)),
        JSON.stringify(p.errors),
      );
    });

    it('422 with field errors for input that fails the task schema', async () => {
      const p = problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.schema', input: { n: 0, label: 'far too long' } } }), 422, 'INVALID_INPUT');
      const errors = p.errors as { path: string; message: string }[];
      assert.ok(Array.isArray(errors) && errors.length >= 1, JSON.stringify(p));
      for (const e of errors) {
        assert.equal(typeof e.path, 'string');
        assert.equal(typeof e.message, 'string');
      }
      assert.ok(
        errors.some((e) => e.path === 'n'),
        JSON.stringify(errors),
      );
      problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.schema' } }), 422, 'INVALID_INPUT');
      assert.equal((await call(h.base, '/v1/jobs', { body: { type: 't.schema', input: { n: 3 } } })).status, 202);
    });

    it('413 for a body over maxBodyBytes (and 202 just under it)', async () => {
      problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', input: 'x'.repeat(9 * 1024) } }), 413);
      assert.equal((await call(h.base, '/v1/jobs', { body: { type: 't.quick', input: 'x'.repeat(7 * 1024) } })).status, 202);
    });

    it('answers problems for unknown routes and malformed URLs', async () => {
      problemOf(await call(h.base, '/v1/nope'), 404, 'NOT_FOUND');
      problemOf(await call(h.base, '/v1/jobs/%E0%A4%A'), 400);
      problemOf(await call(h.base, `/v1/jobs/${'x'.repeat(80)}`), 400, 'INVALID_REQUEST');
      problemOf(await call(h.base, `/v1/jobs/${'x'.repeat(200)}`), 414, 'URI_TOO_LONG');
    });
  });

  describe('queue limit', () => {
    let small: Harness;
    before(async () => {
      small = await startHarness({ worker: false, maxQueued: 2 });
    });
    after(async () => {
      await small?.close();
    });

    it('503 with Retry-After once LONGHAUL_MAX_QUEUED jobs wait, and accepts again when room frees up', async () => {
      const a = await submit(small.base, 't.quick');
      await submit(small.base, 't.quick', undefined, { delayMs: 60_000 });
      const full = await call(small.base, '/v1/jobs', { body: { type: 't.quick' } });
      problemOf(full, 503, 'QUEUE_FULL');
      const ra = Number(full.headers.get('retry-after'));
      assert.ok(Number.isInteger(ra) && ra >= 1, `Retry-After ${full.headers.get('retry-after')}`);
      assert.equal((await call(small.base, `/v1/jobs/${a.id}/cancel`, { method: 'POST' })).status, 202);
      assert.equal((await call(small.base, '/v1/jobs', { body: { type: 't.quick' } })).status, 202);
    });
  });

  describe('robustness', () => {
    /** Percent-encoding that also takes lone surrogates (as the bytes of their WTF-8 form: not UTF-8, as a careless client would send). */
    const uriEncode = (text: string) =>
      text
        .split(/([\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff])/)
        .map((part, i) => {
          if (i % 2 === 0) return encodeURIComponent(part);
          const c = part.charCodeAt(0);
          return [0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
        })
        .join('');

    const neverAnswers500 = async (h: Harness) => {
      let seed = 0x5eed;
      const rnd = () => {
        seed = (seed + 0x6d2b79f5) | 0;
        let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
      };
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
      const garbage = (max: number) => {
        // With U+0000 and lone surrogates, which PostgreSQL cannot store (docs/api.md: 422 UNSTORABLE_STRING).
        const chars = 'abcXYZ019 -_.~!*\'();:@&=+$,/?%#[]{}"\\<>|^`\u00e9\u4e2d\u{1f600}\ud800\u0000\udfff';
        return Array.from({ length: Math.floor(rnd() * max) }, () => pick([...chars])).join('');
      };
      const value = (depth: number): unknown => {
        const k = Math.floor(rnd() * (depth > 3 ? 5 : 8));
        switch (k) {
          case 0:
            return null;
          case 1:
            return rnd() < 0.5;
          case 2:
            return pick([0, -1, 1.5, 1e308, 9e15, -0, 2 ** 53 + 1, 1000, 1001, 3_000_000_000]);
          case 3:
            return garbage(20);
          case 4:
            return pick(['t.quick', 't.schema', 'critical', 'low', new Date().toISOString(), '']);
          case 5:
            return Array.from({ length: Math.floor(rnd() * 4) }, () => value(depth + 1));
          default:
            return Object.fromEntries(
              Array.from({ length: Math.floor(rnd() * 4) }, () => [
                pick(['type', 'input', 'priority', 'runAt', 'delayMs', 'maxAttempts', 'timeoutMs', 'metadata', 'jobs', 'all', 'ttlSeconds', garbage(8)]),
                value(depth + 1),
              ]),
            );
        }
      };
      const existing = (await submit(h.base, 't.quick')).id;
      const paths = [
        '/v1/jobs',
        `/v1/jobs/${existing}`,
        `/v1/jobs/${randomUUID()}`,
        `/v1/jobs/${existing}/cancel`,
        `/v1/jobs/${existing}/retry`,
        `/v1/jobs/${existing}/transitions`,
        `/v1/jobs/${existing}/events`,
        '/v1/stream-tokens',
        '/v1/stats',
        '/v1/events',
        '/healthz',
        '/readyz',
        '/openapi.json',
      ];
      const queryKeys = ['status', 'type', 'limit', 'cursor', 'token'];
      const contentTypes = [
        'application/json',
        'application/json; charset=utf-8',
        'application/problem+json',
        'text/plain',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=x',
        garbage(12),
        null,
      ];
      const auths = [`Bearer ${KEY_A}`, `Bearer ${KEY_B}`, 'Bearer ', 'Bearer wrong-key-123', `Basic ${KEY_A}`, garbage(30), null];
      const methods = ['GET', 'POST', 'POST', 'POST', 'DELETE', 'PUT', 'PATCH', 'HEAD', 'OPTIONS'];
      const failures: string[] = [];
      const one = async (i: number) => {
        const method = pick(methods);
        let path = rnd() < 0.75 ? pick(paths) : `/v1/jobs/${uriEncode(garbage(40))}${rnd() < 0.3 ? `/${uriEncode(garbage(10))}` : ''}`;
        if (rnd() < 0.4) path += `?${pick(queryKeys)}=${uriEncode(garbage(30))}`;
        const headers: Record<string, string> = {};
        const auth = pick(auths);
        if (auth !== null) headers.authorization = auth.replace(/[^\x20-\x7e]/g, '');
        if (rnd() < 0.3) headers['idempotency-key'] = 'k'.repeat(Math.floor(rnd() * 300));
        if (rnd() < 0.2) headers['last-event-id'] = pick(['0', '-1', 'abc', '99999999999999999999', garbage(10).replace(/[^\x20-\x7e]/g, '')]);
        let body: string | undefined;
        if (['POST', 'PUT', 'PATCH', 'DELETE'].includes(method) && rnd() < 0.9) {
          body =
            rnd() < 0.25 ? garbage(200) : JSON.stringify(rnd() < 0.5 ? { type: pick(['t.quick', 't.schema', garbage(5)]), ...(value(0) as object) } : value(0));
          const ct = pick(contentTypes);
          if (ct !== null) headers['content-type'] = ct.replace(/[^\x20-\x7e]/g, '');
        }
        const ctl = new AbortController();
        const timer = setTimeout(() => ctl.abort(), 5_000);
        try {
          const res = await fetch(`${h.base}${path}`, { method, headers, ...(body === undefined ? {} : { body }), signal: ctl.signal });
          const ct = res.headers.get('content-type') ?? '';
          if (ct.startsWith('text/event-stream')) await res.body?.cancel();
          else await res.arrayBuffer();
          if (res.status >= 500) failures.push(`#${i} ${method} ${path} ${JSON.stringify(headers)} ${body?.slice(0, 200)} → ${res.status}`);
          else if (res.status >= 400 && method !== 'HEAD' && !ct.startsWith('application/problem+json')) {
            failures.push(`#${i} ${method} ${path} → ${res.status} with ${ct}`);
          }
        } finally {
          clearTimeout(timer);
        }
      };
      for (let i = 0; i < 200; i += 20) await Promise.all(Array.from({ length: 20 }, (_, j) => one(i + j)));

      // Every option with every odd value, well-formed otherwise: the likeliest way to reach the store.
      const odd = [9e15, 1e308, -1e308, 2 ** 31, 2 ** 53 + 1, -1, 0, 1.5, '1', '', null, true, [], {}, '9999-12-31T23:59:59Z', '0000-01-01T00:00:00Z'];
      odd.push('\u0000', 'a\ud800', ['\udc00'], { 'k\u0000': '\ud800' }, { k: 'v\u0000' });
      for (const option of ['delayMs', 'timeoutMs', 'maxAttempts', 'runAt', 'priority', 'metadata', 'input']) {
        await Promise.all(
          odd.map(async (v) => {
            const res = await call(h.base, '/v1/jobs', { body: { type: 't.quick', [option]: v } });
            if (res.status >= 500) failures.push(`${option}: ${JSON.stringify(v)} → ${res.status}`);
            else if (res.status === 202) await call(h.base, `/v1/jobs/${res.json.id}`, { method: 'DELETE' });
          }),
        );
      }

      // Bytes that are not HTTP at all: the server drops them without harm.
      for (const junk of [
        'GARBAGE\r\n\r\n',
        'GET /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
        'POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: nope\r\n\r\n',
      ]) {
        await new Promise<void>((resolve) => {
          const url = new URL(h.base);
          const sock = connect(Number(url.port), url.hostname, () => sock.end(junk));
          sock.on('data', () => undefined);
          sock.on('close', () => resolve());
          sock.on('error', () => resolve());
          sock.setTimeout(3_000, () => sock.destroy());
        });
      }
      assert.deepEqual(failures, []);
      assert.equal((await call(h.base, '/healthz')).status, 200);
      // Nothing it accepted made a job unreadable.
      for (const key of [KEY_A, KEY_B]) assert.equal((await call(h.base, '/v1/jobs?limit=1000', { key })).status, 200);
      assert.equal((await call(h.base, '/v1/jobs', { body: { type: 't.quick' } })).status, 202);
      // Strings no store can hold are refused with their path, never a 500 (and the same on PostgreSQL).
      const nul = await call(h.base, '/v1/jobs', { raw: '{"type":"t.quick","input":{"s":"nul\\u0000byte"},"metadata":{"k\\ud800":1}}' });
      assert.deepEqual(
        (problemOf(nul, 422, 'UNSTORABLE_STRING').errors as { path: string }[]).map((e) => e.path),
        ['metadata["k\\ud800"]'],
      );
      assert.equal((await call(h.base, '/readyz')).status, 200);
    };

    it('never answers 500 to ~200 random bodies, headers and paths (U+0000 and lone surrogates too), and keeps answering', () => neverAnswers500(h));

    it('the same on PostgreSQL', async () => {
      const db = await createTestDatabase('lh_http_fuzz');
      const pgHarness = await startHarness({ maxBodyBytes: 8 * 1024, database: db.url });
      try {
        await neverAnswers500(pgHarness);
      } finally {
        await pgHarness.close();
        await db.drop();
      }
    });
  });

  // ---- list --------------------------------------------------------------------------------------

  describe('GET /v1/jobs', () => {
    let idle: Harness;
    const ids = { queued: [] as string[], pending: [] as string[], schema: '', cancelled: '' };
    before(async () => {
      idle = await startHarness({ worker: false });
      for (let i = 0; i < 5; i++) ids.queued.push((await submit(idle.base, 't.quick', { i })).id);
      for (let i = 0; i < 2; i++) ids.pending.push((await submit(idle.base, 't.quick', { i }, { delayMs: 60_000 })).id);
      ids.schema = (await submit(idle.base, 't.schema', { n: 2 })).id;
      ids.cancelled = (await submit(idle.base, 't.quick')).id;
      assert.equal((await call(idle.base, `/v1/jobs/${ids.cancelled}/cancel`, { method: 'POST' })).status, 202);
      await submit(idle.base, 't.quick', undefined, {}, KEY_B); // another tenant's job, never listed for A
    });
    after(async () => {
      await idle?.close();
    });

    const listIds = async (query: string, key = KEY_A) => {
      const res = await call(idle.base, `/v1/jobs${query}`, { key });
      assert.equal(res.status, 200, res.text);
      assert.ok(Array.isArray(res.json.items));
      assert.ok('nextCursor' in res.json);
      return res.json.items.map((j: { id: string }) => j.id) as string[];
    };

    it('lists the tenant’s jobs newest first', async () => {
      const res = await call(idle.base, '/v1/jobs');
      assert.equal(res.status, 200);
      const items = res.json.items as { id: string; createdAt: string }[];
      assert.equal(items.length, 9);
      assert.equal(res.json.nextCursor, null);
      for (let i = 1; i < items.length; i++) assert.ok((items[i - 1] as { id: string }).id > (items[i] as { id: string }).id, 'newest first');
      assert.equal(items[0]?.id, ids.cancelled);
    });

    it('filters by status, comma-separated statuses and type', async () => {
      assert.deepEqual(new Set(await listIds('?status=queued')), new Set([...ids.queued, ids.schema]));
      assert.deepEqual(new Set(await listIds('?status=pending')), new Set(ids.pending));
      assert.deepEqual(new Set(await listIds('?status=pending,cancelled')), new Set([...ids.pending, ids.cancelled]));
      assert.deepEqual(await listIds('?status=cancelled'), [ids.cancelled]);
      assert.deepEqual(await listIds('?type=t.schema'), [ids.schema]);
      assert.deepEqual(await listIds('?type=t.quick&status=pending'), [...ids.pending].reverse());
      assert.deepEqual(await listIds('?type=no.such'), []);
    });

    it('pages with limit and cursor, without gaps or repeats', async () => {
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const res = await call(idle.base, `/v1/jobs?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
        assert.equal(res.status, 200);
        assert.ok(res.json.items.length <= 2);
        seen.push(...res.json.items.map((j: { id: string }) => j.id));
        cursor = res.json.nextCursor;
        pages++;
      } while (cursor && pages < 20);
      assert.equal(pages, 5);
      assert.equal(seen.length, 9);
      assert.equal(new Set(seen).size, 9);
      assert.deepEqual(seen, await listIds('?limit=1000'));
    });

    it('400 INVALID_REQUEST naming the parameter for a bad status, limit or cursor', async () => {
      for (const [q, field] of [
        ['?status=bogus', 'status'],
        ['?status=queued,bogus', 'status'],
        ['?limit=0', 'limit'],
        ['?limit=1001', 'limit'],
        ['?limit=abc', 'limit'],
        ['?limit=1.5', 'limit'],
        ['?limit=-1', 'limit'],
        ['?cursor=zzzz', 'cursor'],
        ['?cursor=garbage', 'cursor'],
        [`?cursor=${Buffer.from('not a uuid').toString('base64url')}`, 'cursor'],
      ] as const) {
        // One kind of mistake, one code, whichever layer (route, schema, library) finds it.
        const p = problemOf(await call(idle.base, `/v1/jobs${q}`), 400, 'INVALID_REQUEST');
        assert.deepEqual(
          (p.errors as { path: string }[]).map((e) => e.path),
          [field],
          `${q}: ${JSON.stringify(p)}`,
        );
      }
    });

    it('cancels queued jobs at once (POST /cancel and DELETE), and 409 when already terminal', async () => {
      const a = await submit(idle.base, 't.quick');
      const byPost = await call(idle.base, `/v1/jobs/${a.id}/cancel`, { method: 'POST' });
      assert.equal(byPost.status, 202);
      assert.equal(byPost.json.status, 'cancelled');
      const b = await submit(idle.base, 't.quick', undefined, { delayMs: 60_000 });
      const byDelete = await call(idle.base, `/v1/jobs/${b.id}`, { method: 'DELETE' });
      assert.equal(byDelete.status, 202);
      assert.equal(byDelete.json.status, 'cancelled');
      problemOf(await call(idle.base, `/v1/jobs/${a.id}/cancel`, { method: 'POST' }), 409, 'STATE_CONFLICT');
      problemOf(await call(idle.base, `/v1/jobs/${b.id}`, { method: 'DELETE' }), 409, 'STATE_CONFLICT');
    });
  });

  // ---- cancel, retry, transitions ----------------------------------------------------------------

  describe('cancel, retry, transitions', () => {
    it('cancels a running job: 202 with cancelRequested, then the job ends cancelled; then 409', async () => {
      for (const method of ['POST', 'DELETE'] as const) {
        const job = await submit(h.base, 't.block', { gate: newGate() });
        await untilJob(h.lh, job.id, (s) => s.status === 'running', 'running');
        const res = await call(h.base, method === 'POST' ? `/v1/jobs/${job.id}/cancel` : `/v1/jobs/${job.id}`, { method });
        assert.equal(res.status, 202, res.text);
        assert.ok(res.json.status === 'running' || res.json.status === 'cancelled', res.json.status);
        if (res.json.status === 'running') assert.equal(res.json.cancelRequested, true);
        const done = await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
        assert.equal(done.status, 'cancelled');
        problemOf(await call(h.base, `/v1/jobs/${job.id}/cancel`, { method: 'POST' }), 409, 'STATE_CONFLICT');
      }
    });

    it('404 when cancelling or retrying an unknown job', async () => {
      const id = randomUUID();
      problemOf(await call(h.base, `/v1/jobs/${id}/cancel`, { method: 'POST' }), 404);
      problemOf(await call(h.base, `/v1/jobs/${id}`, { method: 'DELETE' }), 404);
      problemOf(await call(h.base, `/v1/jobs/${id}/retry`, { method: 'POST' }), 404);
      problemOf(await call(h.base, `/v1/jobs/${id}/transitions`), 404);
    });

    it('retries a failed job (202 queued, fresh budget) and it runs; a succeeded job is 409', async () => {
      const job = await submit(h.base, 't.flaky', { key: randomUUID() });
      const failed = await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error?.code, 'FIRST_RUN');
      const res = await call(h.base, `/v1/jobs/${job.id}/retry`, { method: 'POST' });
      assert.equal(res.status, 202, res.text);
      assert.equal(res.json.status, 'queued');
      assert.equal(res.json.error, null);
      assert.equal(res.json.attempts, 0, 'a fresh attempt budget');
      assert.equal(res.headers.get('retry-after'), '1');
      const done = await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal after retry');
      assert.equal(done.status, 'succeeded');
      problemOf(await call(h.base, `/v1/jobs/${job.id}/retry`, { method: 'POST' }), 409, 'STATE_CONFLICT');

      const tr = await call(h.base, `/v1/jobs/${job.id}/transitions`);
      assert.equal(tr.status, 200);
      const items = tr.json.items as { from: string | null; to: string; at: string; reason: string; attempt: number; workerId: string | null }[];
      assert.deepEqual(
        items.map((t) => `${t.from}->${t.to}`),
        ['null->queued', 'queued->running', 'running->failed', 'failed->queued', 'queued->running', 'running->succeeded'],
      );
      for (const t of items) {
        assert.ok(!Number.isNaN(Date.parse(t.at)));
        assert.equal(typeof t.reason, 'string');
        assert.equal(typeof t.attempt, 'number');
        assert.ok(t.workerId === null || typeof t.workerId === 'string');
      }
      assert.equal(items.find((t) => t.to === 'running')?.workerId, h.worker?.id);
      assert.match(items[3]?.reason ?? '', /retry/);
    });

    it('retries a cancelled job; 409 for a queued or running one', async () => {
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g });
      await untilJob(h.lh, job.id, (s) => s.status === 'running', 'running');
      problemOf(await call(h.base, `/v1/jobs/${job.id}/retry`, { method: 'POST' }), 409, 'STATE_CONFLICT');
      await call(h.base, `/v1/jobs/${job.id}/cancel`, { method: 'POST' });
      await untilJob(h.lh, job.id, (s) => s.status === 'cancelled', 'cancelled');
      release(g);
      const res = await call(h.base, `/v1/jobs/${job.id}/retry`, { method: 'POST' });
      assert.equal(res.status, 202);
      assert.equal(res.json.cancelRequested, false);
      assert.equal((await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal')).status, 'succeeded');
    });
  });

  // ---- auth ----------------------------------------------------------------------------------------

  describe('authentication and tenants', () => {
    it('401 without a key, with a wrong key or a non-Bearer scheme', async () => {
      for (const key of [null, 'wrong-key-000', '']) {
        const res = await call(h.base, '/v1/jobs', { key });
        problemOf(res, 401, 'UNAUTHORIZED');
      }
      problemOf(await call(h.base, '/v1/jobs', { key: null, headers: { authorization: `Basic ${KEY_A}` } }), 401, 'UNAUTHORIZED');
      problemOf(await call(h.base, '/v1/jobs', { key: null, body: { type: 't.quick' } }), 401, 'UNAUTHORIZED');
      problemOf(await call(h.base, '/v1/stats', { key: null }), 401, 'UNAUTHORIZED');
      // Non-/v1 routes are public.
      assert.equal((await call(h.base, '/healthz', { key: null })).status, 200);
    });

    it('cannot be bypassed with percent-encoded paths', async () => {
      const lib = await h.lh.submit('t.quick', null); // tenant "default": what an unauthenticated request would see
      for (const path of ['/%761/jobs', '/v%31/jobs', '/%76%31/stats', `/%761/jobs/${lib.id}`, '/v1/%6aobs', `/v%31/jobs/${lib.id}/transitions`]) {
        problemOf(await call(h.base, path, { key: null }), 401, 'UNAUTHORIZED');
      }
      problemOf(await call(h.base, '/%761/jobs', { key: null, body: { type: 't.quick' } }), 401, 'UNAUTHORIZED');
      const asA = await call(h.base, '/%761/jobs?limit=1000', { key: KEY_A });
      assert.equal(asA.status, 200);
      assert.ok(!asA.json.items.some((j: { id: string }) => j.id === lib.id));
    });

    it('hides one tenant’s jobs from another (404, never 403; not listed)', async () => {
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g }, {}, KEY_A);
      await untilJob(h.lh, job.id, (s) => s.status === 'running', 'running');
      const asB = (path: string, method = 'GET') => call(h.base, path, { key: KEY_B, method });
      problemOf(await asB(`/v1/jobs/${job.id}`), 404);
      problemOf(await asB(`/v1/jobs/${job.id}/cancel`, 'POST'), 404);
      problemOf(await asB(`/v1/jobs/${job.id}`, 'DELETE'), 404);
      problemOf(await asB(`/v1/jobs/${job.id}/retry`, 'POST'), 404);
      problemOf(await asB(`/v1/jobs/${job.id}/transitions`), 404);
      problemOf(await asB(`/v1/jobs/${job.id}/events`), 404);
      problemOf(await call(h.base, '/v1/stream-tokens', { key: KEY_B, body: { jobs: [job.id] } }), 404);
      const listB = await call(h.base, '/v1/jobs?limit=1000', { key: KEY_B });
      assert.equal(listB.status, 200);
      assert.ok(!listB.json.items.some((j: { id: string }) => j.id === job.id));
      const listA = await call(h.base, '/v1/jobs?limit=1000&status=running', { key: KEY_A });
      assert.ok(listA.json.items.some((j: { id: string }) => j.id === job.id));
      // B's attempts changed nothing.
      assert.equal((await h.lh.get(job.id))?.cancelRequested, false);
      release(g);
      await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
    });

    it('counts stats per tenant', async () => {
      const before = (await call(h.base, '/v1/stats', { key: KEY_B })).json.counts.pending as number;
      const j = await submit(h.base, 't.quick', undefined, { delayMs: 60_000 }, KEY_B);
      assert.equal((await call(h.base, '/v1/stats', { key: KEY_B })).json.counts.pending, before + 1);
      const a = (await call(h.base, '/v1/stats', { key: KEY_A })).json.counts.pending as number;
      await call(h.base, `/v1/jobs/${j.id}`, { key: KEY_B, method: 'DELETE' });
      assert.equal((await call(h.base, '/v1/stats', { key: KEY_A })).json.counts.pending, a);
    });

    describe('without keys', () => {
      let open: Harness;
      before(async () => {
        open = await startHarness({ apiKeys: null });
      });
      after(async () => {
        await open?.close();
      });
      it('serves everything as tenant "default"', async () => {
        const res = await call(open.base, '/v1/jobs', { key: null, body: { type: 't.quick', input: { x: 1 } } });
        assert.equal(res.status, 202);
        const done = await untilJob(open.lh, res.json.id, (s) => TERMINAL.has(s.status), 'terminal');
        assert.equal(done.status, 'succeeded');
        assert.ok(await open.lh.get(res.json.id, { tenant: 'default' }), 'stored under tenant "default"');
        assert.equal((await call(open.base, `/v1/jobs/${res.json.id}`, { key: null })).json.status, 'succeeded');
        // A stray Authorization header is ignored rather than refused.
        assert.equal((await call(open.base, `/v1/jobs/${res.json.id}`, { key: 'whatever' })).status, 200);
        const list = await call(open.base, '/v1/jobs', { key: null });
        assert.deepEqual(
          list.json.items.map((j: { id: string }) => j.id),
          [res.json.id],
        );
        assert.equal((await call(open.base, `/v1/jobs/${res.json.id}/transitions`, { key: null })).status, 200);
        assert.equal((await call(open.base, '/v1/stats', { key: null })).json.counts.succeeded, 1);
        const tok = await call(open.base, '/v1/stream-tokens', { key: null, body: { all: true } });
        assert.equal(tok.status, 201);
        const lib = await open.lh.submit('t.quick', null);
        assert.equal((await call(open.base, `/v1/jobs/${lib.id}`, { key: null })).status, 200, 'library submissions default to the same tenant');
      });
      it('reads a ?token= on streams only: elsewhere it is ignored, as every request is the default tenant’s', async () => {
        const job = await open.lh.submit('t.quick', null);
        assert.equal((await call(open.base, `/v1/jobs/${job.id}?token=forged.token`, { key: null })).status, 200);
        assert.equal((await call(open.base, '/v1/jobs?token=forged.token', { key: null, body: { type: 't.quick' } })).status, 202);
        problemOf(await call(open.base, `/v1/jobs/${job.id}/events?token=forged.token`, { key: null }), 401, 'INVALID_TOKEN');
        problemOf(await call(open.base, '/v1/no-such-route', { key: null }), 404, 'NOT_FOUND');
      });
    });
  });

  describe('stream tokens', () => {
    it('mints tokens (201) and refuses bad requests (400)', async () => {
      const job = await submit(h.base, 't.quick');
      const res = await call(h.base, '/v1/stream-tokens', { body: { jobs: [job.id] } });
      assert.equal(res.status, 201);
      assert.equal(typeof res.json.token, 'string');
      const ttl = Date.parse(res.json.expiresAt) - Date.now();
      assert.ok(ttl > 295_000 && ttl <= 300_000, `default ttl ${ttl}`);
      const short = await call(h.base, '/v1/stream-tokens', { body: { all: true, ttlSeconds: 60 } });
      assert.equal(short.status, 201);
      assert.ok(Date.parse(short.json.expiresAt) - Date.now() <= 60_000);
      for (const body of [
        {},
        { jobs: [] },
        { all: true, ttlSeconds: 0 },
        { all: true, ttlSeconds: 3601 },
        { all: 'yes' },
        { jobs: 'x' },
        { all: true, extra: 1 },
        [],
        'x',
      ]) {
        problemOf(await call(h.base, '/v1/stream-tokens', { body }), 400);
      }
      problemOf(await call(h.base, '/v1/stream-tokens', { method: 'POST' }), 400);
      problemOf(await call(h.base, '/v1/stream-tokens', { key: null, body: { all: true } }), 401);
      problemOf(await call(h.base, '/v1/stream-tokens', { body: { jobs: [randomUUID()] } }), 404);
    });

    const openSse = async (path: string, headers: Record<string, string> = {}) => {
      const ctl = new AbortController();
      const res = await fetch(`${h.base}${path}`, { headers, signal: ctl.signal });
      const ct = res.headers.get('content-type') ?? '';
      const text = ct.startsWith('text/event-stream') ? '' : await res.text();
      ctl.abort();
      return { status: res.status, ct, text };
    };

    it('opens only the named jobs’ streams, for its tenant, and nothing else', async () => {
      const g = newGate();
      const mine = await submit(h.base, 't.block', { gate: g });
      const other = await submit(h.base, 't.quick');
      const { token } = (await call(h.base, '/v1/stream-tokens', { body: { jobs: [mine.id] } })).json as { token: string };
      const ok = await openSse(`/v1/jobs/${mine.id}/events?token=${encodeURIComponent(token)}`);
      assert.equal(ok.status, 200);
      assert.ok(ok.ct.startsWith('text/event-stream'));
      const wrongJob = await openSse(`/v1/jobs/${other.id}/events?token=${encodeURIComponent(token)}`);
      assert.equal(wrongJob.status, 401);
      const feed = await openSse(`/v1/events?token=${encodeURIComponent(token)}`);
      assert.equal(feed.status, 401, 'a job token does not open the tenant-wide feed');
      // Not accepted on other routes, even for the job it names.
      const q = `?token=${encodeURIComponent(token)}`;
      problemOf(await call(h.base, `/v1/jobs/${mine.id}${q}`, { key: null }), 401);
      problemOf(await call(h.base, `/v1/jobs${q}`, { key: null }), 401);
      problemOf(await call(h.base, `/v1/jobs/${mine.id}/cancel${q}`, { key: null, method: 'POST' }), 401);
      problemOf(await call(h.base, `/v1/jobs${q}`, { key: null, body: { type: 't.quick' } }), 401);
      problemOf(await call(h.base, `/v1/stream-tokens${q}`, { key: null, body: { all: true } }), 401);
      assert.equal((await h.lh.get(mine.id))?.cancelRequested, false);
      release(g);
    });

    it('401 for tampered, expired or foreign-secret tokens; a forged grant cannot cross tenants', async () => {
      const job = await submit(h.base, 't.quick');
      const { token } = (await call(h.base, '/v1/stream-tokens', { body: { jobs: [job.id] } })).json as { token: string };
      const [body, sig] = token.split('.') as [string, string];
      const flip = (s: string) => (s[0] === 'A' ? `B${s.slice(1)}` : `A${s.slice(1)}`);
      const tampered = [
        `${flip(body)}.${sig}`,
        `${body}.${flip(sig)}`,
        `${Buffer.from(JSON.stringify({ t: 'tenantA', j: '*', e: Date.now() + 60_000 })).toString('base64url')}.${sig}`,
        body,
        'x',
      ];
      for (const t of tampered) assert.equal((await openSse(`/v1/jobs/${job.id}/events?token=${encodeURIComponent(t)}`)).status, 401, t);
      const expired = new StreamTokens(TOKEN_SECRET).mint({ tenant: 'tenantA', jobs: [job.id], exp: Date.now() - 1_000 });
      assert.equal((await openSse(`/v1/jobs/${job.id}/events?token=${encodeURIComponent(expired)}`)).status, 401);
      const foreign = new StreamTokens('another-secret-of-at-least-32-characters').mint({ tenant: 'tenantA', jobs: [job.id], exp: Date.now() + 60_000 });
      assert.equal((await openSse(`/v1/jobs/${job.id}/events?token=${encodeURIComponent(foreign)}`)).status, 401);
      // A validly signed grant for tenant B naming A's job still sees no such job.
      const crossTenant = new StreamTokens(TOKEN_SECRET).mint({ tenant: 'tenantB', jobs: [job.id], exp: Date.now() + 60_000 });
      assert.equal((await openSse(`/v1/jobs/${job.id}/events?token=${encodeURIComponent(crossTenant)}`)).status, 404);
    });

    it('an {all: true} token opens /v1/events and any job of the tenant', async () => {
      const job = await submit(h.base, 't.quick');
      const { token } = (await call(h.base, '/v1/stream-tokens', { body: { all: true } })).json as { token: string };
      const feed = await openSse(`/v1/events?token=${encodeURIComponent(token)}`);
      assert.equal(feed.status, 200);
      assert.ok(feed.ct.startsWith('text/event-stream'));
      assert.equal((await openSse(`/v1/jobs/${job.id}/events?token=${encodeURIComponent(token)}`)).status, 200);
      const bJob = await submit(h.base, 't.quick', undefined, {}, KEY_B);
      assert.equal((await openSse(`/v1/jobs/${bJob.id}/events?token=${encodeURIComponent(token)}`)).status, 404);
    });
  });

  // ---- ops -------------------------------------------------------------------------------------------

  describe('ops routes', () => {
    it('/healthz and /readyz', async () => {
      const health = await call(h.base, '/healthz', { key: null });
      assert.equal(health.status, 200);
      assert.deepEqual(health.json, { status: 'ok' });
      const ready = await call(h.base, '/readyz', { key: null });
      assert.equal(ready.status, 200);
      assert.deepEqual(ready.json, { status: 'ready' });
    });

    it('/v1/stats has counts for every state, rates and per-type durations', async () => {
      const job = await submit(h.base, 't.steps', { steps: 2, stepMs: 5 });
      await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
      const res = await call(h.base, '/v1/stats');
      assert.equal(res.status, 200);
      const { counts, rates, durations } = res.json;
      assert.deepEqual(Object.keys(counts).sort(), [...JOB_STATES].sort());
      for (const s of JOB_STATES) assert.ok(Number.isInteger(counts[s]) && counts[s] >= 0, s);
      assert.ok(counts.succeeded >= 1);
      assert.equal(typeof rates.submittedPerMinute, 'number');
      assert.equal(typeof rates.finishedPerMinute, 'number');
      assert.ok(rates.submittedPerMinute >= 1 && rates.finishedPerMinute >= 1);
      const d = durations['t.steps'];
      assert.ok(d, JSON.stringify(durations));
      assert.ok(d.count >= 1);
      for (const q of ['p50', 'p95', 'p99']) assert.ok(typeof d[q] === 'number' && d[q] >= 0, q);
      assert.ok(d.p50 <= d.p95 && d.p95 <= d.p99);
    });

    it('/openapi.json is an OpenAPI 3.1 document of the v1 routes whose $refs resolve', async () => {
      const res = await call(h.base, '/openapi.json', { key: null });
      assert.equal(res.status, 200);
      const doc = res.json;
      assert.match(doc.openapi, /^3\.1\.\d+$/);
      assert.equal(typeof doc.info?.title, 'string');
      assert.equal(typeof doc.info?.version, 'string');
      for (const p of [
        '/v1/jobs',
        '/v1/jobs/{id}',
        '/v1/jobs/{id}/cancel',
        '/v1/jobs/{id}/retry',
        '/v1/jobs/{id}/transitions',
        '/v1/jobs/{id}/events',
        '/v1/events',
        '/v1/stream-tokens',
        '/v1/stats',
      ]) {
        assert.ok(doc.paths?.[p], `path ${p}`);
      }
      assert.ok(doc.paths['/v1/jobs'].post && doc.paths['/v1/jobs'].get);
      assert.ok(doc.paths['/v1/jobs/{id}'].get && doc.paths['/v1/jobs/{id}'].delete);
      assert.ok(doc.paths['/v1/jobs'].post.responses['202'], 'submit documents 202');
      assert.ok(doc.paths['/v1/jobs/{id}'].get.responses['410'], 'get documents 410');
      for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, { responses?: object }>>)) {
        for (const [method, op] of Object.entries(ops)) {
          if (['get', 'post', 'put', 'patch', 'delete'].includes(method))
            assert.ok(op.responses && Object.keys(op.responses).length > 0, `${method} ${path} has responses`);
        }
      }
      const refs: string[] = [];
      const walk = (v: unknown) => {
        if (Array.isArray(v)) v.forEach(walk);
        else if (v && typeof v === 'object') {
          for (const [k, x] of Object.entries(v)) {
            if (k === '$ref' && typeof x === 'string') refs.push(x);
            else walk(x);
          }
        }
      };
      walk(doc);
      assert.ok(refs.length > 0);
      for (const ref of refs) {
        assert.ok(ref.startsWith('#/'), `local $ref ${ref}`);
        const target = ref
          .slice(2)
          .split('/')
          .reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k.replaceAll('~1', '/').replaceAll('~0', '~')], doc);
        assert.ok(target, `$ref ${ref} resolves`);
      }
    });

    it('/docs serves the UI', async () => {
      const res = await fetch(`${h.base}/docs`, { redirect: 'manual' });
      assert.ok(res.status === 200 || (res.status >= 300 && res.status < 400), String(res.status));
      if (res.status === 200) assert.match(await res.text(), /swagger|openapi/i);
      else await res.arrayBuffer();
    });

    it('/readyz answers 503 once the store is closed', async () => {
      const x = await startHarness({ worker: false });
      try {
        assert.equal((await call(x.base, '/readyz')).status, 200);
        await x.lh.store.close();
        const res = await call(x.base, '/readyz');
        problemOf(res, 503, 'NOT_READY');
        assert.equal((await call(x.base, '/healthz')).status, 200, 'the process is still up');
      } finally {
        await x.close();
      }
    });
  });
});

// ---- the CLI's refusal to serve unauthenticated on a public address ---------------------------------

describe('CLI: no API keys on a non-loopback address', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('runRuntime refuses before listening (the database may hold keys: it is opened to ask)', async () => {
    const saved = process.env.LONGHAUL_API_KEYS;
    delete process.env.LONGHAUL_API_KEYS;
    try {
      await assert.rejects(
        runRuntime('dev', { host: '0.0.0.0', port: '0', database: join(dir, 'a.db') }),
        /refusing to listen on 0\.0\.0\.0.*LONGHAUL_API_KEYS/,
      );
    } finally {
      if (saved !== undefined) process.env.LONGHAUL_API_KEYS = saved;
    }
  });

  it('`longhaul dev --host 0.0.0.0` exits non-zero with a clear message', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, LONGHAUL_LOG_LEVEL: 'silent' };
    delete env.LONGHAUL_API_KEYS;
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'dev', '--host', '0.0.0.0', '--port', '0', '--database', join(dir, 'b.db')], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(null);
      }, 20_000);
      child.on('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    assert.notEqual(code, null, `still running (listening?): ${out}`);
    assert.notEqual(code, 0, out);
    assert.match(out, /refusing to listen on 0\.0\.0\.0 without API keys: set LONGHAUL_API_KEYS/);
    assert.doesNotMatch(out, /listening on/);
  });
});
