/**
 * How Longhaul.open wires the events channel (src/channel) into a process, tested in-process
 * with two Longhaul instances on one database (two "processes" that share nothing but it):
 *
 * - which channel is picked: none on SQLite, NOTIFY on PostgreSQL, Redis with a Redis URL;
 * - a watch in A follows a job run by B's worker from relayed events alone (A reads the store
 *   once a minute at most), including a progress too large for a NOTIFY;
 * - a cancel made in A reaches B's running handler through the relay (B polls once a minute);
 * - A's tenant-wide feed shows what B submits and changes;
 * - the events connection killed: it reconnects, watches resynchronise, relaying goes on;
 * - Redis unreachable at start: the process starts anyway and works; Redis cut and back
 *   (through a proxy this test owns): relaying resumes after a resync.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket, connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import pino from 'pino';
import { defineTask, type JobSnapshot, Longhaul, type OpenOptions, type PostgresStore } from '../../src/index.js';
import { isRelayed } from '../../src/channel/bridge.js';
import { PostgresNotifyChannel } from '../../src/channel/postgres-notify.js';
import { RedisChannel } from '../../src/channel/redis.js';
import { FeedHub } from '../../src/server/hub.js';
import { tempDir, waitFor } from '../fixtures/process-harness.js';
import { skipUnlessRedis, TEST_REDIS_URL } from '../support/redis.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const quiet = pino({ level: 'silent' });
const REDIS_URL = TEST_REDIS_URL;
/** So long that only relayed events can make a watch move within a test. */
const NO_POLL = 60_000;

const steps = defineTask({
  type: 'wire.steps',
  async run(input: { n: number; ms: number; message?: number }, ctx) {
    for (let i = 1; i <= input.n; i++) {
      await sleep(input.ms);
      ctx.progress({ itemsDone: i, itemsTotal: input.n, ...(input.message ? { message: 'x'.repeat(input.message) } : {}) });
    }
    return { done: input.n };
  },
});
const waits = defineTask({
  type: 'wire.waits',
  async run(_input: unknown, ctx) {
    ctx.progress({ stage: 'waiting' });
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    ctx.signal.throwIfAborted();
  },
});
const tasks = [steps, waits];

async function collect(lh: Longhaul, id: string, timeoutMs = 30_000): Promise<JobSnapshot[]> {
  const out: JobSnapshot[] = [];
  const signal = AbortSignal.timeout(timeoutMs);
  for await (const s of lh.watch(id, { pollMs: NO_POLL, signal })) out.push(s);
  if (signal.aborted) throw new Error(`the watch of job ${id} did not end within ${timeoutMs} ms (last: ${out.at(-1)?.status})`);
  return out;
}

function distinctProgress(snaps: JobSnapshot[]): number {
  return new Set(snaps.filter((s) => s.status === 'running' && s.progress.itemsDone !== null).map((s) => s.progress.itemsDone)).size;
}

async function terminate(url: string, applicationName: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const res = await c.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1', [applicationName]);
    return res.rowCount ?? 0;
  } finally {
    await c.end();
  }
}

/** Two instances on one PostgreSQL database: A watches, B works. */
async function pair(db: TestDatabase, extra: Partial<OpenOptions> = {}): Promise<{ a: Longhaul; b: Longhaul; close(): Promise<void> }> {
  const base = { database: db.url, tasks, logger: quiet, redisUrl: '', ...extra };
  const a = await Longhaul.open(base);
  const b = await Longhaul.open(base);
  // Each relay publishes once it knows the other listens (at once when it hears it announce itself).
  for (const c of [a.channel, b.channel]) {
    if (c instanceof PostgresNotifyChannel) await waitFor(() => c.peerState === 'present' || undefined, 'the relays to know each other');
  }
  return {
    a,
    b,
    async close() {
      await Promise.all([a.close({ drainMs: 0 }), b.close({ drainMs: 0 })]);
    },
  };
}

describe('the channel Longhaul.open picks', () => {
  it('SQLite without Redis: none; a malformed Redis URL is refused at open', async () => {
    const tmp = tempDir('lh-wire-');
    try {
      const lh = await Longhaul.open({ database: join(tmp.dir, 'a.db'), tasks, logger: quiet, redisUrl: '' });
      assert.equal(lh.channel, null);
      await lh.close();
      await assert.rejects(Longhaul.open({ database: join(tmp.dir, 'b.db'), tasks, logger: quiet, redisUrl: 'localhost:6379' }), /LONGHAUL_REDIS_URL \(--redis-url\) must be a redis:\/\//);
    } finally {
      tmp.remove();
    }
  });

  it('Redis unreachable at start: the process starts after a short wait, warns, and works', async () => {
    const tmp = tempDir('lh-wire-');
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const warnings: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => warnings.push(line) });
    const started = Date.now();
    const lh = await Longhaul.open({ database: join(tmp.dir, 'r.db'), tasks, logger, redisUrl: `redis://127.0.0.1:${port}` });
    try {
      assert.equal(lh.channel?.transport, 'redis');
      assert.ok(Date.now() - started < 20_000);
      assert.ok(warnings.some((w) => w.includes('events channel is not up yet')));
      await lh.startWorker({ concurrency: 2 });
      const job = await lh.submit('wire.steps', { n: 3, ms: 5 });
      const snaps = await collect(lh, job.id);
      assert.equal(snaps.at(-1)?.status, 'succeeded');
    } finally {
      await lh.close({ drainMs: 0 });
      tmp.remove();
    }
  });
});

