/**
 * The upload and result routes over real HTTP: raw bodies streamed to blob storage with the
 * size limit, client aborts, metadata, tenant isolation and expiry; signed result URLs (valid,
 * Range, tampered, expired, expired job), the /result redirect and download counting; and the
 * memory bound: 200 MB in and 200 MB out with this process's RSS growing by less than 96 MB.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { buildResultLinks, resultFilePath } from '../../src/blobs/result-links.js';
import { createResultsWriter, type StoredResultFile } from '../../src/blobs/results.js';
import { UrlSigner } from '../../src/blobs/signed-urls.js';
import type { BlobStore } from '../../src/blobs/store.js';
import { uuidv7 } from '../../src/core/ids.js';
import type { JobState } from '../../src/core/states.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import type { JobResultFiles } from '../../src/server/routes/results.js';
import { API_KEYS, call, KEY_A, KEY_B, problemOf } from '../support/http-harness.js';

const MiB = 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), 'longhaul-uploads-test-'));
const blobDir = join(dir, 'blobs');
let lh: Longhaul;
let blobs: FsBlobStore;
const signer = new UrlSigner('test-url-signing-secret-0123456789abcdef');

/** Jobs as the lead's store wiring will report them to the result routes. */
const jobs = new Map<string, { tenant: string; state: JobState; files: StoredResultFile[]; expiresAt: number | null }>();
const downloads: string[] = [];

async function getResultFiles(id: string, tenant: string | null): Promise<JobResultFiles | null> {
  const job = jobs.get(id);
  if (!job || (tenant !== null && job.tenant !== tenant)) return null;
  return { state: job.state, files: job.files, expiresAt: job.expiresAt };
}

async function startApp(maxUploadBytes: number, uploadTtlMs: number): Promise<{ app: FastifyInstance; base: string }> {
  const app = await buildServer({
    lh,
    apiKeys: parseApiKeys(API_KEYS),
    logger: false,
    files: {
      blobs,
      signer,
      maxUploadBytes,
      uploadTtlMs,
      getResultFiles,
      onDownload: (jobId, name) => {
        downloads.push(`${jobId}/${name}`);
      },
    },
  });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  return { app, base };
}

let big: { app: FastifyInstance; base: string };
let small: { app: FastifyInstance; base: string };

before(async () => {
  lh = await Longhaul.open({ database: join(dir, 'test.db'), tasks: [], logger: pino({ level: 'silent' }) });
  blobs = await FsBlobStore.open(blobDir);
  big = await startApp(256 * MiB, 3_600_000);
  small = await startApp(1 * MiB, 1_000);
});

after(async () => {
  await big?.app.close();
  await small?.app.close();
  await lh?.close({ drainMs: 0 });
  rmSync(dir, { recursive: true, force: true });
});

/** Generates `total` bytes on demand (never held whole), hashing them as they go. */
function generated(total: number, chunk = 64 * 1024): { stream: Readable; digest: () => string } {
  const hash = createHash('sha256');
  let sent = 0;
  const stream = new Readable({
    read() {
      if (sent >= total) return void this.push(null);
      const n = Math.min(chunk, total - sent);
      const buf = Buffer.allocUnsafe(n);
      for (let i = 0; i < n; i += 4096) buf.fill((sent + i) & 0xff, i, Math.min(n, i + 4096));
      hash.update(buf);
      sent += n;
      this.push(buf);
    },
  });
  return { stream, digest: () => hash.digest('hex') };
}

interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** POSTs a streamed body with http.request (chunked unless contentLength is given). */
function postStream(base: string, path: string, body: Readable, headers: Record<string, string> = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${KEY_A}`, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    pipeline(body, req).catch(() => {
      // A server that answers early (413) closes the connection while we are still sending.
    });
  });
}

/**
 * How far RSS may grow while 200 MB stream through: less than half the body, so a body held in
 * memory fails. Not less: each chunk is a fresh Buffer whose memory returns only when a garbage
 * collection finds it dead, and V8 lets such external memory reach about 64 MB before it forces
 * one. At the peaks measured on Node 24 (47-66 MB; Node 20: 20-44 MB) nearly all the growth was
 * ArrayBuffer memory (`process.memoryUsage().arrayBuffers`), so a bound of 64 MB failed by chance.
 */
const STREAMING_RSS_BOUND = 96 * MiB;

/** Samples this process's RSS while `fn` runs; returns the peak growth over the starting value. */
async function rssGrowthDuring(fn: () => Promise<void>): Promise<number> {
  const start = process.memoryUsage().rss;
  let peak = start;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 5);
  try {
    await fn();
  } finally {
    clearInterval(timer);
  }
  return Math.max(peak, process.memoryUsage().rss) - start;
}

/** Every upload-related key and every temp file of the blob store: what a failed upload must not leave. */
async function uploadLeftovers(): Promise<string[]> {
  const out: string[] = [];
  for (const prefix of ['uploads/', 'upload-index/']) for await (const e of blobs.list(prefix)) out.push(e.key);
  const tmp = join(blobDir, '.tmp');
  if (existsSync(tmp)) out.push(...readdirSync(tmp).map((f) => `.tmp/${f}`));
  return out;
}

async function untilClean(baseline: string[], what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const now = await uploadLeftovers();
    if (now.length === baseline.length && now.every((k, i) => k === baseline[i])) return;
    if (Date.now() > deadline) assert.deepEqual(now, baseline, `${what}: leftovers remain`);
    await sleep(20);
  }
}

test('the routes are in the OpenAPI document; the signed download needs no API key', async () => {
  const doc = (await call(big.base, '/openapi.json')).json;
  assert.ok(doc.paths['/v1/uploads']?.post);
  assert.ok(doc.paths['/v1/uploads/{id}']?.get);
  assert.ok(doc.paths['/v1/jobs/{id}/result']?.get);
  assert.deepEqual(doc.paths['/v1/jobs/{id}/results/{name}']?.get?.security, []);
});

describe('POST /v1/uploads', () => {
  test('a raw body is stored as sent; 201 with id, size, sha256, contentType, expiresAt; metadata route answers the same', async () => {
    const json = '{"this": "is not parsed", "n": [1,2,3]}';
    const res = await call(small.base, '/v1/uploads', { raw: json, contentType: 'application/json' });
    assert.equal(res.status, 201, res.text);
    const info = res.json;
    assert.match(info.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(info.size, Buffer.byteLength(json));
    assert.equal(info.sha256, createHash('sha256').update(json).digest('hex'));
    assert.equal(info.contentType, 'application/json');
    assert.ok(Math.abs(Date.parse(info.expiresAt) - Date.parse(info.createdAt) - 1_000) < 5);
    assert.equal(res.headers.get('location'), `/v1/uploads/${info.id}`);
    const meta = await call(small.base, `/v1/uploads/${info.id}`);
    assert.equal(meta.status, 200);
    assert.deepEqual(meta.json, info);
    const stored = await blobs.get(`uploads/${info.id}/data`);
    let back = '';
    for await (const c of stored) back += c;
    assert.equal(back, json);
  });

  test('any content type is accepted raw; none means application/octet-stream; a malformed one is 400', async () => {
    const csv = await call(small.base, '/v1/uploads', { raw: 'a,b\n1,2\n', contentType: 'text/csv; charset=utf-8' });
    assert.equal(csv.status, 201);
    assert.equal(csv.json.contentType, 'text/csv; charset=utf-8');
    const bare = await postStream(small.base, '/v1/uploads', Readable.from([Buffer.from([0, 1, 2, 255])]), { 'content-length': '4' });
    assert.equal(bare.status, 201, bare.body);
    assert.equal(JSON.parse(bare.body).contentType, 'application/octet-stream');
    assert.equal(JSON.parse(bare.body).size, 4);
    const empty = await call(small.base, '/v1/uploads', { method: 'POST', raw: '', contentType: 'text/plain' });
    assert.equal(empty.status, 201);
    assert.equal(empty.json.size, 0);
    // What is not a media type is a bad request (400, as docs/api.md says), checked before Fastify's
    // parser lookup (which would answer 415), and so are absurd lengths.
    for (const contentType of ['not a type', 'text', '/plain', 'text/plain; =x', `text/${'x'.repeat(300)}`]) {
      problemOf(await call(small.base, '/v1/uploads', { raw: 'x', contentType }), 400, 'INVALID_CONTENT_TYPE');
    }
  });

  test('authentication is required; another tenant sees 404; unknown ids 404, malformed ones 400', async () => {
    problemOf(await call(small.base, '/v1/uploads', { raw: 'x', contentType: 'text/plain', key: null }), 401);
    const mine = await call(small.base, '/v1/uploads', { raw: 'secret data', contentType: 'text/plain' });
    assert.equal(mine.status, 201);
    problemOf(await call(small.base, `/v1/uploads/${mine.json.id}`, { key: KEY_B }), 404, 'NOT_FOUND');
    problemOf(await call(small.base, `/v1/uploads/${uuidv7()}`), 404, 'NOT_FOUND');
    problemOf(await call(small.base, '/v1/uploads/not-an-id'), 400, 'INVALID_REQUEST');
    problemOf(await call(small.base, `/v1/uploads/${mine.json.id}`, { key: null }), 401);
  });

  test('expired uploads answer 410', async () => {
    const res = await call(small.base, '/v1/uploads', { raw: 'short-lived', contentType: 'text/plain' });
    assert.equal(res.status, 201);
    await sleep(Date.parse(res.json.expiresAt) - Date.now() + 20);
    problemOf(await call(small.base, `/v1/uploads/${res.json.id}`), 410, 'EXPIRED');
  });

  test('413 when Content-Length is over the limit, before reading; nothing is written', async () => {
    const baseline = await uploadLeftovers();
    const body = generated(2 * MiB);
    const res = await postStream(small.base, '/v1/uploads', body.stream, { 'content-length': String(2 * MiB), 'content-type': 'application/octet-stream' });
    assert.equal(res.status, 413);
    assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
    assert.equal(JSON.parse(res.body).code, 'UPLOAD_TOO_LARGE');
    await untilClean(baseline, '413 by Content-Length');
  });

  test('413 when a chunked body crosses the limit while streaming; nothing half-written remains', async () => {
    const baseline = await uploadLeftovers();
    const res = await postStream(small.base, '/v1/uploads', generated(3 * MiB).stream, { 'content-type': 'application/octet-stream' });
    assert.equal(res.status, 413);
    assert.equal(JSON.parse(res.body).code, 'UPLOAD_TOO_LARGE');
    await untilClean(baseline, '413 while streaming');
    // Exactly the limit is accepted.
    const exact = await postStream(small.base, '/v1/uploads', generated(1 * MiB).stream, { 'content-type': 'application/octet-stream' });
    assert.equal(exact.status, 201);
    assert.equal(JSON.parse(exact.body).size, MiB);
  });

  test('a client that disconnects mid-upload leaves nothing behind', async () => {
    const baseline = await uploadLeftovers();
    const req = http.request(`${big.base}/v1/uploads`, { method: 'POST', headers: { authorization: `Bearer ${KEY_A}`, 'content-type': 'application/octet-stream' } });
    req.on('error', () => {});
    req.write(Buffer.alloc(512 * 1024, 1));
    req.write(Buffer.alloc(512 * 1024, 2));
    // The server has started writing (index marker and temp file exist) before the client vanishes.
    const deadline = Date.now() + 5_000;
    while ((await uploadLeftovers()).length < baseline.length + 2) {
      assert.ok(Date.now() < deadline, 'the server never started writing the upload');
      await sleep(10);
    }
    req.destroy();
    await untilClean(baseline, 'client abort');
  });

  test('200 MB streamed in: sha256 right, RSS grows by less than 96 MB', async () => {
    // Warm up code paths and pools so the measurement sees steady-state streaming.
    assert.equal((await postStream(big.base, '/v1/uploads', generated(8 * MiB).stream)).status, 201);
    const size = 200 * MiB;
    const body = generated(size);
    let res: RawResponse | undefined;
    const growth = await rssGrowthDuring(async () => {
      res = await postStream(big.base, '/v1/uploads', body.stream, { 'content-type': 'application/x-big' });
    });
    assert.equal(res?.status, 201, res?.body);
    const info = JSON.parse(res?.body ?? '{}');
    assert.equal(info.size, size);
    assert.equal(info.sha256, body.digest());
    assert.ok(growth < STREAMING_RSS_BOUND, `RSS grew by ${(growth / MiB).toFixed(1)} MB during a 200 MB upload`);
    console.log(`# 200 MB upload: RSS growth ${(growth / MiB).toFixed(1)} MB`);
    await blobs.deletePrefix(`uploads/${info.id}/`);
  });
});

