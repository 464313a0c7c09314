/**
 * Every error answer is RFC 9457 problem+json, including the ones Fastify's routing never sees:
 * what Node's HTTP parser refuses (431 headers too large, 400 not HTTP, 408 too slow) and
 * requests arriving while the server closes (503). Also: one code per kind of mistake (bad
 * request fields are INVALID_REQUEST with the field named, whichever layer finds them), enum
 * errors that list the allowed values, and Idempotency-Key values HTTP cannot carry.
 */
import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { LonghaulClient } from '../../src/client/index.js';
import { clientErrorHandler } from '../../src/server/client-errors.js';
import { API_KEYS, call, type Harness, KEY_A, problemOf, startHarness, until } from '../support/http-harness.js';

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

function parseRaw(text: string): RawAnswer {
  const end = text.indexOf('\r\n\r\n');
  const head = text.slice(0, end === -1 ? text.length : end).split('\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers, body: end === -1 ? '' : text.slice(end + 4) };
}

/** Writes raw bytes to the server and collects everything it answers until it closes the connection. */
function rawRequest(base: string, bytes: string | Buffer): Promise<RawAnswer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const sock = connect(Number(url.port), url.hostname, () => sock.end(bytes));
    sock.on('data', (d: Buffer) => chunks.push(d));
    sock.on('close', () => resolve(parseRaw(Buffer.concat(chunks).toString('latin1'))));
    sock.on('error', () => undefined); // a reset after the answer is fine
    sock.setTimeout(10_000, () => {
      sock.destroy();
      reject(new Error('no answer within 10 s'));
    });
  });
}

function assertProblem(answer: RawAnswer, status: number, code: string): Record<string, unknown> {
  assert.equal(answer.status, status, JSON.stringify(answer));
  assert.match(answer.headers['content-type'] ?? '', /^application\/problem\+json/, JSON.stringify(answer.headers));
  const body = JSON.parse(answer.body) as Record<string, unknown>;
  assert.equal(body.status, status);
  assert.equal(body.code, code);
  assert.match(String(body.type), /^urn:longhaul:problem:/);
  for (const f of ['title', 'detail']) assert.equal(typeof body[f], 'string');
  assert.equal(Number(answer.headers['content-length']), Buffer.byteLength(answer.body), 'Content-Length matches the body');
  return body;
}