describe('LISTEN/NOTIFY between two instances on one PostgreSQL', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase('lh_wire');
  });
  after(async () => {
    await db?.drop();
  });

  it('a watch in A follows the job B runs from relayed events alone, a progress too large for NOTIFY included; a cancel in A reaches B at once', async () => {
    // B heartbeats every 15 s and polls for cancel requests once a minute: within the 5 s
    // allowed below, only the relayed request can reach its handler.
    const { a, b, close } = await pair(db, { heartbeatIntervalMs: 15_000 });
    try {
      assert.equal(a.channel?.transport, 'postgres');
      await b.startWorker({ concurrency: 4, cancelPollMs: NO_POLL });
      const job = await a.submit('wire.steps', { n: 20, ms: 60 });
      const snaps = await collect(a, job.id);
      assert.equal(snaps.at(-1)?.status, 'succeeded');
      assert.ok(distinctProgress(snaps) >= 8, `A saw ${distinctProgress(snaps)} progress steps`);

      // 9 000 characters of message: over the 8 000-byte NOTIFY limit, read from the store instead.
      const big = await a.submit('wire.steps', { n: 6, ms: 150, message: 9000 });
      const bigSnaps = await collect(a, big.id);
      assert.equal(bigSnaps.at(-1)?.status, 'succeeded');
      const withMessage = bigSnaps.filter((s) => s.status === 'running' && s.progress.message?.length === 9000);
      assert.ok(distinctProgress(withMessage) >= 2, `A saw ${distinctProgress(withMessage)} large progress values`);

      // Cancel through A; B checks the store for cancel requests once a minute: only the relay can tell it.
      const waiting = await a.submit('wire.waits');
      await waitFor(async () => (await a.get(waiting.id))?.status === 'running', 'the job to run on B', 20_000);
      const t0 = Date.now();
      await a.cancel(waiting.id);
      const end = await waitFor(async () => {
        const s = await a.get(waiting.id);
        return s?.status === 'cancelled' ? s : undefined;
      }, 'the job to be cancelled by its handler on B');
      assert.ok(Date.now() - t0 < 5_000, `cancelled ${Date.now() - t0} ms after the request`);
      assert.equal(end.error?.code, 'CANCELLED');
    } finally {
      await close();
    }
  });

  it("A's tenant-wide feed (/v1/events) shows jobs submitted and changed through B", async () => {
    const { a, b, close } = await pair(db);
    const feed = new FeedHub(a);
    try {
      const seen: JobSnapshot[] = [];
      feed.subscribe('default', (s) => seen.push(s));
      const job = await b.submit('wire.steps', { n: 2, ms: 10 });
      await waitFor(() => seen.some((s) => s.id === job.id && s.status === 'queued'), "the submission in A's feed");
      // Which events came from the other process: B's worker's changes reach A relayed; A's own are local.
      const relayedOnA: boolean[] = [];
      const localOnB: boolean[] = [];
      a.bus.on('job:changed', (e) => e.id === job.id && relayedOnA.push(isRelayed(e)));
      b.bus.on('job:changed', (e) => e.id === job.id && localOnB.push(isRelayed(e)));
      await b.startWorker({ concurrency: 1 });
      await waitFor(() => seen.some((s) => s.id === job.id && s.status === 'succeeded'), "the completion in A's feed");
      await waitFor(() => relayedOnA.length >= 2, 'the claim and the completion relayed to A');
      assert.ok(relayedOnA.every(Boolean), 'on A, B\'s changes are relayed');
      assert.ok(localOnB.length >= 2 && !localOnB.some(Boolean), 'on B, they are local');
    } finally {
      feed.close();
      await close();
    }
  });

  it('one LISTEN connection per process, for wake-ups and events alike; killed, it reconnects, watches resynchronise, relaying and waking go on', async () => {
    const { a, b, close } = await pair(db);
    try {
      await b.startWorker({ concurrency: 2 });
      const resyncs: string[] = [];
      a.bus.on('channel:resync', (e) => resyncs.push(e.transport));
      const job = await a.submit('wire.steps', { n: 40, ms: 75 });
      const watching = collect(a, job.id);
      await waitFor(async () => (await a.get(job.id))?.progress.itemsDone, 'progress');
      // A (events only) and B (events and the worker's wake-ups) hold one dedicated LISTEN connection each.
      assert.deepEqual(await dedicated(db.url), { 'longhaul:listen': 2 });
      const store = b.store as PostgresStore;
      await waitFor(() => store.listenState.connected, "B's worker to listen for wake-ups");
      const wake = store.listenState;
      assert.equal(await terminate(db.url, 'longhaul:listen'), 2, 'both LISTEN connections were ended');
      const snaps = await watching;
      assert.equal(snaps.at(-1)?.status, 'succeeded');
      await waitFor(() => resyncs.length > 0, 'A to resynchronise', 15_000);
      // Relaying works again: a new job is followed from events alone.
      const next = await a.submit('wire.steps', { n: 15, ms: 60 });
      const nextSnaps = await collect(a, next.id);
      assert.equal(nextSnaps.at(-1)?.status, 'succeeded');
      assert.ok(distinctProgress(nextSnaps) >= 6, `A saw ${distinctProgress(nextSnaps)} progress steps after reconnecting`);
      // B's wake-ups came back on the new connection, which is again the only one.
      const again = store.listenState;
      assert.ok(again.connected && again.backendPid !== wake.backendPid, "B's worker listens for wake-ups on a new connection");
      assert.deepEqual(await dedicated(db.url), { 'longhaul:listen': 2 });
    } finally {
      await close();
    }
  });
});