// ---- result files behind signed URLs ----------------------------------------------------------------

async function makeJob(tenant: string, files: Record<string, string | Readable>, state: JobState = 'succeeded'): Promise<string> {
  const id = uuidv7();
  const job = { tenant, state, files: [] as StoredResultFile[], expiresAt: Date.now() + 3_600_000 };
  jobs.set(id, job);
  const writer = createResultsWriter(blobs as BlobStore, id, {
    async record(file) {
      job.files = [...job.files.filter((f) => f.name !== file.name), file];
      return true;
    },
    async unrecord(name) {
      job.files = job.files.filter((f) => f.name !== name);
      return true;
    },
    async list() {
      return job.files;
    },
  });
  for (const [name, data] of Object.entries(files)) await writer.write(name, data);
  return id;
}

function urlOf(jobId: string, name: string, options: { now?: number; ttlMs?: number } = {}): string {
  return signer.sign(resultFilePath(jobId, name), options);
}

async function get(base: string, path: string, headers: Record<string, string> = {}, method = 'GET') {
  const res = await fetch(`${base}${path}`, { method, headers, redirect: 'manual' });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe('signed result URLs', () => {
  test('valid URL: 200 with the bytes, attachment disposition, type, length, ETag; no API key needed', async () => {
    const id = await makeJob('tenantA', { 'rejected.csv': 'line,reason\n7,bad email\n', 'summary.json': '{"rows":7}' });
    const links = buildResultLinks(id, jobs.get(id)?.files ?? [], signer);
    assert.equal(links.resultUrl, links.results[0]?.url);
    const res = await get(big.base, links.resultUrl as string);
    assert.equal(res.status, 200);
    assert.equal(res.text, 'line,reason\n7,bad email\n');
    assert.equal(res.headers.get('content-type'), 'text/csv');
    assert.equal(res.headers.get('content-length'), String(Buffer.byteLength(res.text)));
    assert.equal(res.headers.get('content-disposition'), 'attachment; filename="rejected.csv"');
    assert.equal(res.headers.get('accept-ranges'), 'bytes');
    assert.equal(res.headers.get('etag'), `"${createHash('sha256').update(res.text).digest('hex')}"`);
    const second = await get(big.base, links.results[1]?.url as string);
    assert.equal(second.text, '{"rows":7}');
    assert.equal(second.headers.get('content-type'), 'application/json');
  });

  test('Range: 206 with Content-Range (start-end, open end, suffix), 416 beyond the end, multi-range and stale If-Range give the whole file', async () => {
    const id = await makeJob('tenantA', { 'digits.txt': '0123456789' });
    const url = urlOf(id, 'digits.txt');
    const r1 = await get(big.base, url, { range: 'bytes=2-5' });
    assert.equal(r1.status, 206);
    assert.equal(r1.text, '2345');
    assert.equal(r1.headers.get('content-range'), 'bytes 2-5/10');
    assert.equal(r1.headers.get('content-length'), '4');
    const r2 = await get(big.base, url, { range: 'bytes=7-' });
    assert.deepEqual([r2.status, r2.text, r2.headers.get('content-range')], [206, '789', 'bytes 7-9/10']);
    const r3 = await get(big.base, url, { range: 'bytes=-3' });
    assert.deepEqual([r3.status, r3.text], [206, '789']);
    const r4 = await get(big.base, url, { range: 'bytes=10-20' });
    assert.equal(r4.status, 416);
    assert.equal(r4.headers.get('content-range'), 'bytes */10');
    assert.equal(JSON.parse(r4.text).code, 'RANGE_NOT_SATISFIABLE');
    const r5 = await get(big.base, url, { range: 'bytes=0-1,5-6' });
    assert.deepEqual([r5.status, r5.text], [200, '0123456789']);
    const r6 = await get(big.base, url, { range: 'bytes=2-5', 'if-range': '"stale-etag"' });
    assert.deepEqual([r6.status, r6.text], [200, '0123456789']);
    const r7 = await get(big.base, url, { range: 'bytes=2-5', 'if-range': r1.headers.get('etag') as string });
    assert.deepEqual([r7.status, r7.text], [206, '2345']);
    const head = await get(big.base, url, {}, 'HEAD');
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-length'), '10');
    assert.equal(head.text, '');
  });

  test('tampered signature, path or expiry → 403; no signature → 403; genuine but expired → 410', async () => {
    const id = await makeJob('tenantA', { 'a.txt': 'aaa', 'b.txt': 'bbb' });
    const url = new URL(urlOf(id, 'a.txt'), big.base);
    const sig = url.searchParams.get('sig') as string;
    const bad = (mutate: (u: URL) => void) => {
      const u = new URL(url);
      mutate(u);
      return `${u.pathname}${u.search}`;
    };
    for (const path of [
      bad((u) => u.searchParams.set('sig', (sig[0] === 'A' ? 'B' : 'A') + sig.slice(1))),
      bad((u) => u.searchParams.set('exp', String(Number(u.searchParams.get('exp')) + 60))),
      bad((u) => {
        u.pathname = u.pathname.replace('a.txt', 'b.txt');
      }),
      bad((u) => u.searchParams.delete('sig')),
      resultFilePath(id, 'a.txt'),
    ]) {
      const res = await call(big.base, path, { key: null });
      problemOf(res, 403, 'INVALID_SIGNATURE');
    }
    const expired = urlOf(id, 'a.txt', { now: Date.now() - 2 * 3_600_000 });
    problemOf(await call(big.base, expired, { key: null }), 410, 'URL_EXPIRED');
  });

  test('after the job expired its URLs answer 410; unknown jobs and files 404', async () => {
    const id = await makeJob('tenantA', { 'x.txt': 'x' });
    const url = urlOf(id, 'x.txt');
    assert.equal((await get(big.base, url)).status, 200);
    const job = jobs.get(id);
    if (job) job.state = 'expired';
    problemOf(await call(big.base, url, { key: null }), 410, 'EXPIRED');
    problemOf(await call(big.base, urlOf(uuidv7(), 'x.txt'), { key: null }), 404);
    const other = await makeJob('tenantA', { 'y.txt': 'y' });
    problemOf(await call(big.base, urlOf(other, 'nope.txt'), { key: null }), 404, 'RESULT_NOT_FOUND');
  });

  test('GET /v1/jobs/{id}/result: 302 to a signed URL of the first file; 401/404/410 otherwise', async () => {
    const id = await makeJob('tenantA', { 'first.pdf': '%PDF-1.4 fake', 'second.txt': '2' });
    const res = await get(big.base, `/v1/jobs/${id}/result`, { authorization: `Bearer ${KEY_A}` });
    assert.equal(res.status, 302);
    const location = res.headers.get('location') as string;
    assert.match(location, new RegExp(`^/v1/jobs/${id}/results/first\\.pdf\\?exp=\\d+&sig=[A-Za-z0-9_-]{43}$`));
    const file = await get(big.base, location);
    assert.equal(file.status, 200);
    assert.equal(file.text, '%PDF-1.4 fake');
    assert.equal(file.headers.get('content-type'), 'application/pdf');
    problemOf(await call(big.base, `/v1/jobs/${id}/result`, { key: null }), 401);
    problemOf(await call(big.base, `/v1/jobs/${id}/result`, { key: KEY_B }), 404, 'NOT_FOUND');
    const none = await makeJob('tenantA', {}, 'failed');
    problemOf(await call(big.base, `/v1/jobs/${none}/result`), 404, 'NO_RESULT_FILE');
    const job = jobs.get(id);
    if (job) job.state = 'expired';
    problemOf(await call(big.base, `/v1/jobs/${id}/result`), 410, 'EXPIRED');
  });

  test('downloads are counted once per download (a GET from byte 0), not for HEAD or later ranges', async () => {
    const id = await makeJob('tenantA', { 'c.txt': 'counted' });
    const url = urlOf(id, 'c.txt');
    downloads.length = 0;
    await get(big.base, url);
    await get(big.base, url, { range: 'bytes=0-2' });
    await get(big.base, url, { range: 'bytes=3-' });
    await get(big.base, url, {}, 'HEAD');
    assert.deepEqual(downloads, [`${id}/c.txt`, `${id}/c.txt`]);
  });

  test('a 200 MB result streamed out: RSS grows by less than 96 MB', async () => {
    const size = 200 * MiB;
    const body = generated(size);
    const id = await makeJob('tenantA', { 'big.bin': body.stream });
    const expected = body.digest();
    const url = urlOf(id, 'big.bin');
    await get(big.base, url, { range: 'bytes=0-1048575' }); // warm up
    let received = 0;
    const hash = createHash('sha256');
    const growth = await rssGrowthDuring(async () => {
      const res = await fetch(`${big.base}${url}`);
      assert.equal(res.status, 200);
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        received += chunk.length;
        hash.update(chunk);
      }
    });
    assert.equal(received, size);
    assert.equal(hash.digest('hex'), expected);
    assert.ok(growth < STREAMING_RSS_BOUND, `RSS grew by ${(growth / MiB).toFixed(1)} MB while serving a 200 MB result`);
    console.log(`# 200 MB result download: RSS growth ${(growth / MiB).toFixed(1)} MB`);
    await blobs.deletePrefix(`results/${id}/`);
  });
});
