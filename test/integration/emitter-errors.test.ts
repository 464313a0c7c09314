/**
 * An error on any emitter the server uses (a client's socket, a blob stream, a PostgreSQL
 * backend, a Redis connection) is handled where it happens: the request or job it concerns
 * ends, the process carries on, and nothing reaches `uncaughtException` or
 * `unhandledRejection` (both are watched for the whole file).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import pino from 'pino';
import WebSocket from 'ws';
import { Redis } from 'ioredis';
import { RedisChannel } from '../../src/channel/redis.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { defineTask } from '../../src/task-api/define.js';
import { startDev } from '../support/dev-process.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { skipUnlessRedis, TEST_REDIS_URL } from '../support/redis.js';

const uncaught: unknown[] = [];
const record = (err: unknown) => uncaught.push(err);
before(() => {
  process.on('uncaughtException', record);
  process.on('unhandledRejection', record);
});
after(() => {
  process.off('uncaughtException', record);
  process.off('unhandledRejection', record);
});

const FILE_BYTES = 2 * 1024 * 1024;
const tasks = [
  defineTask({
    type: 'e.file',
    async run(_input, ctx) {
      await ctx.results.write('big.bin', randomBytes(FILE_BYTES));
      return { ok: true };
    },
  }),
  defineTask({
    type: 'e.steps',
    async run(input, ctx) {
      const { steps = 10, stepMs = 50 } = (input ?? {}) as { steps?: number; stepMs?: number };
      for (let i = 1; i <= steps; i++) {
        await sleep(stepMs, undefined, { signal: ctx.signal });
        ctx.progress({ itemsDone: i, itemsTotal: steps });
      }
      return { steps };
    },
  }),
];

interface Served {
  lh: Longhaul;
  app: FastifyInstance;
  base: string;
  close(): Promise<void>;
}

async function serve(database: string, options: { channel?: RedisChannel; files?: false } = {}): Promise<Served> {
  const lh = await Longhaul.open({ database, tasks, logger: pino({ level: 'silent' }), ...(options.channel ? { channel: options.channel } : {}) });
  await lh.startWorker({ concurrency: 8, pollIntervalMs: 20 });
  const app = await buildServer({ lh, logger: false, keepaliveMs: 100, ...(options.files === false ? { files: false } : {}) });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    lh,
    app,
    base,
    async close() {
      await app.close();
      await lh.close({ drainMs: 0 });
    },
  };
}

async function submit(base: string, type: string, input: unknown = {}): Promise<JobSnapshot> {
  // A careful client: a 5xx while the database reconnects is retried.
  for (let i = 0; ; i++) {
    const res = await fetch(`${base}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ type, input }) });
    if (res.status === 202) return (await res.json()) as JobSnapshot;
    await res.arrayBuffer();
    if (res.status < 500 || i >= 20) throw new Error(`submit answered ${res.status}`);
    await sleep(200);
  }
}

/** The job's end. A read that meets a connection the database just killed fails (that read alone): a careful caller asks again. */
async function settled(lh: Longhaul, id: string): Promise<JobSnapshot> {
  for (let i = 0; ; i++) {
    try {
      return await lh.wait(id, { signal: AbortSignal.timeout(30_000) });
    } catch (err) {
      if ((err as { code?: string }).code !== '57P01' || i >= 5) throw err;
    }
  }
}

async function assertServing(s: Served): Promise<void> {
  const health = await fetch(`${s.base}/healthz`);
  assert.equal(health.status, 200);
  await health.arrayBuffer();
  const job = await submit(s.base, 'e.steps', { steps: 2, stepMs: 5 });
  assert.equal((await settled(s.lh, job.id)).status, 'succeeded');
  assert.deepEqual(uncaught, [], 'nothing reached uncaughtException or unhandledRejection');
}

/** Sends `head` (and `body`) on a bare socket, reads until `readBytes` arrived (0: none), then destroys it. */
async function hangUp(base: string, head: string, body: Buffer | null, readBytes: number): Promise<void> {
  const url = new URL(base);
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(head);
  if (body) socket.write(body);
  if (readBytes > 0) {
    let got = 0;
    await new Promise<void>((resolve) => {
      socket.on('data', (d: Buffer) => {
        got += d.length;
        if (got >= readBytes) resolve();
      });
      socket.once('close', () => resolve());
    });
  }
  socket.destroy();
}

