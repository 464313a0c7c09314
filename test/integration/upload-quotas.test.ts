/**
 * Upload quotas (issue 36): `maxUploads` and `maxUploadBytes` per tenant in the tenant quotas
 * (LONGHAUL_TENANT_QUOTAS), `"*"` for every tenant not listed, the built-in defaults otherwise.
 * Over HTTP through buildServer's default file routes (the instance's own blob storage):
 * refusals are 429 UPLOAD_QUOTA_EXCEEDED with Retry-After, concurrent uploads never overshoot,
 * a refused or failed upload gives its reservation back, and /metrics shows the bytes kept per
 * tenant and the refusals.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { uploadUsage } from '../../src/blobs/upload-quota.js';
import { storeUpload } from '../../src/blobs/uploads.js';
import { toReadable } from '../../src/blobs/meter.js';
import { RESOURCE_DEFAULTS, resourceQuotaFor } from '../../src/core/quotas.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';

const dir = mkdtempSync(join(tmpdir(), 'longhaul-upload-quotas-'));
const KEYS: Record<string, string> = {
  alice: 'key-of-alice-0123456789',
  bob: 'key-of-bob-0123456789ab',
  carol: 'key-of-carol-0123456789',
  dave: 'key-of-dave-0123456789a',
  erin: 'key-of-erin-0123456789a',
};
const ADMIN_KEY = 'key-of-the-admin-0123456789';
let lh: Longhaul;
let app: FastifyInstance;
let base: string;

before(async () => {
  lh = await Longhaul.open({
    database: join(dir, 'test.db'),
    tasks: [],
    logger: pino({ level: 'silent' }),
    tenantQuotas: {
      alice: { maxUploads: 2 },
      carol: { maxUploads: 5 },
      dave: { maxUploadBytes: 1000 },
      '*': { maxUploads: 3, maxUploadBytes: 1000 },
    },
  });
  const keys = Object.entries(KEYS)
    .map(([t, k]) => `${t}:${k}`)
    .join(',');
  app = await buildServer({ lh, apiKeys: parseApiKeys(`${keys},ops:${ADMIN_KEY}`), adminTenants: ['ops'], logger: false });
  base = await app.listen({ port: 0, host: '127.0.0.1' });
});

after(async () => {
  await app?.close();
  await lh?.close({ drainMs: 0 });
  rmSync(dir, { recursive: true, force: true });
});

/** POSTs `bytes` bytes as an upload; chunked (no Content-Length) when `chunked`. */
function upload(tenant: string, bytes: number, chunked = false): Promise<{ status: number; body: Record<string, unknown>; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${KEYS[tenant]}`, 'content-type': 'application/octet-stream' };
    if (!chunked) headers['content-length'] = String(bytes);
    const req = http.request(`${base}/v1/uploads`, { method: 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text || '{}'), retryAfter: res.headers['retry-after'] as string | undefined }));
      res.on('error', reject);
    });
    // A refusal may close the connection before the body is sent: the answer still arrives.
    req.on('error', () => {});
    const chunk = Buffer.alloc(Math.min(bytes, 100), 1);
    let left = bytes;
    const write = () => {
      while (left > 0) {
        const n = Math.min(left, chunk.length);
        left -= n;
        if (!req.write(chunk.subarray(0, n))) return req.once('drain', write);
      }
      req.end();
    };
    write();
  });
}

describe('upload quotas per tenant', () => {
  test('count: a tenant of its own (maxUploads 2) and one under "*" (3); the third or fourth is 429 with Retry-After', async () => {
    assert.equal((await upload('alice', 10)).status, 201);
    assert.equal((await upload('alice', 10)).status, 201);
    const refused = await upload('alice', 10);
    assert.equal(refused.status, 429);
    assert.equal(refused.body.code, 'UPLOAD_QUOTA_EXCEEDED');
    assert.match(String(refused.body.detail), /maxUploads 2/);
    assert.ok(Number(refused.retryAfter) > 0, 'Retry-After: when the oldest upload expires');
    // bob has no entry: "*" gives him 3, counted apart from alice's.
    for (let i = 0; i < 3; i++) assert.equal((await upload('bob', 10)).status, 201);
    assert.equal((await upload('bob', 10)).status, 429);
  });

  test('bytes: a declared size past the room is refused at once; an unannounced one when it crosses; refusals give their reservation back', async () => {
    // dave: maxUploadBytes 1000 of his own, maxUploads 3 from "*".
    assert.equal((await upload('dave', 600)).status, 201);
    const declared = await upload('dave', 500);
    assert.equal(declared.status, 429);
    assert.match(String(declared.body.detail), /maxUploadBytes 1000/);
    const crossing = await upload('dave', 500, true);
    assert.equal(crossing.status, 429);
    assert.equal(crossing.body.code, 'UPLOAD_QUOTA_EXCEEDED');
    // Nothing of the refused ones is left counting: exactly the 400 bytes left still fit, chunked too.
    assert.equal((await upload('dave', 400, true)).status, 201);
    assert.equal((await upload('dave', 1)).status, 429);
  });

  test('a client that disconnects mid-upload gives its reservation back', async () => {
    const files = await lh.files();
    const before = await uploadUsage(files.blobs, 'erin');
    const req = http.request(`${base}/v1/uploads`, { method: 'POST', headers: { authorization: `Bearer ${KEYS.erin}`, 'content-type': 'application/octet-stream', 'content-length': '500' } });
    req.on('error', () => {});
    req.write(Buffer.alloc(100, 1));
    // While it streams, its 500 declared bytes are reserved.
    const deadline = Date.now() + 5_000;
    while ((await uploadUsage(files.blobs, 'erin')).bytes !== before.bytes + 500) {
      assert.ok(Date.now() < deadline, 'the reservation appears');
      await new Promise((r) => setTimeout(r, 20));
    }
    req.destroy();
    while ((await uploadUsage(files.blobs, 'erin')).bytes !== before.bytes) {
      assert.ok(Date.now() < deadline + 5_000, 'the reservation is given back');
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(await uploadUsage(files.blobs, 'erin'), before);
  });

  test('concurrent uploads never overshoot: 20 at once against maxUploads 5 → exactly 5 stored; 10 × 300 B against 1000 B → 3', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, () => upload('carol', 50)));
    assert.equal(results.filter((r) => r.status === 201).length, 5);
    assert.equal(results.filter((r) => r.status === 429).length, 15);
    const bytes = await Promise.all(Array.from({ length: 10 }, () => upload('erin', 300)));
    assert.equal(bytes.filter((r) => r.status === 201).length, 3, JSON.stringify(bytes.map((r) => r.status)));
    const files = await lh.files();
    assert.deepEqual(await uploadUsage(files.blobs, 'carol'), { uploads: 5, bytes: 250 });
    assert.deepEqual(await uploadUsage(files.blobs, 'erin'), { uploads: 3, bytes: 900 });
  });

  test('/metrics: longhaul_upload_bytes per tenant and longhaul_quota_refusals_total', async () => {
    const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /^longhaul_upload_bytes\{tenant="carol"\} 250$/m);
    assert.match(text, /^longhaul_upload_bytes\{tenant="erin"\} 900$/m);
    assert.match(text, /^longhaul_upload_bytes\{tenant="dave"\} 1000$/m);
    assert.match(text, /^longhaul_quota_refusals_total\{quota="maxUploads"\} [1-9]\d*$/m);
    assert.match(text, /^longhaul_quota_refusals_total\{quota="maxUploadBytes"\} [1-9]\d*$/m);
  });
});

describe('upload quota bookkeeping', () => {
  test('defaults apply field by field: own entry, else "*", else RESOURCE_DEFAULTS', () => {
    const quotas = { a: { maxUploads: 1 }, '*': { maxUploadBytes: 5 } };
    assert.deepEqual(resourceQuotaFor(quotas, 'a'), { maxUploads: 1, maxUploadBytes: 5, maxSchedules: RESOURCE_DEFAULTS.maxSchedules });
    assert.deepEqual(resourceQuotaFor({}, 'z'), { ...RESOURCE_DEFAULTS });
  });

  test('two servers over one blob store (two store objects on one directory): 30 racing uploads never take the tenant past its quota', async () => {
    const shared = join(dir, 'shared-blobs');
    const one = await FsBlobStore.open(shared);
    const two = await FsBlobStore.open(shared);
    try {
      const quota = { maxUploads: 5, maxUploadBytes: 1_000_000 };
      const settled = await Promise.allSettled(
        Array.from({ length: 30 }, (_, i) =>
          storeUpload(i % 2 === 0 ? one : two, { tenant: 'racer', body: toReadable('r'.repeat(10)), contentType: 'text/plain', maxBytes: 1000, ttlMs: 60_000, quota, declaredBytes: 10 }),
        ),
      );
      const stored = settled.filter((r) => r.status === 'fulfilled').length;
      assert.ok(stored >= 1 && stored <= 5, `stored ${stored}`);
      assert.deepEqual(await uploadUsage(one, 'racer'), { uploads: stored, bytes: stored * 10 });
      for (const r of settled) if (r.status === 'rejected') assert.equal((r.reason as { code?: string }).code, 'UPLOAD_QUOTA_EXCEEDED');
    } finally {
      await one.close();
      await two.close();
    }
  });

  test('an expired upload no longer counts, and its entry is removed by the next count', async () => {
    const blobs = await FsBlobStore.open(join(dir, 'expiry-blobs'));
    try {
      const t0 = Date.now();
      const quota = { maxUploads: 1, maxUploadBytes: 100 };
      await storeUpload(blobs, { tenant: 't', body: toReadable('x'.repeat(60)), contentType: 'text/plain', maxBytes: 1000, ttlMs: 1000, now: t0, quota });
      await assert.rejects(
        storeUpload(blobs, { tenant: 't', body: toReadable('y'), contentType: 'text/plain', maxBytes: 1000, ttlMs: 1000, now: t0 + 10, quota }),
        (err: Error & { code?: string }) => err.code === 'UPLOAD_QUOTA_EXCEEDED',
      );
      assert.deepEqual(await uploadUsage(blobs, 't', t0 + 10), { uploads: 1, bytes: 60 });
      assert.deepEqual(await uploadUsage(blobs, 't', t0 + 2000), { uploads: 0, bytes: 0 });
      const left: string[] = [];
      for await (const e of blobs.list('upload-quota/')) left.push(e.key);
      assert.deepEqual(left, [], 'the expired entry was deleted by that count');
      await storeUpload(blobs, { tenant: 't', body: toReadable('z'), contentType: 'text/plain', maxBytes: 1000, ttlMs: 1000, now: t0 + 2000, quota });
    } finally {
      await blobs.close();
    }
  });
});
