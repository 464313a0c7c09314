/**
 * The client SDK (src/client): the streaming SSE parser, and the client against a small fake
 * HTTP server implementing just enough of docs/api.md — submit (202, Location, Retry-After,
 * idempotent replay), problems, reads with Retry-After, lists with cursors, SSE that drops
 * mid-stream (resume with Last-Event-ID), drops three times (fallback to polling), and 204.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import {
  LonghaulApiError,
  LonghaulClient,
  type LonghaulClientOptions,
  LonghaulTimeoutError,
  parseRetryAfter,
  parseSse,
  readSse,
  type SseItem,
  SseParser,
} from '../../src/client/index.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { isTerminal, type JobState } from '../../src/core/states.js';

// ---- SSE parser -------------------------------------------------------------------------------

const enc = new TextEncoder();

function eventsOf(items: SseItem[]) {
  return items.filter((i) => i.kind === 'event');
}

/** Parses `bytes` delivered as chunks cut at the given offsets. */
function parseSplit(bytes: Uint8Array, cuts: number[]): SseItem[] {
  const parser = new SseParser();
  const out: SseItem[] = [];
  let start = 0;
  for (const cut of [...cuts, bytes.length]) {
    out.push(...parser.push(bytes.subarray(start, cut)));
    start = cut;
  }
  out.push(...parser.end());
  return out;
}

const FIXTURE =
  '\uFEFFretry: 1500\n: hello wörld\nid: 1\nevent: status\ndata: {"a":"日本語 😀"}\ndata: second ü\r\n\r\n' +
  'id: 2\r\ndata: ∑ line\rdata: x\r\r: c\n\ndata: tail\n\ndata: unterminated';

const FIXTURE_ITEMS: SseItem[] = [
  { kind: 'retry', ms: 1500 },
  { kind: 'comment', text: 'hello wörld' },
  { kind: 'event', event: 'status', data: '{"a":"日本語 😀"}\nsecond ü', id: '1' },
  { kind: 'event', event: 'message', data: '∑ line\nx', id: '2' },
  { kind: 'comment', text: 'c' },
  { kind: 'event', event: 'message', data: 'tail', id: '2' },
];

describe('SSE parser', () => {
  it('parses id, event and data; the id persists; the default event is message', () => {
    const items = parseSse('id: 7\nevent: status\ndata: {"x":1}\n\ndata: next\n\nid\ndata: reset\n\n');
    assert.deepEqual(items, [
      { kind: 'event', event: 'status', data: '{"x":1}', id: '7' },
      { kind: 'event', event: 'message', data: 'next', id: '7' },
      { kind: 'event', event: 'message', data: 'reset', id: '' },
    ]);
  });

  it('joins multi-line data with \\n and strips exactly one space after the colon', () => {
    const items = eventsOf(parseSse('data: a\ndata:b\ndata:  c\ndata\ndata:\n\n'));
    assert.equal(items.length, 1);
    assert.equal(items[0]?.data, 'a\nb\n c\n\n');
  });

  it('accepts CRLF, CR and LF line endings, mixed', () => {
    const items = eventsOf(parseSse('data: one\r\ndata: two\rdata: three\n\r\nevent: e\rdata: 2\r\r'));
    assert.deepEqual(
      items.map((e) => [e.event, e.data]),
      [
        ['message', 'one\ntwo\nthree'],
        ['e', '2'],
      ],
    );
  });

  it('treats a CRLF split across chunks as one line ending', () => {
    const p = new SseParser();
    const out = [...p.push('data: a\r'), ...p.push('\ndata: b\r'), ...p.push('\n\r'), ...p.push('\n')];
    assert.deepEqual(eventsOf(out), [{ kind: 'event', event: 'message', data: 'a\nb', id: '' }]);
  });

  it('reports comments and valid retry hints, ignores invalid ones and unknown fields', () => {
    const p = new SseParser();
    const items = p.push(': keepalive\n:no-space\nretry: 1.5\nretry: abc\nfoo: bar\nretry: 250\n\n');
    assert.deepEqual(items, [
      { kind: 'comment', text: 'keepalive' },
      { kind: 'comment', text: 'no-space' },
      { kind: 'retry', ms: 250 },
    ]);
    assert.equal(p.retryMs, 250);
  });

  it('dispatches nothing for a frame without data, and resets its event name', () => {
    assert.deepEqual(eventsOf(parseSse('event: status\nid: 3\n\ndata: x\n\n')), [{ kind: 'event', event: 'message', data: 'x', id: '3' }]);
  });

  it('ignores an id containing NUL and starts from a given last event id', () => {
    const p = new SseParser('41');
    assert.deepEqual(eventsOf(p.push('id: a\0b\ndata: x\n\n')), [{ kind: 'event', event: 'message', data: 'x', id: '41' }]);
    assert.equal(p.lastEventId, '41');
  });

  it('strips one leading BOM only, and discards an unterminated frame at the end', () => {
    assert.deepEqual(eventsOf(parseSse('\uFEFFdata: a\n\ndata: b\n')), [{ kind: 'event', event: 'message', data: 'a', id: '' }]);
    // A second BOM is not a BOM: it makes the line's field name "\uFEFFdata", an unknown field.
    assert.deepEqual(eventsOf(parseSse(enc.encode('\uFEFF\uFEFFdata: a\n\n'))), []);
  });

  it('gives the same items whatever the byte boundaries of the chunks (frames and UTF-8 split anywhere)', () => {
    const bytes = enc.encode(FIXTURE);
    assert.deepEqual(parseSse(bytes), FIXTURE_ITEMS);
    assert.deepEqual(parseSse(FIXTURE), FIXTURE_ITEMS);
    // One byte at a time.
    assert.deepEqual(
      parseSplit(
        bytes,
        Array.from({ length: bytes.length - 1 }, (_, i) => i + 1),
      ),
      FIXTURE_ITEMS,
    );
    // Every pair of cut points.
    for (let i = 0; i <= bytes.length; i++) {
      for (let j = i; j <= bytes.length; j++) assert.deepEqual(parseSplit(bytes, [i, j]), FIXTURE_ITEMS, `cuts at ${i}, ${j}`);
    }
  });

  it('decodes a multibyte character split across chunks', () => {
    const bytes = enc.encode('data: 😀é\n\n');
    const emoji = 'data: '.length; // 4 bytes of 😀, then 2 of é
    for (const cuts of [[emoji + 1], [emoji + 2], [emoji + 3], [emoji + 1, emoji + 2, emoji + 3, emoji + 5]]) {
      assert.deepEqual(eventsOf(parseSplit(bytes, cuts)), [{ kind: 'event', event: 'message', data: '😀é', id: '' }]);
    }
  });

  it('readSse reads a ReadableStream of bytes', async () => {
    const chunks = [enc.encode('retry: 10\n\nid: 1\nda'), enc.encode('ta: {"ok":'), enc.encode('true}\n\n: bye\n')];
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const c of chunks) controller.enqueue(c);
        controller.close();
      },
    });
    const items: SseItem[] = [];
    for await (const item of readSse(body)) items.push(item);
    assert.deepEqual(items, [
      { kind: 'retry', ms: 10 },
      { kind: 'event', event: 'message', data: '{"ok":true}', id: '1' },
      { kind: 'comment', text: 'bye' },
    ]);
  });
});

