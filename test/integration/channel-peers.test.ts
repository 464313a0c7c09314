/**
 * The relay's peers: a process alone on its database (no other Longhaul LISTEN connection in
 * pg_stat_activity) publishes nothing, starts publishing once another process listens, and
 * stops again when that one leaves. `peerCheckMs: 0` never counts, and a count that fails
 * publishes. The bridge does not even group events while its channel has no peers.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { connectBus } from '../../src/channel/bridge.js';
import { JobBus, type JobEvents } from '../../src/channel/bus.js';
import type { Channel, ChannelHandlers, Envelope } from '../../src/channel/channel.js';
import { PostgresNotifyChannel } from '../../src/channel/postgres-notify.js';
import { ListenConnection } from '../../src/store/postgres/listen-connection.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

async function waitFor(probe: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The channel's peer counts (its pg_stat_activity statement) on `pool` get `answer`'s result; every other statement runs. */
function answerCounts(pool: pg.Pool, answer: () => Promise<unknown>): void {
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  (pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args: unknown[]) =>
    typeof args[0] === 'string' && args[0].includes('pg_stat_activity') ? answer() : query(...args);
}

const change = (id: string): JobEvents['job:changed'] => ({ id, tenant: 'acme', type: 'csv.import', from: 'queued', to: 'running', reason: 'claimed' });

describe('NOTIFY relay peers', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase('lh_channel_peers');
  });
  after(async () => {
    await db.drop();
  });

  /** A plain connection LISTENing on `name` (its application_name is not a Longhaul listener's): what went over the wire. */
  async function wireTap(name: string): Promise<{ lines: string[]; end(): Promise<void> }> {
    const raw = new pg.Client({ connectionString: db.url, application_name: 'lh-test-tap' });
    await raw.connect();
    const lines: string[] = [];
    raw.on('notification', (m) => lines.push(...(m.payload ?? '').split('\n')));
    await raw.query(`LISTEN "${name}"`);
    return { lines, end: () => raw.end() };
  }

  function side(make: () => PostgresNotifyChannel) {
    const bus = new JobBus();
    const heard: string[] = [];
    bus.on('job:changed', (e) => heard.push(e.id));
    const channel = make();
    const bridge = connectBus(bus, channel);
    return {
      bus,
      heard,
      channel,
      async close() {
        bridge.close();
        await channel.close();
      },
    };
  }

  it('a lone process publishes nothing; it does once another process listens, and stops when that one leaves', async () => {
    const name = `lh_peers_${randomBytes(4).toString('hex')}`;
    const tap = await wireTap(name);
    const a = side(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, peerCheckMs: 50 }));
    try {
      await a.channel.ready();
      await waitFor(() => !a.channel.hasPeers(), 'a to count no peers');
      a.bus.emit('job:changed', change('alone-1'));
      a.bus.emit('jobs:promoted', { count: 1 });
      await sleep(200);
      assert.deepEqual(tap.lines, [], 'nothing was published while nobody else listened (the tap is not a Longhaul listener)');

      // Another process's relay (its own `:events` connection) joins.
      const b = side(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, peerCheckMs: 50 }));
      try {
        await b.channel.ready();
        await waitFor(() => a.channel.hasPeers(), 'a to count b');
        await waitFor(() => b.channel.hasPeers(), 'b to count a');
        a.bus.emit('job:changed', change('shared-1'));
        await waitFor(() => b.heard.includes('shared-1'), 'b to hear a');
        b.bus.emit('job:changed', change('shared-2'));
        await waitFor(() => a.heard.includes('shared-2'), 'a to hear b');
        assert.ok(!b.heard.includes('alone-1'), 'what a did alone was never sent');
      } finally {
        await b.close();
      }
      await waitFor(() => !a.channel.hasPeers(), 'a to be alone again');
      const before = tap.lines.length;
      a.bus.emit('job:changed', change('alone-2'));
      await sleep(200);
      assert.equal(tap.lines.length, before, 'alone again: nothing published');

      // A store's LISTEN connection (`<name>:listen`, for wake-ups) is a peer too, whatever it listens on.
      const store = new ListenConnection({ connectionString: db.url, application_name: 'lh-test:listen' }, undefined);
      const ups: string[] = [];
      store.listen('lh_other', { notification: () => undefined, up: () => ups.push('up'), down: () => undefined });
      try {
        await waitFor(() => ups.length > 0, 'the other LISTEN connection up');
        await waitFor(() => a.channel.hasPeers(), 'a to count the store listener');
        a.bus.emit('job:changed', change('seen-by-store'));
        await waitFor(() => tap.lines.some((l) => l.includes('seen-by-store')), 'the change published');
      } finally {
        await store.close();
      }
    } finally {
      await a.close();
      await tap.end();
    }
  });

  it('a lone channel relays to a newcomer as soon as the newcomer listens, not at its next count', async () => {
    const name = `lh_peers_${randomBytes(4).toString('hex')}`;
    // A minute between counts: only the first count (none) and the newcomer's announcement can tell.
    const a = side(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, peerCheckMs: 60_000 }));
    try {
      await a.channel.ready();
      await waitFor(() => a.channel.peerState === 'absent', 'a to count no peers');
      const b = side(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, peerCheckMs: 60_000 }));
      try {
        await b.channel.ready();
        await waitFor(() => a.channel.peerState === 'present', 'a to hear b announce itself', 2000);
        a.bus.emit('job:changed', change('after-hello'));
        await waitFor(() => b.heard.includes('after-hello'), 'b to hear a');
      } finally {
        await b.close();
      }
    } finally {
      await a.close();
    }
  });

  it('peers once seen are forgotten only after three empty counts in a row; never seen, at the first', async () => {
    const name = `lh_peers_${randomBytes(4).toString('hex')}`;
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    // The counts answer what the test says, one per count made; each count first notes the
    // state the one before it left.
    const answers = [0, 1, 0, 0, 0, 2, 0];
    const states: string[] = [];
    let a: PostgresNotifyChannel | undefined;
    answerCounts(pool, () => {
      states.push(a?.peerState ?? 'none');
      const n = answers.shift();
      return n === undefined ? Promise.reject(new Error('no answer queued')) : Promise.resolve({ rows: [{ n }] });
    });
    a = new PostgresNotifyChannel({ connectionString: db.url, channel: name, pool, peerCheckMs: 30 });
    try {
      await a.ready();
      await waitFor(() => states.length >= 9, 'nine counts');
      assert.deepEqual(states.slice(0, 9), [
        'unknown', // before the first
        'absent', // 0, and no peer ever seen: at once
        'present', // 1
        'present', // 0: once
        'present', // 0: twice
        'absent', // 0: three times in a row
        'present', // 2
        'present', // 0: once
        'unknown', // the count failed: not known, publish
      ]);
      assert.equal(a.hasPeers(), true);
    } finally {
      await a.close();
      await pool.end();
    }
  });

  it('peerCheckMs 0 never counts: a lone channel publishes everything', async () => {
    const name = `lh_peers_${randomBytes(4).toString('hex')}`;
    const tap = await wireTap(name);
    const a = side(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, peerCheckMs: 0 }));
    try {
      await a.channel.ready();
      await sleep(100);
      assert.equal(a.channel.hasPeers(), true);
      a.bus.emit('job:changed', change('always'));
      await waitFor(() => tap.lines.some((l) => l.includes('always')), 'the change published');
    } finally {
      await a.close();
      await tap.end();
    }
    assert.throws(() => new PostgresNotifyChannel({ connectionString: db.url, peerCheckMs: -1 }), /peerCheckMs must be a non-negative integer/);
    assert.throws(() => new PostgresNotifyChannel({ connectionString: db.url, channel: 'longhaul_peers' }), /"longhaul_peers" is reserved/);
  });

  it('a count that fails publishes: peers not known count as present', async () => {
    const name = `lh_peers_${randomBytes(4).toString('hex')}`;
    const tap = await wireTap(name);
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    let counts = 0;
    // The count fails (say, a role refused pg_stat_activity); the NOTIFYs go through.
    answerCounts(pool, () => {
      counts++;
      return Promise.reject(new Error('permission denied'));
    });
    const a = side(() => new PostgresNotifyChannel({ connectionString: db.url, channel: name, pool, peerCheckMs: 50 }));
    try {
      await a.channel.ready();
      await waitFor(() => counts >= 2, 'two failed counts');
      assert.equal(a.channel.hasPeers(), true);
      a.bus.emit('job:changed', change('unknown-peers'));
      await waitFor(() => tap.lines.some((l) => l.includes('unknown-peers')), 'the change published');
    } finally {
      await a.close();
      await pool.end();
      await tap.end();
    }
  });
});

