/**
 * Files and webhooks through the wired product paths: a real Longhaul instance (SQLite file), its worker
 * and sweeper, and the HTTP API built by buildServer with its default blob storage. Uploads go
 * in over POST /v1/uploads, handlers use ctx.uploads / ctx.results, snapshots carry signed
 * URLs that are downloaded over HTTP, results and uploads expire through the sweeper, and
 * webhooks are delivered by the internal delivery job to a local receiver that verifies each
 * request with the `standardwebhooks` package.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Webhook } from 'standardwebhooks';
import { resultFilePath } from '../../src/blobs/result-links.js';
import { FatalError } from '../../src/core/errors.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { buildServer } from '../../src/server/app.js';
import { csvImport } from '../../src/example-tasks/csv-import.js';
import { defineTask } from '../../src/task-api/define.js';
import { reportGenerate } from '../../src/example-tasks/report-generate.js';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import { INTERNAL_TENANT } from '../../src/webhooks/service.js';
import type { Resolver } from '../../src/webhooks/ssrf.js';
import { generateCsv } from '../fixtures/csv-generate.js';
import { scriptedReceiver } from '../support/webhook-receiver.js';

const MiB = 1024 * 1024;
const KEY_A = 'key-of-tenant-a-0123456789';
const KEY_B = 'key-of-tenant-b-0123456789';
const SERVER_SECRET = generateWebhookSecret();

let lateWrite: unknown = 'not attempted';

const tasks = [
  csvImport,
  reportGenerate,
  defineTask({ type: 't.ok', async run() {
    return { ok: true };
  } }),
  defineTask({ type: 't.fail', maxAttempts: 1, async run() {
    throw new FatalError('broken on purpose', { code: 'BROKEN' });
  } }),
  defineTask({ type: 't.slow', async run(_input, ctx) {
    await sleep(30_000, undefined, { signal: ctx.signal });
  } }),
  defineTask({
    type: 't.short-ttl',
    resultTtlMs: 2_500,
    async run(_input, ctx) {
      await ctx.results.write('out.txt', 'short-lived\n');
      return { written: true };
    },
  }),
  defineTask({
    type: 't.copy',
    async run(input, ctx) {
      const { uploadId } = input as { uploadId: string };
      const file = await ctx.results.write('copy.bin', await ctx.uploads.open(uploadId), { contentType: 'application/octet-stream' });
      return { size: file.size, sha256: file.sha256 };
    },
  }),
  defineTask({
    // Attempt 1 stops heartbeating and is reaped; its late write must be refused.
    type: 't.reaped',
    maxAttempts: 3,
    heartbeatIntervalMs: 60_000,
    heartbeatTimeoutMs: 300,
    async run(_input, ctx) {
      if (ctx.attempt === 1) {
        await ctx.results.write('early.txt', 'written while the lease was held');
        await sleep(1_500);
        try {
          await ctx.results.write('late.txt', 'written after the lease was lost');
          lateWrite = 'accepted';
        } catch (err) {
          lateWrite = err;
        }
        return { attempt: 1 };
      }
      await ctx.results.write('good.txt', 'attempt 2');
      return { attempt: ctx.attempt };
    },
  }),
];

// Hostnames the tests resolve: one private, one that changes its answer (DNS rebinding).
let rebindCalls = 0;
const resolve: Resolver = async (hostname) => {
  if (hostname === 'private.example.test') return [{ address: '10.1.2.3', family: 4 }];
  if (hostname === 'mixed.example.test') return [{ address: '93.184.216.34', family: 4 }, { address: '192.168.0.9', family: 4 }];
  if (hostname === 'rebind.example.test') return rebindCalls++ === 0 ? [{ address: '93.184.216.34', family: 4 }] : [{ address: '127.0.0.9', family: 4 }];
  const { systemResolver } = await import('../../src/webhooks/ssrf.js');
  return systemResolver(hostname);
};

let dir: string;
let lh: Longhaul;
let app: FastifyInstance;
let base: string;

async function api(path: string, init: { method?: string; body?: unknown; key?: string | null; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...init.headers };
  if (init.key !== null) headers.authorization = `Bearer ${init.key ?? KEY_A}`;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${base}${path}`, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers,
    redirect: 'manual',
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: res.headers, text, json: json as Record<string, unknown> & JobSnapshot };
}

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function finished(id: string, key = KEY_A): Promise<JobSnapshot> {
  return until(
    async () => {
      const r = await api(`/v1/jobs/${id}`, { key });
      return ['succeeded', 'failed', 'cancelled'].includes(r.json.status) ? r.json : undefined;
    },
    30_000,
    `job ${id} to finish`,
  );
}

async function submit(body: Record<string, unknown>, key = KEY_A): Promise<JobSnapshot> {
  const r = await api('/v1/jobs', { body, key });
  assert.equal(r.status, 202, r.text);
  return r.json;
}

function postStream(path: string, body: Readable, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolvePost, reject) => {
    const req = http.request(`${base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${KEY_A}`, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => resolvePost({ status: res.statusCode ?? 0, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    pipeline(body, req).catch(() => {});
  });
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'longhaul-files-webhooks-'));
  lh = await Longhaul.open({
    database: join(dir, 'test.db'),
    tasks,
    logger: pino({ level: 'silent' }),
    sweepIntervalMs: 50,
    webhooks: { secret: SERVER_SECRET, allowlist: '127.0.0.1', retrySchedule: [200, 200], timeoutMs: 2_000, resolve },
  });
  await lh.startWorker({ concurrency: 8, pollIntervalMs: 20, cancelPollMs: 50, progressIntervalMs: 50 });
  app = await buildServer({ lh, apiKeys: parseApiKeys(`A:${KEY_A},B:${KEY_B}`), logger: false });
  base = await app.listen({ port: 0, host: '127.0.0.1' });
});

after(async () => {
  await app?.close();
  await lh?.close({ drainMs: 0 });
  rmSync(dir, { recursive: true, force: true });
});

describe('uploads, ctx.results and signed result URLs (wired)', () => {
  test('csv.import over HTTP: upload, run, snapshot links both files, downloads with Range, 302 from /result, counted downloads', async () => {
    const path = join(dir, 'people.csv');
    const counts = await generateCsv(path, 3_000);
    const { createReadStream } = await import('node:fs');
    const up = await postStream('/v1/uploads', createReadStream(path), { 'content-type': 'text/csv' });
    assert.equal(up.status, 201, up.body);
    const upload = JSON.parse(up.body) as { id: string; size: number };
    assert.equal((await api(`/v1/uploads/${upload.id}`)).json.size, upload.size);
    assert.equal((await api(`/v1/uploads/${upload.id}`, { key: KEY_B })).status, 404, "another tenant's upload is not found");

    const job = await submit({ type: 'csv.import', input: { uploadId: upload.id } });
    assert.deepEqual(job.results, []);
    assert.equal(job.resultUrl, null);
    const done = await finished(job.id);
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    assert.equal((done.result as { rejected: number }).rejected, counts.rejected);
    assert.deepEqual(
      done.results.map((r) => [r.name, r.contentType]),
      [
        ['rejected.csv', 'text/csv; charset=utf-8'],
        ['summary.json', 'application/json'],
      ],
    );
    assert.equal(done.resultUrl, done.results[0]?.url);
    const url = new URL(done.resultUrl as string, base);
    assert.equal(url.pathname, resultFilePath(job.id, 'rejected.csv'));
    const exp = Number(url.searchParams.get('exp'));
    assert.ok(Math.abs(exp - (Date.now() / 1000 + 3600)) < 60, 'expires in about an hour');
    assert.match(url.searchParams.get('sig') ?? '', /^[A-Za-z0-9_-]{43}$/);

    // The signed URL needs no API key.
    const whole = await api(`${url.pathname}${url.search}`, { key: null });
    assert.equal(whole.status, 200);
    assert.match(whole.text, /^line,row,reason\r?\n/);
    assert.equal(Number(whole.headers.get('content-length')), done.results[0]?.size);
    const part = await api(`${url.pathname}${url.search}`, { key: null, headers: { range: 'bytes=0-3' } });
    assert.equal(part.status, 206);
    assert.equal(part.text, 'line');
    const rest = await api(`${url.pathname}${url.search}`, { key: null, headers: { range: 'bytes=4-' } });
    assert.equal(rest.status, 206);
    const summary = await api(new URL(done.results[1]?.url as string, base).pathname + new URL(done.results[1]?.url as string, base).search, { key: null });
    assert.equal(JSON.parse(summary.text).rows, counts.rows);

    // GET /result: 302 to a fresh signed URL of the first file.
    const redirect = await api(`/v1/jobs/${job.id}/result`);
    assert.equal(redirect.status, 302);
    const location = redirect.headers.get('location') as string;
    assert.match(location, new RegExp(`^${resultFilePath(job.id, 'rejected.csv')}\\?exp=\\d+&sig=`));
    assert.equal((await api(location, { key: null })).text, whole.text);
    assert.equal((await api(`/v1/jobs/${job.id}/result`, { key: KEY_B })).status, 404);

    // Downloads counted on the job: whole GET, range from 0, summary, redirect target (the later range is not).
    const again = await api(`/v1/jobs/${job.id}`);
    assert.equal(again.json.downloads, 4);

    // Tampered → 403; genuine but expired → 410.
    const sig = url.searchParams.get('sig') as string;
    const flipped = `${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`;
    const tampered = await api(`${url.pathname}?exp=${exp}&sig=${flipped}`, { key: null });
    assert.equal(tampered.status, 403);
    assert.equal(tampered.json.code, 'INVALID_SIGNATURE');
    assert.equal((await api(`${url.pathname}?exp=${exp + 1}&sig=${sig}`, { key: null })).status, 403, 'a changed expiry');
    assert.equal((await api(`${resultFilePath(job.id, 'summary.json')}?exp=${exp}&sig=${sig}`, { key: null })).status, 403, 'another path');
    const signer = await (await lh.files()).signer();
    const old = signer.sign(url.pathname, { now: Date.now() - 2 * 3_600_000 });
    const expired = await api(old, { key: null });
    assert.equal(expired.status, 410);
    assert.equal(expired.json.code, 'URL_EXPIRED');
  });

  test('report.generate (PDF) over HTTP: /result redirects to a real PDF', async () => {
    const job = await submit({ type: 'report.generate', input: { rows: 300, format: 'pdf' } });
    const done = await finished(job.id);
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    assert.deepEqual(
      done.results.map((r) => r.name),
      ['report.pdf'],
    );
    const res = await fetch(`${base}/v1/jobs/${job.id}/result`, { headers: { authorization: `Bearer ${KEY_A}` } });
    assert.equal(res.status, 200, 'fetch follows the redirect to the signed URL');
    const bytes = Buffer.from(await res.arrayBuffer());
    assert.equal(bytes.subarray(0, 5).toString(), '%PDF-');
    assert.equal(createHash('sha256').update(bytes).digest('hex'), (done.result as { sha256: string }).sha256);
  });

  test('after the result TTL the sweeper expires the job and deletes its files: job, result and URLs answer 410', async () => {
    const job = await submit({ type: 't.short-ttl' });
    const done = await finished(job.id);
    assert.equal(done.status, 'succeeded');
    const url = done.resultUrl as string;
    assert.equal((await api(url, { key: null })).status, 200);
    const { blobs } = await lh.files();
    const keys = async () => {
      const out: string[] = [];
      for await (const e of blobs.list(`results/${job.id}/`)) out.push(e.key);
      return out;
    };
    assert.equal((await keys()).length, 1);
    await until(async () => ((await lh.get(job.id))?.status === 'expired' ? true : undefined), 10_000, 'expiry');
    assert.deepEqual(await keys(), [], 'the blobs are deleted');
    assert.equal((await lh.store.listResults({ ids: [job.id] })).size, 0, 'and their records');
    const get = await api(`/v1/jobs/${job.id}`);
    assert.equal(get.status, 410);
    assert.equal(get.json.code, 'EXPIRED');
    assert.equal((await api(`/v1/jobs/${job.id}/result`)).status, 410);
    // Its URLs never outlive the job: the old one has expired with it; one signed afresh finds the job expired.
    assert.equal((await api(url, { key: null })).status, 410);
    const fresh = (await (await lh.files()).signer()).sign(new URL(url, base).pathname);
    const link = await api(fresh, { key: null });
    assert.equal(link.status, 410);
    assert.equal(link.json.code, 'EXPIRED');
  });

  test('ctx.results is fenced by the lease: a reaped attempt cannot record files; the new attempt can', async () => {
    lateWrite = 'not attempted';
    const job = await submit({ type: 't.reaped' });
    const done = await finished(job.id);
    // Generous: the late write's file is fsynced, which a busy disk can hold up for seconds.
    await until(async () => (lateWrite === 'not attempted' ? undefined : true), 30_000, 'the late write');
    assert.equal(done.status, 'succeeded');
    assert.equal(done.attempts, 2);
    assert.ok(lateWrite instanceof Error && lateWrite.name === 'LeaseLostError', `late write refused (${String(lateWrite)})`);
    const names = done.results.map((r) => r.name).sort();
    assert.deepEqual(names, ['early.txt', 'good.txt'], 'the late file was never recorded');
    const { blobs } = await lh.files();
    const keys: string[] = [];
    for await (const e of blobs.list(`results/${job.id}/`)) keys.push(e.key.split('/').at(-1) as string);
    assert.deepEqual(keys.sort(), ['early.txt', 'good.txt'], 'and its bytes were deleted');
  });

  test('200 MB: uploaded, copied by a handler with ctx.uploads → ctx.results, downloaded; RSS grows by less than 64 MB', async () => {
    // Warm up the code paths (and their pools) with a small file first, as the uploads test does.
    const warm = await postStream('/v1/uploads', Readable.from([Buffer.alloc(8 * MiB, 1)]));
    const warmJob = await finished((await submit({ type: 't.copy', input: { uploadId: JSON.parse(warm.body).id } })).id);
    await (await fetch(new URL(warmJob.resultUrl as string, base))).arrayBuffer();
    const size = 200 * MiB;
    const hash = createHash('sha256');
    let sent = 0;
    const body = new Readable({
      read() {
        if (sent >= size) return void this.push(null);
        const n = Math.min(64 * 1024, size - sent);
        const buf = Buffer.alloc(n, (sent / 65536) & 0xff);
        hash.update(buf);
        sent += n;
        this.push(buf);
      },
    });
    const start = process.memoryUsage().rss;
    let peak = start;
    const timer = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 5);
    let downloaded = '';
    let done: JobSnapshot;
    try {
      const up = await postStream('/v1/uploads', body, { 'content-type': 'application/octet-stream' });
      assert.equal(up.status, 201, up.body);
      const upload = JSON.parse(up.body) as { id: string; sha256: string };
      const digest = hash.digest('hex');
      assert.equal(upload.sha256, digest);
      const job = await submit({ type: 't.copy', input: { uploadId: upload.id } });
      done = await finished(job.id);
      assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
      const res = await fetch(new URL(done.resultUrl as string, base));
      assert.equal(res.status, 200);
      const h = createHash('sha256');
      let bytes = 0;
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        h.update(chunk);
        bytes += chunk.length;
      }
      assert.equal(bytes, size);
      downloaded = h.digest('hex');
      assert.equal(downloaded, digest);
    } finally {
      clearInterval(timer);
    }
    const growth = Math.max(peak, process.memoryUsage().rss) - start;
    console.log(`# 200 MB upload + copy + download: RSS growth ${(growth / MiB).toFixed(1)} MB`);
    assert.ok(growth < 64 * MiB, `RSS grew by ${(growth / MiB).toFixed(1)} MB`);
    const { blobs } = await lh.files();
    await blobs.deletePrefix(`results/${done.id}/`);
  });
});

// ---- webhooks ------------------------------------------------------------------------------------

async function deliveryJobs(jobId: string) {
  const { items } = await lh.list({ tenant: INTERNAL_TENANT, limit: 1000 });
  return items.filter((j) => (j.input as { jobId: string }).jobId === jobId);
}

async function deliveriesSettled(jobId: string) {
  return until(
    async () => {
      const jobs = await deliveryJobs(jobId);
      return jobs.length > 0 && jobs.every((j) => ['succeeded', 'failed'].includes(j.status)) ? jobs : undefined;
    },
    20_000,
    `webhook delivery of ${jobId}`,
  );
}

describe('webhooks (wired)', () => {
  test('a receiver failing twice with 500 then 200 gets exactly one successful delivery; every attempt verifies; the log shows three', async () => {
    const rx = await scriptedReceiver([500, 500, 200]);
    try {
      const job = await submit({ type: 't.ok', webhook: { url: rx.url } });
      assert.equal(JSON.stringify(job).includes('whsec_'), false);
      await finished(job.id);
      const [delivery] = await deliveriesSettled(job.id);
      assert.equal(delivery?.status, 'succeeded');
      await sleep(600); // nothing more arrives
      assert.deepEqual(
        rx.answered,
        [500, 500, 200],
      );
      const wh = new Webhook(SERVER_SECRET);
      for (const r of rx.received) {
        const event = wh.verify(r.body, r.headers as Record<string, string>) as { type: string; timestamp: string; data: JobSnapshot };
        assert.equal(event.type, 'job.succeeded');
        assert.equal(event.data.id, job.id);
        assert.equal(event.data.status, 'succeeded');
        assert.equal(r.headers['webhook-id'], delivery?.id, 'one message id for every attempt');
      }
      assert.equal(new Set(rx.received.map((r) => r.headers['webhook-id'])).size, 1);
      const log = await api(`/v1/jobs/${job.id}/webhooks`);
      assert.equal(log.status, 200);
      const items = (log.json as unknown as { items: { attempt: number; status: number; ok: boolean; event: string; url: string }[] }).items;
      assert.deepEqual(
        items.map((i) => [i.attempt, i.status, i.ok, i.event]),
        [
          [1, 500, false, 'job.succeeded'],
          [2, 500, false, 'job.succeeded'],
          [3, 200, true, 'job.succeeded'],
        ],
      );
      assert.equal((await api(`/v1/jobs/${job.id}/webhooks`, { key: KEY_B })).status, 404);
      // Secrets never appear in snapshots, the delivery log or the delivery job.
      const everything = JSON.stringify([log.json, await api(`/v1/jobs/${job.id}`), await deliveryJobs(job.id)]);
      assert.equal(everything.includes(SERVER_SECRET.slice(6, 30)), false);
      // Internal jobs are not in the tenant's list or stats.
      const list = await api('/v1/jobs?limit=1000');
      assert.equal((list.json as unknown as { items: JobSnapshot[] }).items.some((j) => j.type === 'longhaul.webhook'), false);
    } finally {
      await rx.close();
    }
  });

  test('library submit with its own secret; failed and cancelled jobs notify too', async () => {
    const rx = await scriptedReceiver([204]);
    const secret = generateWebhookSecret();
    try {
      const failed = await lh.submit('t.fail', null, { tenant: 'A', webhook: { url: rx.url, secret } });
      const slow = await lh.submit('t.slow', null, { tenant: 'A', webhook: { url: rx.url, secret } });
      await until(async () => ((await lh.get(slow.id))?.status === 'running' ? true : undefined), 10_000, 'slow running');
      await lh.cancel(slow.id);
      await deliveriesSettled(failed.id);
      await deliveriesSettled(slow.id);
      const wh = new Webhook(secret);
      const events = rx.received.map((r) => wh.verify(r.body, r.headers as Record<string, string>) as { type: string; data: JobSnapshot });
      assert.deepEqual(events.map((e) => `${e.type}:${e.data.id}`).sort(), [`job.cancelled:${slow.id}`, `job.failed:${failed.id}`].sort());
      assert.equal(events.find((e) => e.type === 'job.failed')?.data.error?.code, 'BROKEN');
      assert.throws(() => new Webhook(SERVER_SECRET).verify(rx.received[0]?.body as string, rx.received[0]?.headers as Record<string, string>));
    } finally {
      await rx.close();
    }
  });

  test('410 from the receiver stops the retries after one attempt', async () => {
    const rx = await scriptedReceiver([410]);
    try {
      const job = await submit({ type: 't.ok', webhook: { url: rx.url } });
      const [delivery] = await deliveriesSettled(job.id);
      assert.equal(delivery?.status, 'failed');
      assert.equal(delivery?.error?.code, 'WEBHOOK_GONE');
      await sleep(500);
      assert.equal(rx.received.length, 1);
    } finally {
      await rx.close();
    }
  });

  test('SSRF guard at submission: every refused form is 422 over HTTP; the allow-listed address is accepted', async () => {
    const refused = [
      'http://127.0.0.2/',
      'http://[::ffff:7f00:2]/',
      'http://10.0.0.1/',
      'http://172.16.5.4/',
      'http://192.168.1.1/',
      'http://100.64.0.1/',
      'http://169.254.1.1/',
      'http://169.254.169.254/latest/meta-data',
      'http://metadata.google.internal/',
      'http://224.0.0.1/',
      'http://0.0.0.0/',
      'http://255.255.255.255/',
      'http://2130706434/',
      'http://0x7f.2/',
      'http://[::1]/',
      'http://[::]/',
      'http://[fe80::1]/',
      'http://[fc00::1]/',
      'http://[ff02::1]/',
      'http://[::ffff:127.0.0.2]/',
      'http://[::ffff:a00:1]/',
      'http://[64:ff9b::a00:1]/',
      'http://[2002:c0a8:101::1]/',
      'http://private.example.test/',
      'http://mixed.example.test/',
      'ftp://93.184.216.34/',
      'file:///etc/passwd',
    ];
    for (const url of refused) {
      const r = await api('/v1/jobs', { body: { type: 't.ok', webhook: { url } } });
      assert.equal(r.status, 422, `${url}: ${r.text}`);
      assert.equal(r.json.code, 'WEBHOOK_URL_REFUSED', url);
      assert.match(r.headers.get('content-type') ?? '', /application\/problem\+json/);
    }
    // The allow-list (127.0.0.1) admits that address, in IPv4-mapped form too.
    assert.equal((await api('/v1/jobs', { body: { type: 't.ok', webhook: { url: 'http://127.0.0.1:9/x' } } })).status, 202);
    assert.equal((await api('/v1/jobs', { body: { type: 't.ok', webhook: { url: 'http://[::ffff:127.0.0.1]:9/x' } } })).status, 202);
    // Bad shapes are 400.
    for (const webhook of [{ url: 'http://127.0.0.1/', secret: 'nope' }, { url: '' }, { url: 'http://127.0.0.1/', extra: 1 }, 'http://127.0.0.1/']) {
      const r = await api('/v1/jobs', { body: { type: 't.ok', webhook } });
      assert.equal(r.status, 400, `${JSON.stringify(webhook)}: ${r.text}`);
      assert.equal(r.text.includes('nope'), false, 'the secret is not echoed');
    }
    // Library: the same typed refusal.
    await assert.rejects(lh.submit('t.ok', null, { webhook: { url: 'http://10.0.0.1/' } }), (err: Error & { status?: number }) => err.status === 422);
  });

  test('the delivery task type and the internal tenant are reserved', async () => {
    await assert.rejects(
      Longhaul.open({ database: ':memory:', tasks: [defineTask({ type: 'longhaul.webhook', run: () => null })], logger: pino({ level: 'silent' }) }),
      /reserved/,
    );
    assert.throws(() => lh.register(defineTask({ type: 'longhaul.webhook', run: () => null })), /reserved/);
    await assert.rejects(lh.submit('t.ok', null, { tenant: INTERNAL_TENANT }), (err: Error & { status?: number }) => err.status === 400);
    const r = await api('/v1/jobs', { body: { type: 'longhaul.webhook', input: { jobId: 'x' } } });
    assert.equal(r.status, 422);
    assert.equal(r.json.code, 'UNKNOWN_TASK');
  });

  test('checked again at delivery: a host that now resolves to a refused address is never contacted', async () => {
    rebindCalls = 0;
    const job = await submit({ type: 't.ok', webhook: { url: 'http://rebind.example.test:9/hook' } });
    const [delivery] = await deliveriesSettled(job.id);
    assert.equal(delivery?.status, 'failed');
    assert.equal(delivery?.error?.code, 'WEBHOOK_URL_REFUSED');
    const log = (await api(`/v1/jobs/${job.id}/webhooks`)).json as unknown as { items: { status: number | null; error: string }[] };
    assert.equal(log.items.length, 1);
    assert.equal(log.items[0]?.status, null);
    assert.match(log.items[0]?.error ?? '', /refused: .*loopback/);
  });
});

describe('uploads expire (wired)', () => {
  test('the sweeper deletes expired uploads: 410, bytes gone; submission without any secret is 422', async () => {
    const dir2 = mkdtempSync(join(tmpdir(), 'longhaul-upload-expiry-'));
    const lh2 = await Longhaul.open({
      database: join(dir2, 'x.db'),
      tasks: [tasks[2] as (typeof tasks)[number]],
      logger: pino({ level: 'silent' }),
      sweepIntervalMs: 50,
      files: { uploadLimits: { uploadTtlMs: 1_000 } },
      webhooks: { secret: null, allowlist: '127.0.0.1' },
    });
    lh2.startSweeper();
    const app2 = await buildServer({ lh: lh2, logger: false });
    const base2 = await app2.listen({ port: 0, host: '127.0.0.1' });
    try {
      const up = await fetch(`${base2}/v1/uploads`, { method: 'POST', body: 'hello', headers: { 'content-type': 'text/plain' } });
      assert.equal(up.status, 201);
      const { id } = (await up.json()) as { id: string };
      assert.equal((await fetch(`${base2}/v1/uploads/${id}`)).status, 200);
      const { blobs } = await lh2.files();
      assert.ok(await blobs.stat(`uploads/${id}/data`));
      await until(async () => ((await blobs.stat(`uploads/${id}/data`)) === null ? true : undefined), 10_000, 'the upload bytes to be deleted');
      const gone = await fetch(`${base2}/v1/uploads/${id}`);
      assert.equal(gone.status, 410);
      const noSecret = await fetch(`${base2}/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ type: 't.ok', webhook: { url: 'http://127.0.0.1:9/' } }),
      });
      assert.equal(noSecret.status, 422);
      assert.equal(((await noSecret.json()) as { code: string }).code, 'WEBHOOK_SECRET_MISSING');
    } finally {
      await app2.close();
      await lh2.close();
      rmSync(dir2, { recursive: true, force: true });
    }
  });
});