// ---- a fake API server ------------------------------------------------------------------------

interface Req {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  body: string;
}
type Handler = (req: Req, res: ServerResponse, raw: IncomingMessage) => void | Promise<void>;

interface Fake {
  url: string;
  requests: Req[];
  close(): Promise<void>;
}

async function serve(handler: Handler): Promise<Fake> {
  const requests: Req[] = [];
  const server = createServer((raw, res) => {
    let body = '';
    raw.setEncoding('utf8');
    raw.on('data', (c: string) => {
      body += c;
    });
    raw.on('end', () => {
      const u = new URL(raw.url ?? '/', 'http://fake');
      const req: Req = { method: raw.method ?? 'GET', path: u.pathname, query: u.searchParams, headers: raw.headers, body };
      requests.push(req);
      Promise.resolve(handler(req, res, raw)).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(err));
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function withServer(handler: Handler, body: (fake: Fake) => Promise<void>): Promise<void> {
  const fake = await serve(handler);
  try {
    await body(fake);
  } finally {
    await fake.close();
  }
}

function client(fake: Fake, extra: Partial<LonghaulClientOptions> = {}): LonghaulClient {
  return new LonghaulClient({ baseUrl: fake.url, apiKey: 'secret-key', polling: { initialMs: 10, minMs: 5 }, ...extra });
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers });
  res.end(JSON.stringify(body));
}

function problem(
  res: ServerResponse,
  status: number,
  code: string,
  detail: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/problem+json', ...headers });
  res.end(JSON.stringify({ type: `urn:longhaul:problem:${code.toLowerCase()}`, title: 'Problem', status, detail, code, ...extra }));
}

const T0 = Date.UTC(2026, 10, 22, 11, 0, 0);

/** A snapshot whose change sequence (the SSE id) is T0 + seq. */
function snap(id: string, status: JobState, seq: number, extra: Partial<JobSnapshot> = {}): JobSnapshot {
  const at = new Date(T0 + seq).toISOString();
  const self = `/v1/jobs/${id}`;
  return {
    id,
    type: 'demo.sleep',
    status,
    priority: 'normal',
    input: null,
    metadata: null,
    progress: { percent: status === 'succeeded' ? 100 : null, stage: null, itemsDone: null, itemsTotal: null, message: null, eta: null, updatedAt: at },
    result: null,
    resultUrl: null,
    results: [],
    downloads: 0,
    error: null,
    lastError: null,
    attempts: status === 'queued' || status === 'pending' ? 0 : 1,
    maxAttempts: 3,
    cancelRequested: false,
    stalled: false,
    parentId: null,
    waitingFor: null,
    children: null,
    createdAt: new Date(T0).toISOString(),
    startedAt: null,
    finishedAt: isTerminal(status) ? at : null,
    updatedAt: at,
    runAt: new Date(T0).toISOString(),
    expiresAt: null,
    links: { self, events: `${self}/events`, cancel: `${self}/cancel` },
    ...extra,
  };
}

function withPercent(job: JobSnapshot, percent: number): JobSnapshot {
  return { ...job, progress: { ...job.progress, percent } };
}

function frame(job: JobSnapshot, event: 'status' | 'progress' = 'status'): string {
  return `id: ${Date.parse(job.updatedAt)}\nevent: ${event}\ndata: ${JSON.stringify(job)}\n\n`;
}

function sseHead(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store' });
}

/** Writes, then kills the connection once the bytes are out (a dropped stream, not a clean end). */
function writeThenDrop(res: ServerResponse, chunk: string): void {
  res.write(chunk, () => setTimeout(() => res.socket?.destroy(), 5));
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A stateful fake of the job routes of docs/api.md. */
function fakeApi() {
  const jobs = new Map<string, JobSnapshot>();
  const order: string[] = [];
  const keys = new Map<string, { body: string; id: string }>();
  let n = 0;
  const add = (job: JobSnapshot) => {
    jobs.set(job.id, job);
    order.unshift(job.id);
    return job;
  };
  const handler: Handler = (req, res) => {
    const [, v1, coll, id, action] = req.path.split('/');
    if (v1 !== 'v1') return problem(res, 404, 'NOT_FOUND', 'no route');
    if (coll === 'jobs' && id === undefined && req.method === 'POST') {
      let body: { type?: unknown; input?: { steps?: unknown }; priority?: JobSnapshot['priority']; metadata?: Record<string, unknown> };
      try {
        body = JSON.parse(req.body);
      } catch {
        return problem(res, 400, 'MALFORMED_JSON', 'bad json');
      }
      if (typeof body.type !== 'string') return problem(res, 400, 'INVALID_REQUEST', 'type is required');
      if (body.type === 'queue.full') return problem(res, 503, 'QUEUE_FULL', 'the queue is full', {}, { 'Retry-After': '7' });
      if (typeof body.input?.steps === 'number' && body.input.steps < 1) {
        return problem(res, 422, 'INVALID_INPUT', 'input for "demo.sleep" is invalid: steps: must be >= 1', {
          title: 'Unprocessable Content',
          errors: [{ path: 'steps', message: 'must be >= 1' }],
        });
      }
      const key = req.headers['idempotency-key'];
      if (typeof key === 'string') {
        const prior = keys.get(key);
        if (prior && prior.body !== req.body) return problem(res, 422, 'IDEMPOTENCY_KEY_REUSED', 'the key was used with another body');
        if (prior) return json(res, 200, jobs.get(prior.id), { 'Idempotent-Replayed': 'true', Location: `/v1/jobs/${prior.id}` });
      }
      const job = add(
        snap(`job-${++n}`, 'queued', n, { type: body.type, input: body.input ?? null, priority: body.priority ?? 'normal', metadata: body.metadata ?? null }),
      );
      if (typeof key === 'string') keys.set(key, { body: req.body, id: job.id });
      return json(res, 202, job, { Location: `/v1/jobs/${job.id}`, 'Retry-After': '1' });
    }
    if (coll === 'jobs' && id === undefined && req.method === 'GET') {
      const statuses = req.query.get('status')?.split(',');
      const limit = Number(req.query.get('limit') ?? 50);
      const start = Number(req.query.get('cursor') ?? 0);
      const all = order.map((i) => jobs.get(i) as JobSnapshot).filter((j) => !statuses || statuses.includes(j.status));
      const items = all.slice(start, start + limit);
      return json(res, 200, { items, nextCursor: start + limit < all.length ? String(start + limit) : null });
    }
    if (coll === 'stats') return json(res, 200, { counts: { queued: order.length }, rates: { submittedPerMinute: 1, finishedPerMinute: 0 }, durations: {} });
    if (coll === 'stream-tokens' && req.method === 'POST') return json(res, 201, { token: `tok:${req.body}`, expiresAt: new Date(T0).toISOString() });
    if (coll !== 'jobs' || id === undefined) return problem(res, 404, 'NOT_FOUND', 'no route');
    const job = jobs.get(decodeURIComponent(id));
    if (!job) return problem(res, 404, 'JOB_NOT_FOUND', `job ${id} not found`);
    if (action === undefined && req.method === 'GET') {
      return json(res, 200, job, isTerminal(job.status) ? { 'Cache-Control': 'no-store' } : { 'Cache-Control': 'no-store', 'Retry-After': '1' });
    }
    if (action === 'cancel' && req.method === 'POST') {
      if (isTerminal(job.status)) return problem(res, 409, 'JOB_TERMINAL', 'already terminal');
      const next = snap(job.id, 'cancelled', 100 + n);
      jobs.set(job.id, next);
      return json(res, 202, next);
    }
    if (action === 'retry' && req.method === 'POST') {
      if (job.status !== 'failed' && job.status !== 'cancelled') return problem(res, 409, 'NOT_RETRYABLE', `job is ${job.status}`);
      const next = snap(job.id, 'queued', 200 + n);
      jobs.set(job.id, next);
      return json(res, 202, next);
    }
    if (action === 'transitions') {
      return json(res, 200, { items: [{ from: null, to: 'queued', at: job.createdAt, reason: 'submitted', attempt: 0, workerId: null }] });
    }
    return problem(res, 404, 'NOT_FOUND', 'no route');
  };
  return { handler, jobs, add };
}

// ---- plain requests ---------------------------------------------------------------------------

describe('client requests', () => {
  it('submits: 202 with Location and Retry-After; body, headers and Idempotency-Key as documented', async () => {
    const api = fakeApi();
    await withServer(api.handler, async (fake) => {
      const c = client(fake, { headers: { 'x-trace': 'abc' } });
      const runAt = new Date(T0 + 60_000);
      const r = await c.submitDetailed(
        'demo.sleep',
        { steps: 3 },
        { priority: 'high', runAt, delayMs: 5, maxAttempts: 2, timeoutMs: 1000, metadata: { who: 'me' }, idempotencyKey: 'k1' },
      );
      assert.equal(r.job.status, 'queued');
      assert.equal(r.job.priority, 'high');
      assert.equal(r.replayed, false);
      assert.equal(r.retryAfterMs, 1000);
      assert.equal(r.location, `/v1/jobs/${r.job.id}`);
      const req = fake.requests[0] as Req;
      assert.equal(req.method, 'POST');
      assert.equal(req.path, '/v1/jobs');
      assert.equal(req.headers.authorization, 'Bearer secret-key');
      assert.equal(req.headers['idempotency-key'], 'k1');
      assert.equal(req.headers['x-trace'], 'abc');
      assert.match(String(req.headers['content-type']), /^application\/json/);
      assert.deepEqual(JSON.parse(req.body), {
        type: 'demo.sleep',
        input: { steps: 3 },
        priority: 'high',
        runAt: runAt.toISOString(),
        delayMs: 5,
        maxAttempts: 2,
        timeoutMs: 1000,
        metadata: { who: 'me' },
      });
      // submit() resolves to the snapshot itself; no input means no `input` key.
      const job = await c.submit('demo.sleep');
      assert.equal(job.type, 'demo.sleep');
      assert.deepEqual(JSON.parse((fake.requests[1] as Req).body), { type: 'demo.sleep' });
    });
  });

  it('reports an idempotent replay (200 + Idempotent-Replayed) and a reused key with another body (422)', async () => {
    const api = fakeApi();
    await withServer(api.handler, async (fake) => {
      const c = client(fake);
      const first = await c.submitDetailed('demo.sleep', { steps: 2 }, { idempotencyKey: 'same' });
      const again = await c.submitDetailed('demo.sleep', { steps: 2 }, { idempotencyKey: 'same' });
      assert.equal(first.replayed, false);
      assert.equal(again.replayed, true);
      assert.equal(again.job.id, first.job.id);
      await assert.rejects(c.submit('demo.sleep', { steps: 9 }, { idempotencyKey: 'same' }), (err: unknown) => {
        assert.ok(err instanceof LonghaulApiError);
        assert.equal(err.status, 422);
        assert.equal(err.code, 'IDEMPOTENCY_KEY_REUSED');
        return true;
      });
    });
  });

  it('throws LonghaulApiError with the fields of a 422 problem', async () => {
    await withServer(fakeApi().handler, async (fake) => {
      const err = await client(fake)
        .submit('demo.sleep', { steps: 0 })
        .then(
          () => assert.fail('should reject'),
          (e: unknown) => e,
        );
      assert.ok(err instanceof LonghaulApiError);
      assert.equal(err.status, 422);
      assert.equal(err.code, 'INVALID_INPUT');
      assert.equal(err.title, 'Unprocessable Content');
      assert.equal(err.type, 'urn:longhaul:problem:invalid_input');
      assert.equal(err.detail, 'input for "demo.sleep" is invalid: steps: must be >= 1');
      assert.deepEqual(err.errors, [{ path: 'steps', message: 'must be >= 1' }]);
      assert.equal(err.retryAfterMs, null);
      assert.equal(err.method, 'POST');
      assert.match(err.message, /422 INVALID_INPUT/);
    });
  });

  it('tolerates non-JSON error bodies and reads Retry-After of a 503', async () => {
    const api = fakeApi();
    await withServer(
      (req, res) => {
        if (req.path === '/v1/jobs/html') {
          res.writeHead(502, { 'content-type': 'text/html' });
          res.end('<html>Bad Gateway</html>');
          return;
        }
        return api.handler(req, res, undefined as unknown as IncomingMessage);
      },
      async (fake) => {
        const c = client(fake);
        const e1 = await c.get('html').catch((e: unknown) => e);
        assert.ok(e1 instanceof LonghaulApiError);
        assert.equal(e1.status, 502);
        assert.equal(e1.code, null);
        assert.equal(e1.detail, null);
        assert.deepEqual(e1.errors, []);
        assert.equal(e1.body, '<html>Bad Gateway</html>');
        const e2 = await c.submit('queue.full').catch((e: unknown) => e);
        assert.ok(e2 instanceof LonghaulApiError);
        assert.equal(e2.status, 503);
        assert.equal(e2.code, 'QUEUE_FULL');
        assert.equal(e2.retryAfterMs, 7000);
      },
    );
  });

  it('lets network errors through as they are', async () => {
    const fake = await serve(() => undefined);
    await fake.close(); // nothing listens on that port any more
    const err = await client(fake)
      .get('x')
      .catch((e: unknown) => e);
    assert.ok(err instanceof TypeError, `got ${String(err)}`);
    assert.ok(!(err instanceof LonghaulApiError));
  });

  it('get / getDetailed: the snapshot and Retry-After while not terminal', async () => {
    const api = fakeApi();
    api.add(snap('run-1', 'running', 5));
    api.add(snap('done-1', 'succeeded', 6));
    await withServer(api.handler, async (fake) => {
      const c = client(fake);
      assert.equal((await c.get('run-1')).status, 'running');
      assert.equal((await c.getDetailed('run-1')).retryAfterMs, 1000);
      assert.equal((await c.getDetailed('done-1')).retryAfterMs, null);
      const e = await c.get('nope').catch((x: unknown) => x);
      assert.ok(e instanceof LonghaulApiError && e.status === 404 && e.code === 'JOB_NOT_FOUND');
    });
  });

  it('list filters, and listAll follows cursors', async () => {
    const api = fakeApi();
    for (let i = 1; i <= 5; i++) api.add(snap(`j${i}`, i % 2 ? 'queued' : 'running', i));
    api.add(snap('j6', 'failed', 6));
    await withServer(api.handler, async (fake) => {
      const c = client(fake);
      const page = await c.list({ status: ['queued', 'running'], type: 'demo.sleep', limit: 2 });
      assert.deepEqual(
        page.items.map((j) => j.id),
        ['j5', 'j4'],
      );
      assert.equal(page.nextCursor, '2');
      const q = (fake.requests[0] as Req).query;
      assert.equal(q.get('status'), 'queued,running');
      assert.equal(q.get('type'), 'demo.sleep');
      assert.equal(q.get('limit'), '2');
      const one = await c.list({ status: 'failed' });
      assert.deepEqual(
        one.items.map((j) => j.id),
        ['j6'],
      );
      assert.equal(one.nextCursor, null);

      const before = fake.requests.length;
      const ids: string[] = [];
      for await (const j of c.listAll({ status: ['queued', 'running'], limit: 2 })) ids.push(j.id);
      assert.deepEqual(ids, ['j5', 'j4', 'j3', 'j2', 'j1']);
      const pages = fake.requests.slice(before);
      assert.deepEqual(
        pages.map((r) => r.query.get('cursor')),
        [null, '2', '4'],
      );
    });
  });

  it('cancel, retry, transitions, stats and streamToken', async () => {
    const api = fakeApi();
    api.add(snap('c1', 'queued', 1));
    await withServer(api.handler, async (fake) => {
      const c = client(fake);
      assert.equal((await c.cancel('c1')).status, 'cancelled');
      const conflict = await c.cancel('c1').catch((e: unknown) => e);
      assert.ok(conflict instanceof LonghaulApiError && conflict.status === 409);
      assert.equal((await c.retry('c1')).status, 'queued');
      const log = await c.transitions('c1');
      assert.deepEqual(log[0], { from: null, to: 'queued', at: new Date(T0).toISOString(), reason: 'submitted', attempt: 0, workerId: null });
      const stats = await c.stats();
      assert.equal(stats.counts.queued, 1);
      assert.equal(stats.rates.submittedPerMinute, 1);
      const tok = await c.streamToken({ jobs: ['c1'], ttlSeconds: 60 });
      assert.equal(tok.token, 'tok:{"jobs":["c1"],"ttlSeconds":60}');
      assert.deepEqual(
        fake.requests.map((r) => `${r.method} ${r.path}`),
        [
          'POST /v1/jobs/c1/cancel',
          'POST /v1/jobs/c1/cancel',
          'POST /v1/jobs/c1/retry',
          'GET /v1/jobs/c1/transitions',
          'GET /v1/stats',
          'POST /v1/stream-tokens',
        ],
      );
    });
  });

  it('keeps a base path, encodes ids, and uses a custom fetch', async () => {
    const api = fakeApi();
    api.add(snap('a/b', 'queued', 1));
    await withServer(
      (req, res, raw) => {
        req.path = req.path.replace(/^\/prefix/, '');
        return api.handler(req, res, raw);
      },
      async (fake) => {
        const seen: string[] = [];
        const c = new LonghaulClient({
          baseUrl: `${fake.url}/prefix/`,
          fetch: (input, init) => {
            seen.push(input);
            return fetch(input, init);
          },
        });
        assert.equal((await c.get('a/b')).id, 'a/b');
        assert.deepEqual(seen, [`${fake.url}/prefix/v1/jobs/a%2Fb`]);
        assert.equal((fake.requests[0] as Req).headers.authorization, undefined);
      },
    );
  });

  it('parseRetryAfter reads seconds and HTTP dates', () => {
    assert.equal(parseRetryAfter('3'), 3000);
    assert.equal(parseRetryAfter(' 0 '), 0);
    assert.equal(parseRetryAfter(new Date(T0 + 5000).toUTCString(), T0), 5000);
    assert.equal(parseRetryAfter(new Date(T0 - 5000).toUTCString(), T0), 0);
    assert.equal(parseRetryAfter('soon'), null);
    assert.equal(parseRetryAfter(null), null);
  });
});

// ---- wait() -----------------------------------------------------------------------------------

/** A GET handler that answers from a script, one entry per read (the last one repeats). */
function scriptedGet(script: { job: JobSnapshot; retryAfter?: string }[], times: number[]): Handler {
  let i = 0;
  return (req, res) => {
    times.push(performance.now());
    const step = script[Math.min(i++, script.length - 1)] as { job: JobSnapshot; retryAfter?: string };
    if (req.path !== `/v1/jobs/${step.job.id}`) return problem(res, 404, 'JOB_NOT_FOUND', 'no');
    json(res, 200, step.job, step.retryAfter !== undefined ? { 'Retry-After': step.retryAfter } : {});
  };
}

function gaps(times: number[]): number[] {
  return times.slice(1).map((t, i) => t - (times[i] as number));
}

describe('wait()', () => {
  it('honours Retry-After between reads and resolves with the terminal snapshot', async () => {
    const times: number[] = [];
    const running = snap('w1', 'running', 1);
    const done = snap('w1', 'succeeded', 2, { result: { ok: true } });
    await withServer(scriptedGet([{ job: running, retryAfter: '1' }, { job: done }], times), async (fake) => {
      const updates: JobState[] = [];
      // initialMs 10: were Retry-After ignored, the second read would come after 10 ms.
      const end = await client(fake).wait('w1', { onUpdate: (j) => updates.push(j.status) });
      assert.equal(end.status, 'succeeded');
      assert.deepEqual(end.result, { ok: true });
      assert.deepEqual(updates, ['running', 'succeeded']);
      assert.equal(times.length, 2);
      assert.ok((gaps(times)[0] as number) >= 950, `second read after ${gaps(times)[0]} ms`);
    });
  });

  it('without Retry-After backs off exponentially up to the cap, and resets when the snapshot changes', async () => {
    const times: number[] = [];
    const a = snap('w2', 'running', 1);
    const b = withPercent(snap('w2', 'running', 2), 50);
    const script = [{ job: a }, { job: a }, { job: a }, { job: b }, { job: snap('w2', 'succeeded', 3) }];
    await withServer(scriptedGet(script, times), async (fake) => {
      const updates: (number | null)[] = [];
      const end = await client(fake, { polling: { initialMs: 30, maxMs: 120 } }).wait('w2', { onUpdate: (j) => updates.push(j.progress.percent) });
      assert.equal(end.status, 'succeeded');
      assert.deepEqual(updates, [null, 50, 100], 'onUpdate sees only changed snapshots');
      const g = gaps(times);
      assert.equal(g.length, 4);
      // 30 → 60 → 120 (capped), then back to 30 after the change.
      assert.ok((g[0] as number) >= 28 && (g[1] as number) >= 58 && (g[2] as number) >= 118, `gaps ${g.join(', ')}`);
      assert.ok((g[3] as number) < (g[2] as number), `gaps ${g.join(', ')}`);
    });
  });

  it('rejects with LonghaulTimeoutError after timeoutMs, and with the reason when aborted', async () => {
    const times: number[] = [];
    await withServer(scriptedGet([{ job: snap('w3', 'running', 1), retryAfter: '1' }], times), async (fake) => {
      const c = client(fake);
      const started = performance.now();
      // 400 ms: the first answer must arrive before the timeout even on a loaded machine (it once
      // took over 80 ms in CI); the Retry-After of 1 s must not delay the rejection.
      const err = await c.wait('w3', { timeoutMs: 400 }).catch((e: unknown) => e);
      assert.ok(err instanceof LonghaulTimeoutError, String(err));
      assert.equal(err.jobId, 'w3');
      assert.equal(err.lastSnapshot?.status, 'running');
      assert.ok(performance.now() - started < 950, 'rejected at the timeout, not after the Retry-After');

      const ac = new AbortController();
      const reason = new Error('user gave up');
      setTimeout(() => ac.abort(reason), 30);
      await assert.rejects(c.wait('w3', { signal: ac.signal }), (e: unknown) => e === reason);
      await assert.rejects(c.wait('missing'), (e: unknown) => e instanceof LonghaulApiError && e.status === 404);
    });
  });
});

// ---- stream() ---------------------------------------------------------------------------------

async function collect(it: AsyncIterable<JobSnapshot>): Promise<JobSnapshot[]> {
  const out: JobSnapshot[] = [];
  for await (const s of it) out.push(s);
  return out;
}

function assertNoDuplicates(list: JobSnapshot[]): void {
  const keys = list.map((j) => `${j.status}|${j.updatedAt}|${j.progress.percent}`);
  assert.equal(new Set(keys).size, keys.length, `duplicates in ${keys.join(' ; ')}`);
}

describe('stream()', () => {
  it('resumes with Last-Event-ID after a dropped connection and yields no snapshot twice', async () => {
    const lastIds: (string | undefined)[] = [];
    const queued = snap('s1', 'queued', 1000);
    const running = snap('s1', 'running', 2000);
    const half = withPercent(snap('s1', 'running', 3000), 50);
    const done = snap('s1', 'succeeded', 4000);
    await withServer(
      async (req, res) => {
        assert.equal(req.path, '/v1/jobs/s1/events');
        lastIds.push(req.headers['last-event-id'] as string | undefined);
        sseHead(res);
        if (lastIds.length === 1) {
          res.write('retry: 10\n\n');
          res.write(frame(queued));
          // The frame of `running` arrives in two pieces, then a partial frame, then the drop.
          const f = frame(running);
          res.write(f.slice(0, 25));
          await delay(5);
          writeThenDrop(res, `${f.slice(25)}id: ${T0 + 2500}\nevent: progress\ndata: {"id":"s1",`);
          return;
        }
        // The resumed stream repeats the state the client has (a server may), then moves on.
        res.write(frame(running));
        res.write(frame(half, 'progress'));
        res.end(frame(done));
      },
      async (fake) => {
        const seen: JobSnapshot[] = [];
        const list = await collect(client(fake).stream('s1', { onSnapshot: (j) => seen.push(j) }));
        assert.deepEqual(lastIds, [undefined, String(T0 + 2000)]);
        assert.deepEqual(
          list.map((j) => [j.status, j.progress.percent]),
          [
            ['queued', null],
            ['running', null],
            ['running', 50],
            ['succeeded', 100],
          ],
        );
        assertNoDuplicates(list);
        assert.deepEqual(seen, list);
      },
    );
  });

  it('falls back to polling after three drops within the window, yielding only changed snapshots', async () => {
    let sse = 0;
    let gets = 0;
    const lastIds: (string | undefined)[] = [];
    const running = snap('s2', 'running', 1000);
    const later = withPercent(snap('s2', 'running', 1500), 70);
    const done = snap('s2', 'succeeded', 2000);
    await withServer(
      (req, res) => {
        if (req.path === '/v1/jobs/s2/events') {
          sse++;
          lastIds.push(req.headers['last-event-id'] as string | undefined);
          sseHead(res);
          writeThenDrop(res, `retry: 5\n\n${frame(running)}`);
          return;
        }
        assert.equal(req.path, '/v1/jobs/s2');
        gets++;
        if (gets === 1) return json(res, 200, running, { 'Retry-After': '0' });
        if (gets === 2) return json(res, 200, later);
        return json(res, 200, done);
      },
      async (fake) => {
        const list = await collect(client(fake).stream('s2'));
        assert.equal(sse, 3, 'three connections, then polling');
        assert.deepEqual(lastIds, [undefined, String(T0 + 1000), String(T0 + 1000)]);
        assert.equal(gets, 3);
        assert.deepEqual(
          list.map((j) => [j.status, j.progress.percent]),
          [
            ['running', null],
            ['running', 70],
            ['succeeded', 100],
          ],
        );
        assertNoDuplicates(list);
      },
    );
  });

  it('a 204 on reconnect: reads the job once, yields it if new, and ends', async () => {
    const lastIds: (string | undefined)[] = [];
    let gets = 0;
    const running = snap('s3', 'running', 1000);
    const done = snap('s3', 'succeeded', 2000);
    await withServer(
      (req, res) => {
        if (req.path === '/v1/jobs/s3') {
          gets++;
          return json(res, 200, done);
        }
        lastIds.push(req.headers['last-event-id'] as string | undefined);
        if (lastIds.length === 1) {
          sseHead(res);
          res.end(`retry: 5\n\n${frame(running)}`); // a clean end before the terminal frame
          return;
        }
        res.writeHead(204);
        res.end();
      },
      async (fake) => {
        const list = await collect(client(fake).stream('s3'));
        assert.deepEqual(lastIds, [undefined, String(T0 + 1000)]);
        assert.equal(gets, 1);
        assert.deepEqual(
          list.map((j) => j.status),
          ['running', 'succeeded'],
        );
      },
    );
  });

  it('a 204 at once (resuming with lastEventId) yields the terminal snapshot read with get()', async () => {
    const lastIds: (string | undefined)[] = [];
    const done = snap('s4', 'failed', 2000, { error: { message: 'boom', code: 'E', retryable: false } });
    await withServer(
      (req, res) => {
        if (req.path === '/v1/jobs/s4') return json(res, 200, done);
        lastIds.push(req.headers['last-event-id'] as string | undefined);
        res.writeHead(204);
        res.end();
      },
      async (fake) => {
        const list = await collect(client(fake).stream('s4', { lastEventId: String(T0 + 2000) }));
        assert.deepEqual(lastIds, [String(T0 + 2000)]);
        assert.deepEqual(
          list.map((j) => [j.status, j.error?.message]),
          [['failed', 'boom']],
        );
      },
    );
  });

  it('throws the problem of the first connection (404) and sends the API key', async () => {
    const auth: (string | undefined)[] = [];
    await withServer(
      (req, res) => {
        auth.push(req.headers.authorization);
        problem(res, 404, 'JOB_NOT_FOUND', 'no such job');
      },
      async (fake) => {
        await assert.rejects(collect(client(fake).stream('nope')), (e: unknown) => e instanceof LonghaulApiError && e.code === 'JOB_NOT_FOUND');
        assert.deepEqual(auth, ['Bearer secret-key']);
      },
    );
  });

  it('closes the connection when aborted (rejecting with the reason) or when the loop breaks', async () => {
    const closed: Promise<void>[] = [];
    await withServer(
      (_req, res, raw) => {
        closed.push(new Promise<void>((resolve) => raw.socket.once('close', () => resolve())));
        sseHead(res);
        res.write(frame(snap('s5', 'running', 1000)));
        res.write(': keepalive\n\n');
      },
      async (fake) => {
        const c = client(fake);
        const ac = new AbortController();
        const reason = new Error('stop');
        const got: JobState[] = [];
        await assert.rejects(
          (async () => {
            for await (const j of c.stream('s5', { signal: ac.signal })) {
              got.push(j.status);
              setTimeout(() => ac.abort(reason), 10);
            }
          })(),
          (e: unknown) => e === reason,
        );
        assert.deepEqual(got, ['running']);
        await closed[0];

        for await (const j of c.stream('s5')) {
          assert.equal(j.status, 'running');
          break;
        }
        await closed[1];
      },
    );
  });
});

// ---- browser safety ---------------------------------------------------------------------------

describe('client sources', () => {
  // Pure core modules the client may use at runtime: they import nothing but browser-safe packages.
  const PURE_CORE = ['../core/states.js', '../core/limits.js', '../core/json-text.js'];
  const BROWSER_SAFE_PACKAGES = ['lossless-json', 'eventsource-parser'];
  it('use no Node-only modules or globals, and only pure core code at runtime', () => {
    const dir = new URL('../../src/client/', import.meta.url);
    for (const name of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      const src = readFileSync(new URL(name, dir), 'utf8');
      assert.doesNotMatch(src, /from ['"]node:|require\(|\bBuffer\b|\bprocess\./, name);
      for (const m of src.matchAll(/^(?:import|export)\s+(type\s+)?(\{[^}]*\}|\*)\s*from '([^']+)'/gm)) {
        const [, typeOnly, names = '', spec = ''] = m;
        if (spec.startsWith('./') || BROWSER_SAFE_PACKAGES.includes(spec)) continue;
        assert.ok(spec.startsWith('../core/'), `${name} imports ${spec}`);
        // Value imports from core only from the pure modules above; the rest type-only.
        if (typeOnly || PURE_CORE.includes(spec)) continue;
        const list = names
          .slice(1, -1)
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean);
        assert.ok(
          list.every((x) => x.startsWith('type ')),
          `${name}: value import from ${spec}`,
        );
      }
    }
    for (const spec of PURE_CORE) {
      const src = readFileSync(new URL(spec.replace('../', '../../src/').replace(/\.js$/, '.ts'), import.meta.url), 'utf8');
      for (const m of src.matchAll(/^import .* from '([^']+)'/gm)) assert.ok(BROWSER_SAFE_PACKAGES.includes(m[1] as string), `${spec} imports ${m[1]}`);
    }
  });
});
