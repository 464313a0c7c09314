/**
 * What one HTTP client can hold of the server (issue 36; server/http-limits.ts,
 * browser-guard.ts, auth-throttle.ts): request deadlines, the connection cap with its reserve
 * for health checks, transfers' minimum rate, Host and Origin, throttled failed authentication,
 * and /readyz's reason code.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import pino from 'pino';
import WebSocket from 'ws';
import { call, type Harness, KEY_A, problemOf, startHarness, submit, until } from '../support/http-harness.js';

interface Raw {
  socket: Socket;
  /** Everything the server sent. */
  data: () => string;
  /** Resolves with ms since `connect` once the server (or the test) closed the socket. */
  closed: Promise<number>;
}

/** A raw connection that writes `text` (if any) and records what comes back. */
function raw(port: number, text = ''): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    let data = '';
    const socket = connect(port, '127.0.0.1');
    const closed = new Promise<number>((r) => socket.once('close', () => r(Date.now() - t0)));
    socket.on('data', (d: Buffer) => {
      data += d.toString();
    });
    socket.on('error', () => {});
    socket.once('connect', () => {
      if (text) socket.write(text);
      resolve({ socket, data: () => data, closed });
    });
    socket.once('error', reject);
  });
}

/** One request on a connection of its own: status, headers and text, or null when the server closed it without an answer. */
function fresh(port: number, path: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}) {
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string } | null>((resolve) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers: options.headers ?? {}, agent: false }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => {
        text += d.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      res.on('error', () => resolve(null));
    });
    req.on('error', () => resolve(null));
    req.end(options.body);
  });
}

function portOf(base: string): number {
  return Number(new URL(base).port);
}

async function refusals(h: Harness): Promise<Record<string, number>> {
  const text = await h.lh.metrics.render();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^longhaul_http_refusals_total\{reason="([a-z_]+)"\} (\d+)/gm)) out[m[1] as string] = Number(m[2]);
  return out;
}

describe('HTTP requests must arrive in time', () => {
  it('200 sockets with a stalled body are closed within the limit while /healthz answers', async () => {
    const LIMIT = 1_000;
    // No throttling of the 401s here: their 20 sockets would get the others throttled (auth-throttle.ts).
    const h = await startHarness({ worker: false, server: { httpLimits: { requestTimeoutMs: LIMIT }, authThrottle: false } });
    try {
      const port = portOf(h.base);
      const head = (auth: boolean) =>
        `POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${auth ? `Authorization: Bearer ${KEY_A}\r\n` : ''}` +
        'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"type":';
      // 180 read by the JSON parser (answered 408), 20 refused at once (401) that keep sending a byte now and then.
      const sockets = await Promise.all(Array.from({ length: 200 }, (_, i) => raw(port, head(i >= 20))));
      const trickle = setInterval(() => {
        for (const s of sockets.slice(0, 20)) if (!s.socket.destroyed) s.socket.write(' ');
      }, 100);
      const health: number[] = [];
      let probing = true;
      const probes = (async () => {
        while (probing) {
          health.push((await fresh(port, '/healthz'))?.status ?? 0);
          await sleep(50);
        }
      })();
      try {
        const times = await Promise.race([
          Promise.all(sockets.map((s) => s.closed)),
          sleep(LIMIT + 3_000).then(() => {
            throw new Error(`${sockets.filter((s) => !s.socket.destroyed && !s.socket.readableEnded).length} sockets still open ${LIMIT + 3_000} ms later`);
          }),
        ]);
        assert.ok(Math.max(...times) < LIMIT + 2_000, `the last socket closed after ${Math.max(...times)} ms`);
      } finally {
        clearInterval(trickle);
        probing = false;
        await probes;
      }
      assert.ok(health.length >= 5, `probed /healthz ${health.length} times`);
      assert.deepEqual([...new Set(health)], [200], `every /healthz answered 200: ${health.join(',')}`);
      const answered = sockets.slice(20).map((s) => s.data());
      assert.ok(
        answered.every((d) => d.startsWith('HTTP/1.1 408') && /application\/problem\+json/.test(d) && /"code":"REQUEST_TIMEOUT"/.test(d)),
        `a body read too slowly is answered 408 REQUEST_TIMEOUT: ${answered.find((d) => !d.startsWith('HTTP/1.1 408'))?.slice(0, 200)}`,
      );
      assert.ok(sockets.slice(0, 20).every((s) => s.data().startsWith('HTTP/1.1 401')));
      assert.ok(((await refusals(h)).request_timeout ?? 0) >= 200);
    } finally {
      await h.close();
    }
  });

  it('headers that never end are answered 408; a body that arrives in time is served', async () => {
    const h = await startHarness({ worker: false, server: { httpLimits: { requestTimeoutMs: 500 } } });
    try {
      const port = portOf(h.base);
      const partial = await raw(port, `GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n`);
      const silent = await raw(port);
      assert.ok((await partial.closed) < 2_500);
      assert.match(partial.data(), /^HTTP\/1\.1 408/);
      assert.ok((await silent.closed) < 2_500, 'a connection that sends nothing is closed too');
      const ok = await call(h.base, '/v1/stats');
      assert.equal(ok.status, 200);
    } finally {
      await h.close();
    }
  });
});

