/**
 * Channels between processes: the wire codec and progress coalescing on their own, then two
 * buses bridged over REAL PostgreSQL LISTEN/NOTIFY and over REAL Redis pub/sub, each bus on its
 * own connections as two processes would be: they see each other's events and never their
 * own, large payloads travel slim, progress is coalesced, and a killed connection comes back
 * by itself with a `channel:resync`.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect, createServer, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import pino from 'pino';
import { type BusBridge, connectBus } from '../../src/channel/bridge.js';
import { JobBus, type JobEventName, type JobEvents } from '../../src/channel/bus.js';
import type { Channel, ChannelHandlers, Envelope } from '../../src/channel/channel.js';
import { Coalescer } from '../../src/channel/coalescer.js';
import { deliverMessage } from '../../src/channel/deliver.js';
import { createChannel } from '../../src/channel/create.js';
import { NOTIFY_MAX_BYTES, PostgresNotifyChannel, pack } from '../../src/channel/postgres-notify.js';
import { ListenConnection } from '../../src/store/postgres/listen-connection.js';
import { RedisChannel } from '../../src/channel/redis.js';
import { decode, encode, encodeWithin } from '../../src/channel/wire.js';
import type { JobRecord } from '../../src/core/job.js';
import { EMPTY_PROGRESS, type Progress } from '../../src/core/progress.js';
import { defineTask, type JobSnapshot, Longhaul } from '../../src/index.js';
import { redisAnswers, TEST_REDIS_URL } from '../support/redis.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

// ---- helpers ----------------------------------------------------------------------------

const ALL_EVENTS: JobEventName[] = [
  'job:submitted',
  'job:changed',
  'job:progress',
  'jobs:promoted',
  'job:cancel-requested',
  'job:submitted-remote',
  'channel:resync',
];

type Seen = { [K in JobEventName]: { event: K; payload: JobEvents[K] } }[JobEventName];

/** Everything emitted on a bus, in order. */
function record(bus: JobBus): Seen[] {
  const seen: Seen[] = [];
  for (const event of ALL_EVENTS) bus.on(event, (payload) => seen.push({ event, payload } as Seen));
  return seen;
}

function of<K extends JobEventName>(seen: Seen[], event: K): JobEvents[K][] {
  return seen.filter((s) => s.event === event).map((s) => s.payload as JobEvents[K]);
}