describe('bridge and a channel without peers', () => {
  it('hands the channel nothing while it has no peers, and everything in order again once it has', async () => {
    let peers = false;
    const sent: Envelope[] = [];
    const channel: Channel = {
      transport: 'test',
      hasPeers: () => peers,
      publish: (e) => {
        // A channel given events while it has no peers would drop them; the bridge must not even try.
        assert.ok(peers, `published ${e.event} while the channel had no peers`);
        sent.push(e);
      },
      subscribe: (_h: ChannelHandlers) => () => undefined,
      ready: () => Promise.resolve(),
      close: () => Promise.resolve(),
    };
    const bus = new JobBus();
    const bridge = connectBus(bus, channel, { progressIntervalMs: 10 });
    try {
      bus.emit('job:changed', change('j1'));
      bus.emit('job:progress', {
        id: 'j1',
        tenant: 'acme',
        progress: { percent: 5, stage: null, itemsDone: null, itemsTotal: null, message: null, eta: null, updatedAt: null },
      });
      bus.emit('jobs:promoted', { count: 2 });
      bus.emit('job:cancel-requested', { id: 'j1', reason: 'user' });
      await sleep(30);
      assert.equal(sent.length, 0, 'nothing handed to the channel');

      peers = true;
      bus.emit('job:changed', change('j2'));
      bus.emit('job:changed', change('j3'));
      bus.emit('jobs:promoted', { count: 1 });
      await sleep(30);
      assert.deepEqual(
        sent.map((e) => e.event),
        ['jobs:changed', 'jobs:promoted'],
      );
      assert.deepEqual((sent[0]?.data as { ids?: string[] } | undefined)?.ids, ['j2', 'j3']);
    } finally {
      bridge.close();
    }
  });
});