describe('the connection cap', () => {
  it('refuses connections past the cap while /healthz and /readyz keep answering', async () => {
    const h = await startHarness({ worker: false, server: { httpLimits: { maxConnections: 20, healthConnections: 3 } } });
    try {
      const port = portOf(h.base);
      const held = await Promise.all(Array.from({ length: 20 }, () => raw(port)));
      await sleep(100);
      for (const path of ['/healthz', '/readyz', '/healthz']) {
        const res = await fresh(port, path);
        assert.equal(res?.status, 200, `${path} past the cap`);
        assert.equal(res?.headers.connection, 'close');
      }
      const api = await fresh(port, '/v1/stats', { headers: { authorization: `Bearer ${KEY_A}` } });
      assert.equal(api?.status, 503);
      assert.match(api?.text ?? '', /"code":"TOO_MANY_CONNECTIONS"/);
      assert.equal(api?.headers['retry-after'], '1');
      // The reserve for health checks full too: a new connection is closed before anything is read.
      const reserve = await Promise.all(Array.from({ length: 3 }, () => raw(port)));
      await sleep(100);
      const refused = await raw(port, `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
      assert.ok((await refused.closed) < 1_000);
      assert.equal(refused.data(), '');
      // The reserve's silent sockets do not keep their place long.
      assert.ok((await Promise.all(reserve.map((s) => s.closed))).every((ms) => ms < 4_000));
      for (const s of held) s.socket.destroy();
      await until(async () => (await fresh(port, '/v1/stats', { headers: { authorization: `Bearer ${KEY_A}` } }))?.status === 200, 'the API once the held connections closed');
      const counted = await refusals(h);
      assert.ok((counted.connection_limit ?? 0) >= 2, JSON.stringify(counted));
    } finally {
      await h.close();
    }
  });
});

describe('uploads keep a minimum rate instead of the request deadline', () => {
  it('a steady upload outlives the request deadline; one below the rate is closed', async () => {
    const h = await startHarness({ worker: false, server: { httpLimits: { requestTimeoutMs: 400, transferMinBytes: 1_000, transferWindowMs: 300 } } });
    try {
      const port = portOf(h.base);
      const send = async (total: number, chunk: number, everyMs: number) => {
        const s = await raw(port, `POST /v1/uploads HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${KEY_A}\r\nContent-Type: text/plain\r\nContent-Length: ${total}\r\nConnection: close\r\n\r\n`);
        for (let sent = 0; sent < total && !s.socket.destroyed; sent += chunk) {
          s.socket.write('x'.repeat(Math.min(chunk, total - sent)));
          await sleep(everyMs);
        }
        return { ms: await s.closed, data: s.data() };
      };
      // 1 200 bytes every 100 ms for about 1.2 s: three times the request deadline.
      const steady = await send(14_400, 1_200, 100);
      assert.match(steady.data, /^HTTP\/1\.1 201/, steady.data.slice(0, 300));
      assert.ok(steady.ms > 800);
      // 10 bytes every 100 ms: under 1 000 bytes per 300 ms.
      const slow = await send(10_000, 10, 100);
      assert.equal(slow.data, '', 'closed without an answer');
      assert.ok(slow.ms < 2_000, `closed after ${slow.ms} ms`);
      assert.ok(((await refusals(h)).transfer_too_slow ?? 0) >= 1);
    } finally {
      await h.close();
    }
  });
});

describe('Host and Origin', () => {
  it('without API keys, a rebinding Host is refused unless LONGHAUL_ALLOWED_HOSTS names it', async () => {
    const h = await startHarness({ worker: false, apiKeys: null });
    const allowed = await startHarness({ worker: false, apiKeys: null, server: { allowedHosts: ['attacker.example', '.corp.example'] } });
    const keyed = await startHarness({ worker: false });
    try {
      const port = portOf(h.base);
      const get = (base: string, host: string, auth = false) =>
        fresh(portOf(base), '/v1/jobs', { headers: { host, ...(auth ? { authorization: `Bearer ${KEY_A}` } : {}) } });
      const rebound = await get(h.base, `attacker.example:${port}`);
      assert.equal(rebound?.status, 403);
      assert.match(rebound?.text ?? '', /"code":"HOST_NOT_ALLOWED"/);
      assert.match(String(rebound?.headers['content-type']), /^application\/problem\+json/);
      for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'localhost', `app.localhost:${port}`, `192.168.1.20:${port}`]) {
        assert.equal((await get(h.base, host))?.status, 200, host);
      }
      assert.equal((await get(allowed.base, `attacker.example:${portOf(allowed.base)}`))?.status, 200);
      assert.equal((await get(allowed.base, 'Jobs.Corp.Example'))?.status, 200);
      assert.equal((await get(allowed.base, 'elsewhere.example'))?.status, 403);
      // With keys, a rebinding page has no key: Host is not checked.
      assert.equal((await get(keyed.base, `attacker.example:${portOf(keyed.base)}`, true))?.status, 200);
      assert.equal((await refusals(h)).host_not_allowed, 1);
    } finally {
      await Promise.all([h.close(), allowed.close(), keyed.close()]);
    }
  });

  it('a foreign Origin is refused on /v1/uploads, /v1/ws and other state-changing routes, in every mode', async () => {
    const keyed = await startHarness({ worker: false, server: { allowedOrigins: ['https://app.example'] } });
    const open = await startHarness({ worker: false, apiKeys: null });
    try {
      for (const h of [keyed, open]) {
        const port = portOf(h.base);
        const upload = (origin?: string) =>
          fresh(port, '/v1/uploads', {
            method: 'POST',
            headers: { authorization: `Bearer ${KEY_A}`, 'content-type': 'text/plain', ...(origin ? { origin } : {}) },
            body: 'hello',
          });
        const foreign = await upload('http://evil.example');
        assert.equal(foreign?.status, 403);
        assert.match(foreign?.text ?? '', /"code":"ORIGIN_NOT_ALLOWED"/);
        assert.equal((await upload('null'))?.status, 403);
        assert.equal((await upload())?.status, 201, 'no Origin: not a browser');
        assert.equal((await upload(`http://127.0.0.1:${port}`))?.status, 201, 'the server’s own origin');
        // A cancel needs no body: a no-cors fetch could send it.
        const job = await submit(h.base, 't.quick');
        const cancel = await fresh(port, `/v1/jobs/${job.id}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${KEY_A}`, origin: 'http://evil.example' } });
        assert.equal(cancel?.status, 403);
        // Reads are not state-changing (and cross-origin pages cannot read the answer).
        assert.equal((await fresh(port, '/v1/stats', { headers: { authorization: `Bearer ${KEY_A}`, origin: 'http://evil.example' } }))?.status, 200);

        const ws = (origin: string) =>
          new Promise<number>((resolve) => {
            const socket = new WebSocket(`ws://127.0.0.1:${port}/v1/ws`, { origin, headers: { authorization: `Bearer ${KEY_A}` } });
            socket.on('open', () => {
              socket.close();
              resolve(101);
            });
            socket.on('unexpected-response', (_req, res) => {
              resolve(res.statusCode ?? 0);
              res.resume();
            });
            socket.on('error', () => {});
          });
        assert.equal(await ws('http://evil.example'), 403);
        assert.equal(await ws(`http://127.0.0.1:${port}`), 101);
      }
      const port = portOf(keyed.base);
      assert.equal(
        (await fresh(port, '/v1/uploads', { method: 'POST', headers: { authorization: `Bearer ${KEY_A}`, 'content-type': 'text/plain', origin: 'https://app.example' }, body: 'x' }))?.status,
        201,
        'LONGHAUL_ALLOWED_ORIGINS',
      );
      assert.ok(((await refusals(keyed)).origin_not_allowed ?? 0) >= 4);
    } finally {
      await Promise.all([keyed.close(), open.close()]);
    }
  });
});