async function waitFor<T>(probe: () => T | undefined | null | false | Promise<T | undefined | null | false>, what: string, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function jobRecord(id: string, extra: Partial<JobRecord> = {}): JobRecord {
  const now = Date.now();
  return {
    id,
    tenant: 'acme',
    type: 'csv.import',
    state: 'queued',
    priority: 'normal',
    input: { rows: 3 },
    metadata: null,
    result: null,
    error: null,
    attempts: 0,
    maxAttempts: 3,
    lease: 0,
    workerId: null,
    cancelRequested: false,
    cancelReason: null,
    cancelRequestedAt: null,
    stalled: false,
    parentId: null,
    createdAt: now,
    startedAt: null,
    finishedAt: null,
    updatedAt: now,
    runAt: now,
    expiresAt: null,
    heartbeatAt: null,
    timeoutMs: null,
    heartbeatTimeoutMs: 30_000,
    stallTimeoutMs: null,
    resultTtlMs: 86_400_000,
    checkpoint: null,
    idempotencyKey: null,
    progress: EMPTY_PROGRESS,
    workflow: null,
    wait: null,
    childrenTotal: 0,
    ...extra,
  };
}

function progress(percent: number, message: string | null = null): Progress {
  return { ...EMPTY_PROGRESS, percent, message, updatedAt: new Date().toISOString() };
}

function warnings(): { warn(obj: object, msg?: string): void; messages: string[] } {
  const messages: string[] = [];
  return { messages, warn: (_obj, msg) => messages.push(msg ?? '') };
}

const unique = () => randomBytes(4).toString('hex');

/** A TCP proxy whose `outage()` cuts every connection and refuses new ones while `during` runs. */
async function startProxy(host: string, port: number): Promise<{ port: number; outage(during: () => Promise<void>): Promise<void>; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let refusing = false;
  const server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = connect(port, host);
    sockets.add(client);
    sockets.add(upstream);
    const cut = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const proxyPort = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    port: proxyPort,
    async outage(during) {
      refusing = true;
      for (const s of sockets) s.destroy();
      try {
        await during();
      } finally {
        refusing = false;
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Two buses, each bridged over its own channel instance (its own connections), like two processes. */
interface Pair {
  a: { bus: JobBus; seen: Seen[]; bridge: BusBridge; channel: Channel };
  b: { bus: JobBus; seen: Seen[]; bridge: BusBridge; channel: Channel };
  close(): Promise<void>;
}

async function pair(make: () => Channel, options: Parameters<typeof connectBus>[2] = {}): Promise<Pair> {
  const side = () => {
    const bus = new JobBus();
    const seen = record(bus);
    const channel = make();
    const bridge = connectBus(bus, channel, options);
    return { bus, seen, bridge, channel };
  };
  const a = side();
  const b = side();
  await Promise.all([a.channel.ready(), b.channel.ready()]);
  // Each relay publishes once it knows another listens (at once when it hears the other announce itself).
  for (const c of [a.channel, b.channel]) {
    if (c instanceof PostgresNotifyChannel) await waitFor(() => c.peerState === 'present' || undefined, 'the relays to know each other');
  }
  return {
    a,
    b,
    async close() {
      a.bridge.close();
      b.bridge.close();
      await Promise.all([a.channel.close(), b.channel.close()]);
    },
  };
}

/** Emits one of each relayed event on `bus`, all about job `id`. */
function emitAll(bus: JobBus, id: string): void {
  bus.emit('job:submitted', { job: jobRecord(id, { input: { big: 'x'.repeat(50_000) } }) });
  bus.emit('job:changed', { id, tenant: 'acme', type: 'csv.import', from: 'queued', to: 'running', reason: 'claimed' });
  bus.emit('job:progress', { id, tenant: 'acme', progress: progress(42, 'reading') });
  bus.emit('jobs:promoted', { count: 3 });
  bus.emit('job:cancel-requested', { id, reason: 'user' });
}

/** What the receiving side of `emitAll` must see, in order. */
function assertReceivedAll(seen: Seen[], id: string): void {
  assert.deepEqual(
    seen.map((s) => s.event),
    ['job:submitted-remote', 'job:changed', 'job:progress', 'jobs:promoted', 'job:cancel-requested'],
  );
  assert.deepEqual(of(seen, 'job:submitted-remote')[0], { id, tenant: 'acme', type: 'csv.import', state: 'queued' });
  assert.deepEqual(of(seen, 'job:changed')[0], { id, tenant: 'acme', type: 'csv.import', from: 'queued', to: 'running', reason: 'claimed' });
  const p = of(seen, 'job:progress')[0];
  assert.equal(p?.progress.percent, 42);
  assert.equal(p?.progress.message, 'reading');
  assert.deepEqual(of(seen, 'jobs:promoted')[0], { count: 3 });
  assert.deepEqual(of(seen, 'job:cancel-requested')[0], { id, reason: 'user' });
}

// ---- codec and coalescing (no I/O) --------------------------------------------------------

describe('wire codec', () => {
  it('round-trips every event and refuses malformed or unknown messages', () => {
    const env: Envelope = { origin: 'o1', event: 'job:changed', data: { id: 'j', tenant: 't', type: 'x', from: 'queued', to: 'running', reason: 'r' } };
    assert.deepEqual(decode(encode(env)), env);
    const p: Envelope = { origin: 'o1', event: 'job:progress', data: { id: 'j', tenant: 't', progress: progress(5) } };
    assert.deepEqual(decode(encode(p)), p);
    for (const bad of [
      'not json',
      '[]',
      '{"v":2,"o":"a","e":"jobs:promoted","d":{"count":1}}',
      '{"v":1,"o":"","e":"jobs:promoted","d":{"count":1}}',
      '{"v":1,"o":"a","e":"job:deleted","d":{"id":"j"}}',
      '{"v":1,"o":"a","e":"jobs:promoted","d":{"count":-1}}',
      '{"v":1,"o":"a","e":"job:changed","d":{"id":"j","tenant":"t","type":"x","from":"queued","to":"flying","reason":"r"}}',
      '{"v":1,"o":"a","e":"job:progress","d":{"id":"j","tenant":"t","progress":{"percent":"lots"}}}',
    ]) {
      assert.equal(decode(bad), null, bad);
    }
    const many: Envelope = { origin: 'o1', event: 'jobs:changed', data: { ids: ['a', 'b'], tenant: 't', type: 'x', from: 'running', to: 'succeeded', reason: 'r' } };
    assert.deepEqual(decode(encode(many)), many);
    for (const ids of [[], [''], [1], Array.from({ length: 101 }, (_, i) => `j${i}`)]) {
      assert.equal(decode(JSON.stringify({ v: 1, o: 'a', e: 'jobs:changed', d: { ...many.data, ids } })), null, JSON.stringify(ids).slice(0, 40));
    }
    // Unknown extra fields are not passed on to the bus.
    const extra = decode('{"v":1,"o":"a","e":"job:cancel-requested","d":{"id":"j","reason":"user","evil":true}}');
    assert.deepEqual(extra?.data, { id: 'j', reason: 'user' });
  });

  it('shrinks to fit a size limit: progress becomes null, reasons are cut, identities never', () => {
    const big: Envelope = { origin: 'o', event: 'job:progress', data: { id: 'j', tenant: 't', progress: progress(1, 'é'.repeat(10_000)) } };
    const fitted = encodeWithin(big, NOTIFY_MAX_BYTES);
    assert.ok(fitted !== null);
    assert.equal(decode(fitted)?.event, 'job:progress');
    assert.deepEqual(decode(fitted)?.data, { id: 'j', tenant: 't', progress: null });
    const reason: Envelope = {
      origin: 'o',
      event: 'job:changed',
      data: { id: 'j', tenant: 't', type: 'x', from: 'running', to: 'failed', reason: 'r'.repeat(9000) },
    };
    const cut = decode(encodeWithin(reason, NOTIFY_MAX_BYTES) ?? '');
    assert.ok(cut?.event === 'job:changed' && cut.data.reason.length <= 201 && cut.data.reason.startsWith('rrr'));
    // Every event with a reason is cut the same way; its ids stay whole.
    const many: Envelope = {
      origin: 'o',
      event: 'jobs:changed',
      data: { ids: ['j1', 'j2'], tenant: 't', type: 'x', from: 'running', to: 'failed', reason: 'r'.repeat(9000) },
    };
    const manyCut = decode(encodeWithin(many, NOTIFY_MAX_BYTES) ?? '');
    assert.ok(manyCut?.event === 'jobs:changed' && manyCut.data.reason.length <= 201 && manyCut.data.ids.join() === 'j1,j2');
    const cancel: Envelope = { origin: 'o', event: 'job:cancel-requested', data: { id: 'j', reason: 'r'.repeat(9000) } };
    const cancelCut = decode(encodeWithin(cancel, NOTIFY_MAX_BYTES) ?? '');
    assert.ok(cancelCut?.event === 'job:cancel-requested' && cancelCut.data.reason.length <= 201 && cancelCut.data.id === 'j');
    const hopeless: Envelope = {
      origin: 'o',
      event: 'job:changed',
      data: { id: 'j', tenant: 't', type: 'x'.repeat(9000), from: 'running', to: 'failed', reason: 'r' },
    };
    assert.equal(encodeWithin(hopeless, NOTIFY_MAX_BYTES), null);
  });
});

describe('Coalescer', () => {
  it('sends the first value at once, then at most one per interval per key, the latest winning', async () => {
    const sent: string[] = [];
    const c = new Coalescer<string>(60, (v) => sent.push(v));
    c.offer('a', 'a1');
    c.offer('a', 'a2');
    c.offer('a', 'a3');
    c.offer('b', 'b1');
    assert.deepEqual(sent, ['a1', 'b1']);
    await sleep(90);
    assert.deepEqual(sent, ['a1', 'b1', 'a3']);
    c.offer('a', 'a4');
    c.flush('a');
    assert.deepEqual(sent, ['a1', 'b1', 'a3', 'a4']);
    c.offer('a', 'a5');
    c.flushAll();
    assert.deepEqual(sent, ['a1', 'b1', 'a3', 'a4', 'a5']);
    assert.equal(c.size, 0);
  });
});

// ---- PostgreSQL LISTEN/NOTIFY ------------------------------------------------------------

describe('deliverMessage', () => {
  it("gives each subscriber the others' events, and does not even decode a message every subscriber sent", () => {
    const warnings: string[] = [];
    const logger = { warn: (_o: object, msg?: string) => warnings.push(msg ?? '') };
    const got: Record<string, string[]> = { a: [], b: [], any: [] };
    const sub = (name: string, origin?: string): ChannelHandlers => ({
      ...(origin === undefined ? {} : { origin }),
      event: (e) => got[name]?.push(`${e.origin}:${e.event}`),
      resync: () => undefined,
    });
    const a = sub('a', 'origin-a');
    const env = (origin: string): string => encode({ origin, event: 'jobs:promoted', data: { count: 1 } });
    // Only a subscribes: its own message is dropped undecoded, even when what follows the
    // origin is not valid (no "malformed" warning, so it was never parsed).
    deliverMessage(new Set([a]), `${env('origin-a').slice(0, 24)}garbage`, logger, 'ch');
    assert.deepEqual(warnings, []);
    deliverMessage(new Set([a]), env('origin-b'), logger, 'ch');
    assert.deepEqual(got.a, ['origin-b:jobs:promoted']);
    // a and b: a's message reaches b only; a subscriber without an origin gets everything.
    const b = sub('b', 'origin-b');
    const any = sub('any');
    deliverMessage(new Set([a, b, any]), env('origin-a'), logger, 'ch');
    assert.deepEqual(got.a, ['origin-b:jobs:promoted']);
    assert.deepEqual(got.b, ['origin-a:jobs:promoted']);
    assert.deepEqual(got.any, ['origin-a:jobs:promoted']);
    // A malformed foreign message is refused with a warning.
    deliverMessage(new Set([a]), '{"v":1,"o":"someone-else",oops', logger, 'ch');
    assert.deepEqual(warnings, ['ignored a malformed message on the events channel']);
  });
});

describe('NOTIFY packing', () => {
  it('packs events in order into as few payloads as fit under the limit, one per line', () => {
    const texts = Array.from({ length: 300 }, (_, i) => JSON.stringify({ n: i, pad: 'é'.repeat(i % 97) }));
    const packed = pack(texts);
    assert.ok(packed.length > 1 && packed.length < 20, `${packed.length} payloads`);
    assert.ok(packed.every((p) => Buffer.byteLength(p) <= NOTIFY_MAX_BYTES));
    assert.deepEqual(packed.flatMap((p) => p.split('\n')), texts);
    // Each payload is full: the next event would not have fitted.
    for (let i = 0; i < packed.length - 1; i++) {
      const next = (packed[i + 1] as string).split('\n')[0] as string;
      assert.ok(Buffer.byteLength(packed[i] as string) + 1 + Buffer.byteLength(next) > NOTIFY_MAX_BYTES);
    }
    assert.deepEqual(pack([]), []);
    const big = 'x'.repeat(NOTIFY_MAX_BYTES);
    assert.deepEqual(pack([big, 'a', big]), [big, 'a', big]);
  });
});

describe('PostgreSQL LISTEN/NOTIFY channel', () => {
  let db: TestDatabase;
  const pools: pg.Pool[] = [];
  before(async () => {
    db = await createTestDatabase('lh_channel');
  });
  after(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await db.drop();
  });
  const channelName = () => `lh_events_${unique()}`;

  it('relays every event between two buses both ways, never back to its sender, without loops', async () => {
    const name = channelName();
    // A raw listener counts what actually goes over the wire.
    const raw = new pg.Client({ connectionString: db.url });
    await raw.connect();
    const wire: string[] = [];
    raw.on('notification', (m) => wire.push(m.payload ?? ''));
    await raw.query(`LISTEN "${name}"`);
    const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name }));
    try {
      emitAll(p.a.bus, 'job-a');
      p.b.bus.emit('job:changed', { id: 'job-b', tenant: 'acme', type: 'mail.send', from: 'running', to: 'succeeded', reason: 'done' });
      await waitFor(() => p.b.seen.length >= 6 && p.a.seen.length >= 6, 'both sides to receive');
      await sleep(150); // room for any echo to show up
      // b: its own emit, then a's five, in order.
      assert.equal(p.b.seen[0]?.event, 'job:changed');
      assertReceivedAll(p.b.seen.slice(1), 'job-a');
      // a: its own five, then b's one; nothing of its own came back.
      assert.deepEqual(
        p.a.seen.map((s) => s.event),
        ['job:submitted', 'job:changed', 'job:progress', 'jobs:promoted', 'job:cancel-requested', 'job:changed'],
      );
      assert.equal(of(p.a.seen, 'job:changed')[1]?.id, 'job-b');
      // Exactly one line per local event (relayed events are never published again), and the
      // five a emitted in one tick went out packed together, not as five notifications.
      assert.equal(wire.flatMap((w) => w.split('\n')).length, 6);
      assert.ok(wire.length <= 3, `${wire.length} notifications for 6 events`);
      assert.ok(wire.every((w) => Buffer.byteLength(w) < 8000));
    } finally {
      await p.close();
      await raw.end();
    }
  });

  it("two bridges on one bus do not bounce each other's events to their channels", async () => {
    const [first, second] = [channelName(), channelName()];
    const raw = new pg.Client({ connectionString: db.url });
    await raw.connect();
    const onSecond: string[] = [];
    raw.on('notification', (m) => onSecond.push(m.payload ?? ''));
    await raw.query(`LISTEN "${second}"`);
    // x is bridged to both channels, y to the first only.
    const x = new JobBus();
    const seenX = record(x);
    const y = new JobBus();
    const channels = [first, second, first].map((channel) => new PostgresNotifyChannel({ connectionString: db.url, channel }));
    const [c1, c2, c3] = channels as [PostgresNotifyChannel, PostgresNotifyChannel, PostgresNotifyChannel];
    const bridges = [connectBus(x, c1), connectBus(x, c2), connectBus(y, c3)];
    try {
      await Promise.all(channels.map((c) => c.ready()));
      y.emit('jobs:promoted', { count: 5 });
      await waitFor(() => of(seenX, 'jobs:promoted').length === 1, 'x to receive');
      await sleep(150);
      assert.equal(of(seenX, 'jobs:promoted').length, 1);
      assert.deepEqual(onSecond, [], 'the event relayed onto x was not published on its other channel');
    } finally {
      for (const br of bridges) br.close();
      await Promise.all(channels.map((c) => c.close()));
      await raw.end();
    }
  });

  it('sends large payloads slim: submissions as ids, oversized progress read through getProgress', async () => {
    const name = channelName();
    const stored = new Map<string, Progress>();
    const huge = progress(77, 'm'.repeat(20_000));
    stored.set('job-big', huge);
    const log = warnings();
    const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, logger: log }), {
      getProgress: async (id) => stored.get(id) ?? null,
      logger: log,
    });
    try {
      p.a.bus.emit('job:submitted', { job: jobRecord('job-big', { input: { blob: 'y'.repeat(200_000) }, metadata: { note: 'z'.repeat(50_000) } }) });
      p.a.bus.emit('job:progress', { id: 'job-big', tenant: 'acme', progress: huge });
      p.a.bus.emit('job:changed', { id: 'job-big', tenant: 'acme', type: 'csv.import', from: 'running', to: 'failed', reason: `boom ${'!'.repeat(30_000)}` });
      // Too large even slim (a type name this long): dropped with a warning, the caller unharmed.
      assert.doesNotThrow(() =>
        p.a.bus.emit('job:changed', { id: 'job-x', tenant: 'acme', type: 't'.repeat(10_000), from: 'running', to: 'failed', reason: 'r' }),
      );
      await waitFor(() => p.b.seen.length >= 3, 'the slim events');
      await sleep(100);
      assert.deepEqual(
        p.b.seen.map((s) => s.event),
        ['job:submitted-remote', 'job:progress', 'job:changed'],
      );
      assert.deepEqual(of(p.b.seen, 'job:progress')[0]?.progress, huge);
      assert.ok((of(p.b.seen, 'job:changed')[0]?.reason.length ?? 0) <= 201);
      assert.ok(log.messages.some((m) => m.includes('too large')));
    } finally {
      await p.close();
    }
  });

  it('coalesces progress per job (latest wins) and sends held progress before a state change', async () => {
    const name = channelName();
    const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name }), { progressIntervalMs: 100 });
    try {
      const started = Date.now();
      let n = 0;
      while (Date.now() - started < 450) {
        n++;
        p.a.bus.emit('job:progress', { id: 'j1', tenant: 'acme', progress: progress(n / 10) });
        if (n % 2 === 0) p.a.bus.emit('job:progress', { id: 'j2', tenant: 'acme', progress: progress(n / 10) });
        await sleep(2);
      }
      const last = n / 10;
      await waitFor(() => of(p.b.seen, 'job:progress').some((e) => e.id === 'j1' && e.progress.percent === last), 'the latest j1 progress');
      const j1 = of(p.b.seen, 'job:progress').filter((e) => e.id === 'j1');
      assert.ok(n > 50, `emitted ${n}`);
      // ~450 ms at one per 100 ms: the first at once, then about one per interval, plus the trailing one.
      assert.ok(j1.length >= 2 && j1.length <= 7, `${j1.length} of ${n} j1 progress events relayed`);
      await waitFor(() => of(p.b.seen, 'job:progress').some((e) => e.id === 'j2' && e.progress.percent === (n - (n % 2)) / 10), 'the latest j2 progress');

      // A progress held back by the coalescer goes out before the job's next state change.
      p.a.bus.emit('job:progress', { id: 'j3', tenant: 'acme', progress: progress(10) });
      p.a.bus.emit('job:progress', { id: 'j3', tenant: 'acme', progress: progress(99) });
      p.a.bus.emit('job:changed', { id: 'j3', tenant: 'acme', type: 'x', from: 'running', to: 'succeeded', reason: 'done' });
      await waitFor(() => of(p.b.seen, 'job:changed').some((e) => e.id === 'j3'), 'j3 change');
      const j3 = p.b.seen.filter((s) => (s.payload as { id?: string }).id === 'j3');
      assert.deepEqual(
        j3.map((s) => (s.event === 'job:progress' ? s.payload.progress.percent : s.event)),
        [10, 99, 'job:changed'],
      );
    } finally {
      await p.close();
    }
  });

  it('groups the same change of many jobs into few messages; receivers see one job:changed per job, every job in order', async () => {
    const name = channelName();
    const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name }));
    const wire: string[] = [];
    const tap = new PostgresNotifyChannel({ connectionString: db.url, channel: name });
    const off = tap.subscribe({ event: (e) => wire.push(e.event), resync() {} });
    await tap.ready();
    try {
      const ids = Array.from({ length: 250 }, (_, i) => `job-${String(i).padStart(3, '0')}`);
      // One turn of a worker: 250 completions; a job claimed (a group of its own), then
      // completed (into the first group: what waits must go out first); a progress after a change.
      const claim = (id: string) => p.a.bus.emit('job:changed', { id, tenant: 'acme', type: 'x', from: 'queued', to: 'running', reason: 'claimed' });
      const complete = (id: string) => p.a.bus.emit('job:changed', { id, tenant: 'acme', type: 'x', from: 'running', to: 'succeeded', reason: 'completed' });
      for (const id of ids) complete(id);
      claim('quick');
      complete('quick');
      p.a.bus.emit('job:progress', { id: 'job-001', tenant: 'acme', progress: progress(7) });
      claim('lone');
      await waitFor(() => of(p.b.seen, 'job:changed').some((e) => e.id === 'lone'), 'the last change');
      const changed = of(p.b.seen, 'job:changed');
      assert.deepEqual(
        changed.map((e) => `${e.id}:${e.to}`),
        [...ids.map((id) => `${id}:succeeded`), 'quick:running', 'quick:succeeded', 'lone:running'],
      );
      assert.deepEqual(changed[5], { id: 'job-005', tenant: 'acme', type: 'x', from: 'running', to: 'succeeded', reason: 'completed' });
      const order = p.b.seen.filter((s) => (s.payload as { id?: string }).id === 'job-001').map((s) => s.event);
      assert.deepEqual(order, ['job:changed', 'job:progress'], 'a progress after a change arrives after it');
      await waitFor(() => wire.includes('job:progress') && wire.filter((e) => e === 'job:changed').length >= 2, 'the tap saw everything');
      assert.deepEqual(
        wire,
        ['jobs:changed', 'jobs:changed', 'jobs:changed', 'job:changed', 'job:changed', 'job:progress', 'job:changed'],
        'three messages of at most 100 ids; lone changes as they were',
      );
    } finally {
      off();
      await tap.close();
      await p.close();
    }
  });

  it('reconnects by itself after pg_terminate_backend, emits channel:resync, and events flow again', async () => {
    const name = channelName();
    const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, reconnect: { minMs: 50, maxMs: 500 } }));
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      const ch = p.b.channel as PostgresNotifyChannel;
      const pid = ch.backendPid;
      assert.ok(pid !== null);
      const killed = await admin.query('SELECT pg_terminate_backend($1) AS ok', [pid]);
      assert.equal(killed.rows[0]?.ok, true);
      const resync = await waitFor(() => of(p.b.seen, 'channel:resync')[0], 'channel:resync', 10_000);
      assert.deepEqual(resync, { transport: 'postgres' });
      assert.ok(ch.listening && ch.backendPid !== pid, 'a new listening connection');
      assert.equal(of(p.a.seen, 'channel:resync').length, 0, 'the other side never dropped');
      emitAll(p.a.bus, 'job-after');
      await waitFor(() => p.b.seen.length >= 6, 'events after the reconnect');
      assertReceivedAll(
        p.b.seen.filter((s) => s.event !== 'channel:resync'),
        'job-after',
      );
      // And the other direction (b publishes through its pool, which was not touched).
      p.b.bus.emit('jobs:promoted', { count: 9 });
      await waitFor(() => of(p.a.seen, 'jobs:promoted').some((e) => e.count === 9), 'b → a after the reconnect');
    } finally {
      await admin.end();
      await p.close();
    }
  });

  it('survives a database outage: publishes are dropped while it is down, then it reconnects and resyncs', async () => {
    // A TCP proxy in front of PostgreSQL plays the restart: every connection cut, new ones refused for a while.
    const target = new URL(db.url);
    const proxy = await startProxy(target.hostname, Number(target.port || 5432));
    const viaProxy = new URL(db.url);
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    const name = channelName();
    const log = warnings();
    const down = new PostgresNotifyChannel({ connectionString: viaProxy.toString(), channel: name, logger: log, reconnect: { minMs: 50, maxMs: 200 } });
    const busDown = new JobBus();
    const seenDown = record(busDown);
    const bridgeDown = connectBus(busDown, down);
    const other = new PostgresNotifyChannel({ connectionString: db.url, channel: name });
    const busOther = new JobBus();
    const seenOther = record(busOther);
    const bridgeOther = connectBus(busOther, other);
    try {
      await Promise.all([down.ready(), other.ready()]);
      await proxy.outage(async () => {
        await waitFor(() => !down.listening, 'the listener to notice');
        assert.doesNotThrow(() => busDown.emit('jobs:promoted', { count: 1 }));
        await waitFor(() => log.messages.some((m) => m.includes('could not publish')), 'the dropped publish');
        await sleep(300); // several refused reconnect attempts
      });
      await waitFor(() => of(seenDown, 'channel:resync').length === 1, 'channel:resync after the outage', 10_000);
      // The other side may have counted the listener gone meanwhile: it relays again once it hears it announce itself.
      await waitFor(() => other.peerState === 'present' || undefined, 'the other side to know the listener again');
      busOther.emit('job:cancel-requested', { id: 'j', reason: 'user' });
      await waitFor(() => of(seenDown, 'job:cancel-requested').length === 1, 'events in after the outage');
      busDown.emit('jobs:promoted', { count: 2 });
      await waitFor(() => of(seenOther, 'jobs:promoted').length === 1, 'events out after the outage');
      assert.deepEqual(of(seenOther, 'jobs:promoted'), [{ count: 2 }], 'what was published during the outage is gone, not replayed');
    } finally {
      bridgeDown.close();
      bridgeOther.close();
      await Promise.all([down.close(), other.close()]);
      await proxy.close();
    }
  });

  it("carries a worker's progress and a remote cancel between two Longhaul instances (real consumers)", async () => {
    // Instance A only submits and watches; instance B runs the worker. Store polling is made
    // too slow to matter (watch pollMs, cancelPollMs, heartbeats), so only the channel can
    // bring B's progress to A's watcher and A's cancel to B's running handler in time.
    const slow = defineTask({
      type: 'channel.slow',
      heartbeatIntervalMs: 30_000,
      heartbeatTimeoutMs: 120_000,
      async run(_input, ctx) {
        for (let i = 1; i <= 1000; i++) {
          ctx.progress({ itemsDone: i, itemsTotal: 1000 });
          await sleep(10, undefined, { signal: ctx.signal });
        }
        return 'finished';
      },
    });
    const quiet = pino({ level: 'silent' });
    const options = { database: db.url, tasks: [slow], logger: quiet, heartbeatIntervalMs: 30_000, heartbeatTimeoutMs: 120_000 };
    const [a, b] = [await Longhaul.open(options), await Longhaul.open(options)];
    const name = channelName();
    const chA = new PostgresNotifyChannel({ connectionString: db.url, channel: name });
    const chB = new PostgresNotifyChannel({ connectionString: db.url, channel: name });
    const bridges = [
      connectBus(a.bus, chA, { getProgress: async (id) => (await a.store.getJob({ id }))?.progress ?? null }),
      connectBus(b.bus, chB, { getProgress: async (id) => (await b.store.getJob({ id }))?.progress ?? null }),
    ];
    try {
      await Promise.all([chA.ready(), chB.ready()]);
      await b.startWorker({ concurrency: 1, sweeper: false, cancelPollMs: 60_000 });
      const job = await a.submit('channel.slow', {});
      const seen: JobSnapshot[] = [];
      let cancelledAt = 0;
      for await (const snap of a.watch(job.id, { pollMs: 60_000 })) {
        seen.push(snap);
        if (cancelledAt === 0 && (snap.progress.percent ?? 0) >= 5) {
          cancelledAt = Date.now();
          const requested = await a.cancel(job.id);
          assert.equal(requested.cancelRequested, true);
        }
      }
      const last = seen[seen.length - 1];
      assert.equal(last?.status, 'cancelled');
      assert.ok(Date.now() - cancelledAt < 3000, `cancelled ${Date.now() - cancelledAt} ms after the request (heartbeats every 30 s)`);
      const percents = seen.filter((s) => s.status === 'running').map((s) => s.progress.percent ?? 0);
      assert.ok(percents.length >= 3, `A saw ${percents.length} running snapshots`);
      assert.deepEqual(
        percents,
        [...percents].sort((x, y) => x - y),
        'progress never steps back',
      );
    } finally {
      for (const br of bridges) br.close();
      await Promise.all([a.close({ drainMs: 0 }), b.close({ drainMs: 0 })]);
      await Promise.all([chA.close(), chB.close()]);
    }
  });

  it('publishes through a given pool, and a failing publish is logged and dropped, never thrown', async () => {
    // A pool pointing nowhere: every publish fails.
    const log = warnings();
    const bus = new JobBus();
    const broken = new PostgresNotifyChannel({
      connectionString: 'postgres://postgres@127.0.0.1:1/nowhere',
      channel: channelName(),
      logger: log,
      reconnect: { minMs: 1000, maxMs: 1000 },
    });
    const bridge = connectBus(bus, broken);
    assert.doesNotThrow(() => emitAll(bus, 'lost'));
    await waitFor(() => log.messages.some((m) => m.includes('could not publish')), 'the publish warning');
    bridge.close();
    await broken.close();
    await assert.rejects(broken.ready(), /closed before it connected/);

    // The store's pool can carry the publishes.
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    pools.push(pool);
    const name = channelName();
    const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, pool }));
    try {
      p.a.bus.emit('jobs:promoted', { count: 1 });
      await waitFor(() => of(p.b.seen, 'jobs:promoted').length === 1, 'an event sent through the shared pool');
    } finally {
      await p.close();
    }
    assert.equal((await pool.query('SELECT 1 AS one')).rows[0]?.one, 1, 'closing the channel leaves a given pool open');
  });

  it('a channel on a given LISTEN connection shares it, and closing the channel leaves it open for its other channels', async () => {
    const listen = new ListenConnection({ connectionString: db.url, application_name: 'lh-test:listen' }, undefined, { minMs: 50, maxMs: 500 });
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      const other = channelName();
      const heard: (string | undefined)[] = [];
      const log: string[] = [];
      listen.listen(other, { notification: (p) => heard.push(p), up: () => log.push('up'), down: () => log.push('down') });
      await waitFor(() => log.includes('up'), 'the shared connection up');
      const name = channelName();
      let made = 0; // a (made first) opens its own listener; b is given the shared one
      const p = await pair(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, ...(made++ === 1 ? { listen } : {}) }));
      const b = p.b.channel as PostgresNotifyChannel;
      const a = p.a.channel as PostgresNotifyChannel;
      assert.equal(b.backendPid, listen.backendPid, 'b listens on the shared connection');
      assert.notEqual(a.backendPid, listen.backendPid, 'a, given none, opened its own');
      await admin.query('SELECT pg_notify($1, $2)', [other, 'one']);
      await waitFor(() => heard.includes('one'), 'the other channel heard');
      p.a.bus.emit('jobs:promoted', { count: 1 });
      await waitFor(() => of(p.b.seen, 'jobs:promoted').length === 1, 'the relay heard on the shared connection');

      // Killed: every channel on it hears down, then up on the new connection; b resynchronises.
      const pid = listen.backendPid;
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      await waitFor(() => of(p.b.seen, 'channel:resync').length === 1, "b's resync", 10_000);
      assert.deepEqual(log, ['up', 'down', 'up']);
      assert.ok(listen.connected && listen.backendPid !== pid && b.backendPid === listen.backendPid, 'both on the new connection');
      await admin.query('SELECT pg_notify($1, $2)', [other, 'two']);
      await waitFor(() => heard.includes('two'), 'the other channel heard after the reconnect');

      // Closing the channels: the shared connection stays, UNLISTENs the relay's channel and still hears the other.
      await p.close();
      assert.ok(listen.connected, 'closing a channel leaves a given LISTEN connection open');
      const channels = await admin.query('SELECT count(*)::integer AS n FROM pg_stat_activity WHERE application_name = $1', ['lh-test:listen']);
      assert.equal(channels.rows[0]?.n, 1, 'one shared connection');
      await admin.query('SELECT pg_notify($1, $2)', [other, 'three']);
      await waitFor(() => heard.includes('three'), 'the other channel heard after the relay left');
    } finally {
      await admin.end();
      await listen.close();
    }
  });
});

