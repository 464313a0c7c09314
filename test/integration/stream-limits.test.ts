/**
 * Per-tenant caps on open streams and on subscriptions per WebSocket (issue 36,
 * server/stream-limits.ts): SSE responses (per-job and the feed) and WebSocket connections count
 * together against LONGHAUL_MAX_STREAMS_PER_TENANT (default 100); the 101st SSE is a 429
 * problem+json TOO_MANY_STREAMS, the 101st WebSocket is closed 1008 with a reason; another tenant
 * is unaffected; closing a stream, however it closes, frees its slot; a subscription past
 * LONGHAUL_MAX_SUBSCRIPTIONS_PER_SOCKET gets an error message and the socket stays open.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import WebSocket from 'ws';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { DEFAULT_MAX_STREAMS_PER_TENANT, DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET } from '../../src/server/stream-limits.js';
import { defineTask } from '../../src/task-api/define.js';

const KEY_A = 'stream-limits-key-A-0123456789';
const KEY_B = 'stream-limits-key-B-0123456789';
const idle = defineTask({ type: 'limits.idle', run: async () => null });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Server {
  lh: Longhaul;
  app: FastifyInstance;
  base: string;
  close(): Promise<void>;
}

async function startServer(options: { maxStreamsPerTenant?: number; maxSubscriptionsPerSocket?: number } = {}): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), 'lh-stream-limits-'));
  const lh = await Longhaul.open({ database: join(dir, 'db.sqlite'), tasks: [idle], logger: pino({ level: 'silent' }) });
  const app = await buildServer({ lh, apiKeys: parseApiKeys(`tenantA:${KEY_A},tenantB:${KEY_B}`), logger: false, keepaliveMs: 60_000, ...options });
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    lh,
    app,
    base,
    async close() {
      await app.close();
      await lh.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface Sse {
  status: number;
  res: IncomingMessage;
  req: ClientRequest;
  body: Promise<string>;
}

/** A GET on its own connection (no agent); resolves at the response's head. */
function openSse(base: string, path: string, key: string): Promise<Sse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { agent: false, headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8');
      const body = new Promise<string>((done) => {
        let text = '';
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () => done(text));
        res.on('close', () => done(text));
        res.on('error', () => done(text));
      });
      resolve({ status: res.statusCode ?? 0, res, req, body });
    });
    req.on('error', reject);
    req.end();
  });
}

interface Ws {
  ws: WebSocket;
  /** Resolves with the close code and reason. */
  closed: Promise<{ code: number; reason: string }>;
  messages: Array<Record<string, unknown>>;
}