describe('problem+json everywhere', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ worker: false });
  });
  after(async () => {
    await h?.close();
  });

  it('431 for a 100 KB Idempotency-Key (Node refuses the headers before any route runs)', async () => {
    const res = await call(h.base, '/v1/jobs', { body: { type: 't.quick' }, headers: { 'idempotency-key': 'k'.repeat(100_000) } });
    const p = problemOf(res, 431, 'HEADERS_TOO_LARGE');
    assert.match(String(p.detail), /Idempotency-Key.*255/);
  });

  it('400 for bytes that are not HTTP', async () => {
    assertProblem(await rawRequest(h.base, 'GARBAGE\r\n\r\n'), 400, 'BAD_REQUEST');
    assertProblem(await rawRequest(h.base, 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n'), 400, 'BAD_REQUEST');
  });

  it('408 for a request that did not arrive in time (the handler Node calls on its request timeout)', async () => {
    // Node's own timer fires after minutes; the handler is called directly here, on a real socket.
    const server = createServer((sock) => {
      const err = Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
      sock.on('error', () => undefined);
      clientErrorHandler(err, sock);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as { port: number };
      assertProblem(await rawRequest(`http://127.0.0.1:${port}`, 'GET / HTTP/1.1\r\n'), 408, 'REQUEST_TIMEOUT');
    } finally {
      server.close();
    }
  });

  it('404 for an unknown route or method, 413 for a body too large, 415 for a body that is not JSON, 400 for malformed JSON', async () => {
    problemOf(await call(h.base, '/v1/nope'), 404, 'NOT_FOUND');
    problemOf(await call(h.base, '/v1/jobs', { method: 'PUT', body: { type: 't.quick' } }), 404, 'NOT_FOUND');
    problemOf(await call(h.base, '/v1/stats', { method: 'PATCH' }), 404, 'NOT_FOUND');
    problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', input: 'x'.repeat(2 * 1024 * 1024) } }), 413, 'PAYLOAD_TOO_LARGE');
    problemOf(await call(h.base, '/v1/jobs', { raw: 'type=t.quick', contentType: 'text/plain' }), 415, 'UNSUPPORTED_MEDIA_TYPE');
    problemOf(await call(h.base, '/v1/jobs', { raw: '{"type":', contentType: 'application/json' }), 400, 'MALFORMED_JSON');
  });

  it('an enum error lists the allowed values', async () => {
    const p = problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', priority: 'urgent' } }), 400, 'INVALID_REQUEST');
    assert.deepEqual(p.errors, [{ path: 'priority', message: 'must be one of critical, high, normal, low' }]);
    assert.match(String(p.detail), /priority: must be one of critical, high, normal, low/);
  });

  it('a bad option found by the library is INVALID_REQUEST with the field, like one found by the schema', async () => {
    const schema = problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', delayMs: -1 } }), 400, 'INVALID_REQUEST');
    const library = problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', runAt: '2300-01-01T00:00:00Z' } }), 400, 'INVALID_REQUEST');
    assert.deepEqual(
      (schema.errors as { path: string }[]).map((e) => e.path),
      ['delayMs'],
    );
    assert.deepEqual(
      (library.errors as { path: string }[]).map((e) => e.path),
      ['runAt'],
    );
    problemOf(await call(h.base, '/v1/jobs', { body: { type: 't.quick', runAt: new Date().toISOString(), delayMs: 5 } }), 400, 'INVALID_REQUEST');
    const webhook = problemOf(
      await call(h.base, '/v1/jobs', { body: { type: 't.quick', webhook: { url: 'https://example.com/h', secret: 'nope' } } }),
      400,
      'INVALID_REQUEST',
    );
    assert.deepEqual(
      (webhook.errors as { path: string }[]).map((e) => e.path),
      ['webhook.secret'],
    );
  });

  it('an Idempotency-Key HTTP cannot carry as text is refused with 400, naming the character', async () => {
    // fetch() refuses to send such a header at all; curl sends the UTF-8 bytes as they are.
    const body = '{"type":"t.quick"}';
    const answer = await rawRequest(
      h.base,
      Buffer.concat([
        Buffer.from(`POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${KEY_A}\r\nContent-Type: application/json\r\n`),
        Buffer.from('Idempotency-Key: caf\u00e9-1\r\n', 'utf8'),
        Buffer.from(`Content-Length: ${body.length}\r\n\r\n${body}`),
      ]),
    );
    const p = assertProblem(answer, 400, 'INVALID_IDEMPOTENCY_KEY');
    assert.match(String(p.detail), /printable ASCII.*character 4/);
  });

  it('the typed client refuses such a key itself, saying why, before any request', async () => {
    let requests = 0;
    const client = new LonghaulClient({
      baseUrl: h.base,
      apiKey: KEY_A,
      fetch: (input, init) => {
        requests++;
        return fetch(input, init);
      },
    });
    await assert.rejects(client.submit('t.quick', undefined, { idempotencyKey: 'café-1' }), {
      name: 'TypeError',
      message: 'idempotencyKey must be printable ASCII (HTTP headers carry no other text): character 4 is U+00E9',
    });
    await assert.rejects(client.submit('t.quick', undefined, { idempotencyKey: '' }), /idempotencyKey must be 1 to 255 characters \(got 0\)/);
    assert.equal(requests, 0);
    const first = await client.submitDetailed('t.quick', undefined, { idempotencyKey: 'plain-ascii key 1' });
    const again = await client.submitDetailed('t.quick', undefined, { idempotencyKey: 'plain-ascii key 1' });
    assert.deepEqual([first.replayed, again.replayed, again.job.id], [false, true, first.job.id]);
  });
});

describe('503 problem while the server closes', () => {
  it('a request arriving on a kept-alive connection after close() began gets 503 SHUTTING_DOWN', async () => {
    const h = await startHarness({ worker: false, apiKeys: API_KEYS });
    const url = new URL(h.base);
    let closing: Promise<void> | null = null;
    try {
      // An upload whose body is only half sent keeps its connection busy, so close() cannot drop
      // it as idle; the second, pipelined request is read after close() began.
      const sock: Socket = connect(Number(url.port), url.hostname);
      await new Promise<void>((resolve) => sock.once('connect', resolve));
      let received = '';
      sock.on('data', (d: Buffer) => {
        received += d.toString('latin1');
      });
      const closed = new Promise<void>((resolve) => sock.once('close', () => resolve()));
      sock.on('error', () => undefined);
      // Node answers `100 Continue` once it has parsed the headers: from then on the request is active.
      sock.write(
        `POST /v1/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY_A}\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n12345`,
      );
      await until(() => received.includes('100 Continue'), 'the 100 Continue');
      closing = h.app.close();
      // The listener closes after the preClose hooks ran: from then on close() has begun.
      await until(
        () =>
          new Promise<boolean>((resolve) => {
            const probe = connect(Number(url.port), url.hostname);
            probe.once('connect', () => {
              probe.destroy();
              resolve(false);
            });
            probe.once('error', () => resolve(true));
          }),
        'the listener to close',
      );
      sock.write(`67890GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY_A}\r\n\r\n`);
      await closed;
      const answers = received.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, '');
      const second = answers.indexOf('HTTP/1.1', 1);
      assert.ok(second > 0, `two answers: ${received}`);
      assert.equal(parseRaw(answers.slice(0, second)).status, 201, received);
      received = answers;
      const p = assertProblem(parseRaw(received.slice(second)), 503, 'SHUTTING_DOWN');
      assert.match(String(p.detail), /shutting down/);
    } finally {
      await closing;
      await h.close();
    }
  });
});