/** Connections outside the pools (LISTEN, sweeper lock) in the test database, by application_name. */
async function dedicated(url: string): Promise<Record<string, number>> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const res = await c.query(
      "SELECT application_name AS name, count(*)::integer AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'longhaul:%' AND application_name <> 'longhaul:sweeper' GROUP BY 1 ORDER BY 1",
    );
    return Object.fromEntries(res.rows.map((r) => [r.name, r.n]));
  } finally {
    await c.end();
  }
}

/** A TCP proxy to Redis that the test can cut (every connection dropped, new ones refused) and restore. */
class CuttableProxy {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly target: URL) {}

  async up(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(Number(this.target.port || 6379), this.target.hostname);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as { port: number }).port;
    this.server = server;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    const closed = server ? new Promise((resolve) => server.close(resolve)) : Promise.resolve();
    for (const s of this.sockets) s.destroy();
    await closed;
  }
}


const redisSkip = await skipUnlessRedis();

describe('Redis between two instances', { skip: redisSkip }, () => {
  it('Redis cut and back: jobs keep running meanwhile, the channel reconnects, watches resynchronise, relaying resumes', async () => {
    const proxy = new CuttableProxy(new URL(REDIS_URL));
    await proxy.up();
    const tmp = tempDir('lh-wire-redis-');
    const prefix = `lhwire:${process.pid}:${Date.now()}:`;
    const base = { database: join(tmp.dir, 'shared.db'), tasks, logger: quiet, redisUrl: `redis://127.0.0.1:${proxy.port}`, redisPrefix: prefix };
    const a = await Longhaul.open(base);
    const b = await Longhaul.open(base);
    try {
      assert.equal(a.channel?.transport, 'redis');
      await b.startWorker({ concurrency: 2 });
      const first = await a.submit('wire.steps', { n: 15, ms: 60 });
      const firstSnaps = await collect(a, first.id);
      assert.ok(distinctProgress(firstSnaps) >= 6, `A saw ${distinctProgress(firstSnaps)} progress steps over Redis`);

      const resyncs: string[] = [];
      a.bus.on('channel:resync', (e) => resyncs.push(e.transport));
      await proxy.cut();
      // Redis is gone: work goes on (the store is the truth), A sees it when it reads.
      const during = await a.submit('wire.steps', { n: 3, ms: 10 });
      await waitFor(async () => (await a.get(during.id))?.status === 'succeeded', 'the job to succeed while Redis is down', 20_000);
      await proxy.up();
      await waitFor(() => resyncs.includes('redis'), 'A to resynchronise after Redis came back', 30_000);
      // Subscribed again, and able to publish again (the two connections come back independently).
      await waitFor(() => [a.channel, b.channel].every((c) => c instanceof RedisChannel && c.listening && c.publishing), 'both channels to be up again', 30_000);
      const after = await a.submit('wire.steps', { n: 15, ms: 60 });
      const afterSnaps = await collect(a, after.id);
      assert.equal(afterSnaps.at(-1)?.status, 'succeeded');
      assert.ok(distinctProgress(afterSnaps) >= 6, `A saw ${distinctProgress(afterSnaps)} progress steps after Redis came back`);
    } finally {
      await Promise.all([a.close({ drainMs: 0 }), b.close({ drainMs: 0 })]);
      await proxy.cut();
      const r = new Redis(REDIS_URL);
      const keys = await r.keys(`${prefix}*`);
      if (keys.length > 0) await r.del(...keys);
      r.disconnect();
      tmp.remove();
    }
  });
});