// ---- Redis pub/sub ----------------------------------------------------------------------

const REDIS_URL = TEST_REDIS_URL;
const redisUp = await redisAnswers();

describe('Redis channel', { skip: redisUp ? false : `Redis was not reachable at ${REDIS_URL} (set LONGHAUL_TEST_REDIS_URL)` }, () => {
  const prefix = `longhaul-test-${process.pid}-${unique()}:`;
  let admin: Redis;
  before(() => {
    admin = new Redis(REDIS_URL);
  });
  after(async () => {
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  });
  /** Channels with their own connection names (CLIENT LIST tells them apart). */
  const make =
    (extra: Partial<ConstructorParameters<typeof RedisChannel>[0]> = {}) =>
    () =>
      new RedisChannel({ url: REDIS_URL, prefix, connectionName: `lh-test-${unique()}`, ...extra });

  it('relays every event between two buses both ways, never back to its sender', async () => {
    const p = await pair(make());
    try {
      emitAll(p.a.bus, 'job-r');
      p.b.bus.emit('job:cancel-requested', { id: 'job-rb', reason: 'timeout' });
      await waitFor(() => p.b.seen.length >= 6 && p.a.seen.length >= 6, 'both sides to receive');
      await sleep(150);
      assertReceivedAll(p.b.seen.slice(1), 'job-r');
      assert.deepEqual(p.a.seen.slice(5), [{ event: 'job:cancel-requested', payload: { id: 'job-rb', reason: 'timeout' } }]);
    } finally {
      await p.close();
    }
  });

  it('keeps the latest progress per job under a TTL, readable from any process', async () => {
    const p = await pair(make({ progressTtlMs: 60_000 }));
    const short = make({ progressTtlMs: 1000 })();
    try {
      p.a.bus.emit('job:progress', { id: 'job-p', tenant: 'acme', progress: progress(10) });
      p.a.bus.emit('job:progress', { id: 'job-p', tenant: 'acme', progress: progress(55, 'half') });
      const reader = p.b.channel as RedisChannel;
      await waitFor(() => of(p.b.seen, 'job:progress').some((e) => e.progress.percent === 55), 'the coalesced progress');
      const got = await reader.getProgress('job-p');
      assert.equal(got?.percent, 55);
      assert.equal(got?.message, 'half');
      const ttl = await admin.pttl(reader.progressKey('job-p'));
      assert.ok(ttl > 50_000 && ttl <= 60_000, `PTTL ${ttl}`);
      assert.equal(await reader.getProgress('no-such-job'), null);

      await short.ready();
      short.publish({ origin: 'x', event: 'job:progress', data: { id: 'job-short', tenant: 'acme', progress: progress(1) } });
      assert.equal((await waitFor(() => short.getProgress('job-short'), 'the short-lived snapshot'))?.percent, 1);
      assert.ok((await admin.pttl(short.progressKey('job-short'))) <= 1000);
      await sleep(1100);
      assert.equal(await short.getProgress('job-short'), null, 'the snapshot expired after its TTL');
    } finally {
      await short.close();
      await p.close();
    }
  });

  it('resubscribes after CLIENT KILL, emits channel:resync, and events flow again', async () => {
    const p = await pair(make());
    try {
      const name = (p.b.channel as RedisChannel).connectionName;
      const line = String(await admin.client('LIST'))
        .split('\n')
        .find((l) => l.includes(`name=${name}:sub `));
      const id = /\bid=(\d+)/.exec(line ?? '')?.[1];
      assert.ok(id, `b's subscribed connection in CLIENT LIST`);
      assert.equal(await admin.client('KILL', 'ID', id), 1);
      await waitFor(() => of(p.b.seen, 'channel:resync').length === 1, 'channel:resync', 10_000);
      assert.equal(of(p.a.seen, 'channel:resync').length, 0, 'the other side never dropped');
      assert.deepEqual(of(p.b.seen, 'channel:resync')[0], { transport: 'redis' });
      emitAll(p.a.bus, 'job-k');
      await waitFor(() => p.b.seen.length >= 6, 'events after the reconnect');
      assertReceivedAll(
        p.b.seen.filter((s) => s.event !== 'channel:resync'),
        'job-k',
      );
    } finally {
      await p.close();
    }
  });
});

// ---- choosing a channel -----------------------------------------------------------------

describe('createChannel', () => {
  it('picks Redis when a Redis URL is set, NOTIFY for PostgreSQL, nothing for SQLite', async () => {
    assert.equal(await createChannel({ databaseUrl: './longhaul.db', env: {} }), null);
    const pgChannel = await createChannel({ databaseUrl: 'postgres://postgres@127.0.0.1:5432/test', env: {} });
    assert.ok(pgChannel instanceof PostgresNotifyChannel);
    await pgChannel.close();
    const redisChannel = await createChannel({ databaseUrl: 'postgres://postgres@127.0.0.1:5432/test', env: { LONGHAUL_REDIS_URL: REDIS_URL } });
    assert.ok(redisChannel instanceof RedisChannel);
    await redisChannel.close();
    assert.equal(await createChannel({ databaseUrl: './x.db', env: { LONGHAUL_REDIS_URL: '' } }), null);
    await assert.rejects(() => createChannel({ databaseUrl: './x.db', env: { LONGHAUL_REDIS_URL: 'localhost:6379' } }), /LONGHAUL_REDIS_URL must be a redis:\/\//);
  });
});