describe('errors on the emitters the server uses (SQLite)', () => {
  let dir: string;
  let s: Served;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lh-emitters-'));
    s = await serve(join(dir, 'lh.db'));
  });
  after(async () => {
    await s?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('clients that destroy their sockets mid-stream, mid-upload and mid-download', async () => {
    const running = await submit(s.base, 'e.steps', { steps: 40, stepMs: 25 });
    const file = await submit(s.base, 'e.file');
    const done = await settled(s.lh, file.id);
    assert.equal(done.status, 'succeeded');
    const download = new URL(done.results[0]?.url as string, s.base);
    const host = new URL(s.base).host;
    await Promise.all([
      hangUp(s.base, `GET /v1/jobs/${running.id}/events HTTP/1.1\r\nHost: ${host}\r\n\r\n`, null, 200),
      hangUp(s.base, `GET /v1/events HTTP/1.1\r\nHost: ${host}\r\n\r\n`, null, 20),
      hangUp(s.base, `POST /v1/uploads HTTP/1.1\r\nHost: ${host}\r\nContent-Type: text/csv\r\nContent-Length: ${1 << 20}\r\n\r\n`, Buffer.alloc(100_000, 97), 0),
      hangUp(s.base, `GET ${download.pathname}${download.search} HTTP/1.1\r\nHost: ${host}\r\n\r\n`, null, 64 * 1024),
      (async () => {
        const ws = new WebSocket(`${s.base.replace('http', 'ws')}/v1/ws`);
        await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
        ws.send(JSON.stringify({ op: 'subscribe', id: running.id }));
        await new Promise((resolve) => ws.once('message', resolve));
        ws.on('error', () => undefined);
        (ws as unknown as { _socket: import('node:net').Socket })._socket.destroy();
      })(),
    ]);
    assert.equal((await settled(s.lh, running.id)).status, 'succeeded');
    await assertServing(s);
  });

  it('a blob stream that fails halfway ends that download, and only it', async () => {
    const file = await submit(s.base, 'e.file');
    const done = await settled(s.lh, file.id);
    const blobs = (await s.lh.files()).blobs;
    const realGet = blobs.get.bind(blobs);
    blobs.get = async (key, range) => {
      const source = await realGet(key, range);
      let sent = 0;
      return Readable.from(
        (async function* () {
          for await (const chunk of source as AsyncIterable<Buffer>) {
            sent += chunk.length;
            if (sent > FILE_BYTES / 2) throw new Error('disk read failed halfway');
            yield chunk;
          }
        })(),
      );
    };
    try {
      const res = await fetch(new URL(done.results[0]?.url as string, s.base));
      assert.equal(res.status, 200);
      await assert.rejects(res.arrayBuffer(), 'the client sees the body cut short, not a complete file');
    } finally {
      blobs.get = realGet;
    }
    const again = await fetch(new URL(done.results[0]?.url as string, s.base));
    assert.equal((await again.arrayBuffer()).byteLength, FILE_BYTES);
    await assertServing(s);
  });
});

describe('errors on the emitters the server uses (PostgreSQL, Redis)', () => {
  let db: TestDatabase;
  const redisSkip = skipUnlessRedis();
  before(async () => {
    db = await createTestDatabase('lh_emitters');
  });
  after(async () => {
    await db?.drop();
  });

  it('every PostgreSQL backend of the process killed at once, while a job runs', async () => {
    const s = await serve(db.url, { files: false });
    try {
      const running = await submit(s.base, 'e.steps', { steps: 30, stepMs: 30 });
      await sleep(200);
      const admin = new pg.Client({ connectionString: db.url });
      await admin.connect();
      try {
        const killed = await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
        assert.ok((killed.rowCount ?? 0) >= 2, `backends killed: ${killed.rowCount}`);
      } finally {
        await admin.end();
      }
      assert.equal((await settled(s.lh, running.id)).status, 'succeeded');
      await assertServing(s);
    } finally {
      await s.close();
    }
  });

  it('the Redis connections closed under the channel, while progress flows', async (t) => {
    const skip = await redisSkip;
    if (skip) return t.skip(skip);
    const name = `lh-emitters-${process.pid}-${randomBytes(3).toString('hex')}`;
    const channel = new RedisChannel({ url: TEST_REDIS_URL, prefix: `${name}:`, connectionName: name });
    const s = await serve(db.url, { channel, files: false });
    const admin = new Redis(TEST_REDIS_URL);
    try {
      const running = await submit(s.base, 'e.steps', { steps: 30, stepMs: 30 });
      await sleep(200);
      const ids = String(await admin.client('LIST'))
        .split('\n')
        .filter((l) => l.includes(`name=${name}:`))
        .map((l) => /\bid=(\d+)/.exec(l)?.[1] as string);
      assert.equal(ids.length, 2, 'the channel’s two connections');
      for (const id of ids) await admin.client('KILL', 'ID', id);
      assert.equal((await settled(s.lh, running.id)).status, 'succeeded');
      await assertServing(s);
    } finally {
      admin.disconnect();
      await s.close();
      await channel.close();
    }
  });
});

describe('an error nothing handled', () => {
  it('longhaul logs it once and exits 70; the job it interrupted runs again after a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'lh-crash-'));
    const database = join(dir, 'lh.db');
    const tasksFile = join(process.cwd(), 'test/fixtures/crash-tasks.mjs');
    try {
      const dev = await startDev(database, { LONGHAUL_LOG_LEVEL: 'info' }, ['--tasks', tasksFile]);
      let out = '';
      dev.child.stdout?.on('data', (d: Buffer) => {
        out += d.toString();
      });
      const exited = new Promise<number | null>((resolve) => dev.child.once('exit', (code) => resolve(code)));
      const job = await submit(dev.base, 'crash.timer');
      assert.equal(await exited, 70);
      const fatal = out.split('\n').filter((l) => l.includes('unexpected error'));
      assert.equal(fatal.length, 1, out);
      assert.match(fatal[0] as string, /a bug in a handler/);
      assert.match(fatal[0] as string, /"kind":"uncaughtException"/);

      const again = await startDev(database, {}, ['--tasks', tasksFile]);
      try {
        const deadline = Date.now() + 30_000;
        let snap: JobSnapshot | null = null;
        while (Date.now() < deadline) {
          snap = (await (await fetch(`${again.base}/v1/jobs/${job.id}`)).json()) as JobSnapshot;
          if (snap.status === 'succeeded') break;
          await sleep(100);
        }
        assert.equal(snap?.status, 'succeeded');
        assert.equal(snap?.attempts, 2);
      } finally {
        again.child.kill('SIGKILL');
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