describe('failed authentication', () => {
  it('is throttled per address (429 with Retry-After) and logged at warn once, without the key', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        cb();
      },
    });
    const h = await startHarness({ worker: false, server: { authThrottle: { maxFailures: 5, windowMs: 1_500 }, logger: pino({ level: 'warn' }, sink) } });
    try {
      const WRONG = 'wrong-key-0123456789-secret';
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) statuses.push((await call(h.base, '/v1/jobs', { key: WRONG })).status);
      assert.deepEqual(statuses, [401, 401, 401, 401, 401]);
      const throttled = await call(h.base, '/v1/jobs', { key: WRONG });
      problemOf(throttled, 429, 'AUTH_THROTTLED');
      const retryAfter = Number(throttled.headers.get('retry-after'));
      assert.ok(retryAfter >= 1 && retryAfter <= 2, String(retryAfter));
      // Even the right key waits: a guesser learns nothing from the answer.
      problemOf(await call(h.base, '/v1/jobs'), 429, 'AUTH_THROTTLED');
      for (let i = 0; i < 20; i++) await call(h.base, '/v1/jobs', { key: WRONG });
      await until(async () => (await call(h.base, '/v1/jobs')).status === 200, 'the window to end', 4_000);
      const warns = lines.map((l) => JSON.parse(l) as { level: number; remoteAddress?: string; msg: string }).filter((l) => l.level === 40);
      const auth = warns.filter((l) => /authentication/.test(l.msg));
      assert.ok(auth.length >= 1 && auth.length <= 2, `one line per address per window, not per request: ${JSON.stringify(auth)}`);
      assert.ok(auth.every((l) => l.remoteAddress === '127.0.0.1'));
      assert.ok(!lines.some((l) => l.includes(WRONG) || l.includes(KEY_A)), 'no key in the log');
      assert.ok(((await refusals(h)).auth_throttled ?? 0) >= 2);
    } finally {
      await h.close();
    }
  });
});

describe('/readyz', () => {
  it('answers a reason code, not the database error', async () => {
    const h = await startHarness({ worker: false });
    try {
      await h.lh.store.close();
      const res = await call(h.base, '/readyz');
      const problem = problemOf(res, 503, 'NOT_READY');
      assert.equal(problem.reason, 'DATABASE_UNAVAILABLE');
      assert.match(String(problem.detail), /details in the server log/);
    } finally {
      await h.close();
    }
  });
});