function openWs(base: string, key: string): Promise<Ws> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/ws`, { headers: { authorization: `Bearer ${key}` } });
    const messages: Array<Record<string, unknown>> = [];
    ws.on('message', (d) => messages.push(JSON.parse(String(d)) as Record<string, unknown>));
    const closed = new Promise<{ code: number; reason: string }>((done) => ws.on('close', (code, reason) => done({ code, reason: String(reason) })));
    ws.once('open', () => resolve({ ws, closed, messages }));
    ws.once('error', reject);
  });
}

async function metric(s: Server, line: string): Promise<number> {
  const text = await s.lh.metrics.render();
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found ? Number(found.slice(line.length + 1)) : 0;
}

async function submitPending(s: Server, tenant: string): Promise<string> {
  return (await s.lh.submit('limits.idle', {}, { tenant, runAt: new Date(Date.now() + 3_600_000) })).id;
}

describe('stream caps per tenant', () => {
  let s: Server;
  before(async () => {
    s = await startServer();
  });
  after(async () => {
    await s.close();
  });

  it('SSE: the 101st of a tenant is a 429 TOO_MANY_STREAMS; another tenant and a freed slot are served', { timeout: 60_000 }, async () => {
    assert.equal(DEFAULT_MAX_STREAMS_PER_TENANT, 100);
    const job = await submitPending(s, 'tenantA');
    const open: Sse[] = [];
    for (let i = 0; i < 100; i++) open.push(await openSse(s.base, i % 2 === 0 ? '/v1/events' : `/v1/jobs/${job}/events`, KEY_A));
    assert.deepEqual(
      open.map((o) => o.status),
      open.map(() => 200),
    );
    for (const path of ['/v1/events', `/v1/jobs/${job}/events`]) {
      const refused = await openSse(s.base, path, KEY_A);
      assert.equal(refused.status, 429, path);
      assert.match(String(refused.res.headers['content-type']), /^application\/problem\+json/);
      const problem = JSON.parse(await refused.body) as { code: string; status: number; detail?: string };
      assert.equal(problem.code, 'TOO_MANY_STREAMS');
      assert.equal(problem.status, 429);
    }
    // The same cap counts WebSockets: tenant A's is closed with 1008 and a reason.
    const ws = await openWs(s.base, KEY_A);
    const closed = await ws.closed;
    assert.equal(closed.code, 1008);
    assert.match(closed.reason, /too many open streams/);
    // Another tenant is unaffected.
    const other = await openSse(s.base, '/v1/events', KEY_B);
    assert.equal(other.status, 200);
    other.req.destroy();
    assert.equal(await metric(s, 'longhaul_streams_refused_total{kind="sse"}'), 2);
    assert.equal(await metric(s, 'longhaul_streams_refused_total{kind="websocket"}'), 1);
    assert.ok((await metric(s, 'longhaul_streams_open{kind="sse"}')) >= 100);
    // A client that goes away frees its slot.
    (open.pop() as Sse).req.destroy();
    let again: Sse | null = null;
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline) {
      const tried = await openSse(s.base, '/v1/events', KEY_A);
      if (tried.status === 200) {
        again = tried;
        break;
      }
      await tried.body;
      await sleep(20);
    }
    assert.ok(again, 'a slot freed by a client that left is taken again');
    open.push(again);
    for (const o of open) o.req.destroy();
    await waitFor(async () => (await metric(s, 'longhaul_streams_open{kind="sse"}')) === 0, 'every slot given back');
  });

  it('SSE: streams opened at once are admitted exactly up to the cap', { timeout: 60_000 }, async () => {
    const all = await Promise.all(Array.from({ length: 130 }, () => openSse(s.base, '/v1/events', KEY_A)));
    assert.equal(all.filter((o) => o.status === 200).length, 100);
    assert.equal(all.filter((o) => o.status === 429).length, 30);
    for (const o of all) o.req.destroy();
    await waitFor(async () => (await metric(s, 'longhaul_streams_open{kind="sse"}')) === 0, 'every slot given back');
  });

  it('WebSocket: the 101st of a tenant is closed 1008; another tenant is served; a closed socket frees its slot', { timeout: 60_000 }, async () => {
    const open: Ws[] = [];
    for (let i = 0; i < 100; i++) open.push(await openWs(s.base, KEY_A));
    // Let the server's sessions start (each takes its slot on the upgrade).
    await sleep(50);
    const refused = await openWs(s.base, KEY_A);
    const closed = await refused.closed;
    assert.equal(closed.code, 1008);
    assert.match(closed.reason, /too many open streams for this tenant \(at most 100\)/);
    // The same cap counts SSE.
    const sse = await openSse(s.base, '/v1/events', KEY_A);
    assert.equal(sse.status, 429);
    const b = await openWs(s.base, KEY_B);
    await sleep(50);
    assert.equal(b.ws.readyState, WebSocket.OPEN);
    b.ws.close();
    // Every close path gives the slot back: a close handshake, a reset.
    (open.pop() as Ws).ws.close();
    (open.pop() as Ws).ws.terminate();
    await waitFor(async () => (await metric(s, 'longhaul_streams_open{kind="websocket"}')) === 98, '98 sockets left open');
    const again1 = await openWs(s.base, KEY_A);
    const again2 = await openWs(s.base, KEY_A);
    await sleep(50);
    assert.equal(again1.ws.readyState, WebSocket.OPEN);
    assert.equal(again2.ws.readyState, WebSocket.OPEN);
    open.push(again1, again2);
    for (const o of open) o.ws.terminate();
    await waitFor(async () => (await metric(s, 'longhaul_streams_open{kind="websocket"}')) === 0, 'every slot given back');
  });
});

describe('subscriptions per WebSocket', () => {
  it('past the cap a subscribe gets a 429 error message, the socket stays open, and an unsubscribe frees a place', { timeout: 30_000 }, async () => {
    assert.equal(DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET, 1000);
    const s = await startServer({ maxSubscriptionsPerSocket: 5 });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) ids.push(await submitPending(s, 'tenantA'));
      const c = await openWs(s.base, KEY_A);
      for (const id of ids.slice(0, 6)) c.ws.send(JSON.stringify({ op: 'subscribe', id }));
      await waitFor(async () => c.messages.length >= 6, 'five snapshots and an error');
      const errors = c.messages.filter((m) => m.type === 'error');
      assert.equal(errors.length, 1);
      assert.deepEqual({ id: errors[0]?.id, status: errors[0]?.status, code: errors[0]?.code }, { id: ids[5], status: 429, code: 'TOO_MANY_SUBSCRIPTIONS' });
      assert.equal(c.messages.filter((m) => m.type === 'snapshot').length, 5);
      assert.equal(c.ws.readyState, WebSocket.OPEN);
      assert.equal(await metric(s, 'longhaul_streams_refused_total{kind="subscription"}'), 1);
      // Another socket has its own five.
      const d = await openWs(s.base, KEY_A);
      d.ws.send(JSON.stringify({ op: 'subscribe', id: ids[6] }));
      await waitFor(async () => d.messages.some((m) => m.type === 'snapshot'), 'the other socket subscribes');
      // An unsubscribe frees a place on the first.
      c.ws.send(JSON.stringify({ op: 'unsubscribe', id: ids[0] }));
      c.ws.send(JSON.stringify({ op: 'subscribe', id: ids[6] }));
      await waitFor(async () => c.messages.some((m) => m.type === 'snapshot' && (m.job as { id: string }).id === ids[6]), 'subscribed after the unsubscribe');
      c.ws.close();
      d.ws.close();
    } finally {
      await s.close();
    }
  });

  it('a server closing its streams gives every slot back', { timeout: 30_000 }, async () => {
    const s = await startServer({ maxStreamsPerTenant: 3 });
    const a = await openSse(s.base, '/v1/events', KEY_A);
    const w = await openWs(s.base, KEY_A);
    await sleep(50);
    assert.equal(a.status, 200);
    assert.equal((await openSse(s.base, '/v1/events', KEY_A)).status, 200);
    assert.equal((await openSse(s.base, '/v1/events', KEY_A)).status, 429);
    await s.app.close();
    assert.equal((await w.closed).code, 1001);
    assert.equal(await metric(s, 'longhaul_streams_open{kind="sse"}'), 0);
    assert.equal(await metric(s, 'longhaul_streams_open{kind="websocket"}'), 0);
    await s.close();
  });

  it('an invalid cap is refused when the server is built', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'lh-stream-limits-'));
    const lh = await Longhaul.open({ database: join(dir, 'db.sqlite'), tasks: [idle], logger: pino({ level: 'silent' }) });
    try {
      await assert.rejects(buildServer({ lh, logger: false, maxStreamsPerTenant: 0 }), /maxStreamsPerTenant must be a positive integer/);
      await assert.rejects(buildServer({ lh, logger: false, maxSubscriptionsPerSocket: 1.5 }), /maxSubscriptionsPerSocket must be a positive integer/);
    } finally {
      await lh.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

async function waitFor(check: () => Promise<boolean>, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(20);
  }
  assert.fail(`timed out waiting: ${what}`);
}
