/**
 * A Channel over PostgreSQL LISTEN/NOTIFY: nothing to run besides the database.
 *
 * - Receiving: on a dedicated LISTEN connection (src/store/postgres/listen-connection.ts): the store's, shared
 *   with its wake-ups, when Longhaul.open creates the channel (`listen`), else one of the
 *   channel's own. When it drops (server restart, pg_terminate_backend, network), it is
 *   re-opened with exponential backoff and jitter, LISTEN is issued again, and subscribers get
 *   `resync`: notifications sent while no connection listened are gone for good.
 * - Sending: publishes are queued and sent in batches: events are packed into as few
 *   notifications as fit (one event per line; JSON text never holds a raw newline), all of a
 *   batch in one statement on the pool, one statement at a time (so the order is kept). A busy
 *   worker ends thousands of jobs a second: one notification per event would cost every
 *   listener a wake-up per event and the server a queue entry per event. A failed batch is
 *   logged and dropped: the store stays the truth. While the database is unreachable at most
 *   `maxQueued` events wait; older ones are dropped first.
 * - Size: a NOTIFY payload must stay under 8000 bytes. Events are sent slim (see wire.ts);
 *   a progress that does not fit travels as null and receivers read it from the store.
 * - Peers: a lone process has nobody to relay to. Every `peerCheckMs` (1 s) the channel counts
 *   the other LISTEN connections of Longhaul processes on the database (pg_stat_activity rows
 *   whose application_name ends in `:listen` or `:events`, the names Longhaul gives them; the
 *   column is visible to every role). While it counts none, nothing is published
 *   (`hasPeers()` is false): a worker alone on its database pays nothing for the relay. When a
 *   count fails, or before the first one, everything is published.
 *   - Joining: each time a channel starts listening (first and after every reconnect) it says
 *     so on the `longhaul_peers` NOTIFY channel, which every counting channel also hears: a
 *     lone process starts publishing one round trip after a newcomer listens, not at its next
 *     count. Events it published before hearing that are lost to the newcomer (watches cover
 *     them with their safety read).
 *   - Leaving: once peers were seen, they are forgotten only after FORGET_AFTER counts in a
 *     row find none, so a listener that reconnects (a restart of its connection, a database
 *     blip) is not left without events meanwhile.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { CHANNEL_NAME, EVENTS_NAME_SUFFIX, LISTEN_NAME_SUFFIX, ListenConnection, type ListenSubscriber } from '../store/postgres/listen-connection.js';
import type { Channel, ChannelHandlers, ChannelLogger, Envelope } from './channel.js';
import { deliverMessage } from './deliver.js';
import { encodeWithin } from './wire.js';

/** PostgreSQL refuses payloads of 8000 bytes or more; keep a margin. */
export const NOTIFY_MAX_BYTES = 7900;
const BATCH = 256;
/** Where channels announce that they listen (see the file's header); its payload is the channel's id. */
export const PEERS_CHANNEL = 'longhaul_peers';
/** Counts in a row that must find no peer before peers once seen are forgotten. */
export const FORGET_AFTER = 3;

/**
 * The other processes' LISTEN connections on this database: Longhaul names them
 * `<name>:listen` or `<name>:events` (see listen-connection.ts). $1: this channel's own.
 */
const PEERS_SQL = `SELECT count(*)::integer AS n FROM pg_stat_activity
  WHERE datname = current_database() AND pid <> $1 AND pid <> pg_backend_pid()
    AND (right(application_name, ${LISTEN_NAME_SUFFIX.length}) = '${LISTEN_NAME_SUFFIX}' OR right(application_name, ${EVENTS_NAME_SUFFIX.length}) = '${EVENTS_NAME_SUFFIX}')`;

export interface PostgresNotifyOptions {
  connectionString: string;
  /** Pool to publish through (e.g. the store's). Default: a pool of 2 connections the channel owns. */
  pool?: pg.Pool;
  /** The NOTIFY channel. Default `longhaul_events`. Lower-case letters, digits and _. */
  channel?: string;
  /**
   * LISTEN on this connection (e.g. the store's `listenConnection`, so that a process holds one)
   * instead of opening one; close() leaves it open.
   */
  listen?: ListenConnection;
  /** application_name of the connections (the channel's own listener gets `:events` appended). Default `longhaul`. */
  applicationName?: string;
  /** Events waiting while the database is unreachable. Default 10 000. */
  maxQueued?: number;
  /**
   * How often to count the other processes listening (see the file's header); while there are
   * none, nothing is published. Default 1000 ms; 0: never count, always publish.
   */
  peerCheckMs?: number;
  /** Reconnect delays of the channel's own listener: doubling from minMs up to maxMs, each with jitter. Default 100 / 5000. */
  reconnect?: { minMs?: number; maxMs?: number };
  logger?: ChannelLogger;
}

export class PostgresNotifyChannel implements Channel {
  readonly transport = 'postgres';
  readonly channel: string;
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly logger: ChannelLogger | undefined;
  private readonly handlers = new Set<ChannelHandlers>();
  private readonly maxQueued: number;
  private queue: string[] = [];
  private sending: Promise<void> | null = null;
  private flushScheduled = false;
  private droppedSinceWarn = 0;
  private lastWarnAt = 0;
  private readonly peerCheckMs: number;
  /** Whether another process listens: 'unknown' before the first count or after a failed one (publish). */
  private peers: 'unknown' | 'present' | 'absent' = 'unknown';
  /** Counts in a row that found no peer, and whether any peer was ever seen (see FORGET_AFTER). */
  private emptyCounts = 0;
  private peersSeen = false;
  private peerTimer: NodeJS.Timeout | null = null;
  private countingPeers = false;
  private unlistenPeers: (() => void) | null = null;
  /** This channel's id in its `longhaul_peers` announcements (its own come back to it). */
  private readonly id = randomUUID();

  private readonly listenConnection: ListenConnection;
  private readonly ownsListen: boolean;
  private unlisten: (() => void) | null = null;
  private up = false;
  private closed = false;
  /** True while notifications may have been missed (down, or never up after a failed attempt). */
  private missed = false;
  private readonly firstUp: Promise<void>;
  private markUp: () => void = () => undefined;
  private failUp: (err: Error) => void = () => undefined;

  constructor(options: PostgresNotifyOptions) {
    this.channel = options.channel ?? 'longhaul_events';
    if (!CHANNEL_NAME.test(this.channel)) throw new Error(`invalid NOTIFY channel name "${this.channel}": use lower-case letters, digits and _ (at most 63)`);
    if (this.channel === PEERS_CHANNEL) throw new Error(`the NOTIFY channel name "${PEERS_CHANNEL}" is reserved (processes announce themselves on it)`);
    this.maxQueued = options.maxQueued ?? 10_000;
    this.peerCheckMs = options.peerCheckMs ?? 1000;
    if (!(Number.isInteger(this.peerCheckMs) && this.peerCheckMs >= 0)) throw new Error('peerCheckMs must be a non-negative integer');
    this.logger = options.logger;
    this.ownsPool = options.pool === undefined;
    this.pool =
      options.pool ??
      new pg.Pool({
        connectionString: options.connectionString,
        application_name: options.applicationName ?? 'longhaul',
        max: 2,
        idleTimeoutMillis: 30_000,
        keepAlive: true,
      });
    // An idle pooled client whose connection dies emits 'error' on the pool; unhandled it would crash.
    if (this.ownsPool) {
      this.pool.on('error', (err) => this.logger?.warn({ err }, 'PostgreSQL notify connection lost (idle); it will be replaced'));
      // A checked-out client has no lasting 'error' listener: a connection dying mid-statement
      // would crash the process. The statement rejects anyway and the pool drops the client.
      this.pool.on('connect', (client) => client.on('error', () => undefined));
    }
    this.firstUp = new Promise((resolve, reject) => {
      this.markUp = resolve;
      this.failUp = reject;
    });
    this.firstUp.catch(() => undefined);
    this.ownsListen = options.listen === undefined;
    this.listenConnection =
      options.listen ??
      new ListenConnection(
        { connectionString: options.connectionString, application_name: `${options.applicationName ?? 'longhaul'}${EVENTS_NAME_SUFFIX}`, keepAlive: true },
        this.logger,
        options.reconnect,
      );
  }

  /** Whether the channel is being listened to (tests, health checks). */
  get listening(): boolean {
    return this.up && this.listenConnection.connected;
  }

  /** The backend pid of the listening connection, or null (tests). */
  get backendPid(): number | null {
    return this.listening ? this.listenConnection.backendPid : null;
  }

  hasPeers(): boolean {
    return this.peers !== 'absent';
  }

  /** Whether another process listens, as last counted or heard ('unknown': not counted yet, or the count failed). */
  get peerState(): 'unknown' | 'present' | 'absent' {
    return this.peers;
  }

  publish(envelope: Envelope): void {
    if (this.closed || this.peers === 'absent') return;
    const text = encodeWithin(envelope, NOTIFY_MAX_BYTES);
    if (text === null) {
      this.logger?.warn({ event: envelope.event }, 'event too large for NOTIFY even in its slim form; not relayed');
      return;
    }
    this.queue.push(text);
    if (this.queue.length > this.maxQueued) this.drop(this.queue.splice(0, this.queue.length - this.maxQueued).length, null);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => {
        this.flushScheduled = false;
        this.pump();
      });
    }
  }

  subscribe(handlers: ChannelHandlers): () => void {
    this.handlers.add(handlers);
    this.start();
    return () => {
      this.handlers.delete(handlers);
    };
  }

  ready(): Promise<void> {
    this.start();
    return this.firstUp;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.failUp(new Error('the events channel was closed before it connected'));
    if (this.peerTimer) clearInterval(this.peerTimer);
    this.peerTimer = null;
    this.unlistenPeers?.();
    this.unlisten?.();
    this.up = false;
    // What was published before close still goes out.
    this.pump();
    while (this.sending) await this.sending;
    if (this.ownsListen) await this.listenConnection.close();
    if (this.ownsPool) await this.pool.end().catch(() => undefined);
  }

  // ---- sending ----------------------------------------------------------------------------

  private pump(): void {
    if (this.sending || this.queue.length === 0) return;
    this.sending = this.sendAll().finally(() => {
      this.sending = null;
      if (this.queue.length > 0) this.pump();
    });
  }

  private async sendAll(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, BATCH);
      try {
        // One statement, one transaction: PostgreSQL delivers the notifications in this order.
        // The payloads travel as one text joined by U+001E (JSON escapes control characters, so
        // none occurs inside one): a text[] parameter would be escaped character by character.
        await this.pool.query("SELECT pg_notify($1, p) FROM unnest(string_to_array($2, E'\\x1e')) WITH ORDINALITY AS t(p, n) ORDER BY n", [
          this.channel,
          pack(batch).join('\x1e'),
        ]);
      } catch (err) {
        this.drop(batch.length, err);
      }
    }
  }

  /** Logs dropped events, at most once every 10 s (an outage would otherwise flood the log). */
  private drop(count: number, err: unknown): void {
    this.droppedSinceWarn += count;
    const now = Date.now();
    if (now - this.lastWarnAt < 10_000) return;
    this.lastWarnAt = now;
    this.logger?.warn({ err, dropped: this.droppedSinceWarn }, 'could not publish job events over NOTIFY; dropped them (the store stays correct)');
    this.droppedSinceWarn = 0;
  }

  // ---- peers ------------------------------------------------------------------------------

  /** Hears the other processes announce themselves: on the same connection, listening from the same moment as the events. */
  private listenForPeers(): void {
    if (this.peerCheckMs === 0 || this.unlistenPeers || this.closed) return;
    try {
      this.unlistenPeers = this.listenConnection.listen(PEERS_CHANNEL, {
        notification: (payload) => {
          if (payload !== this.id) this.peerFound();
        },
        up: () => undefined,
        down: () => undefined,
      });
    } catch {
      // A shared connection closed under the channel: nothing to hear.
    }
  }

  /** From the first time the channel listens: counts now, then every peerCheckMs. */
  private startPeerChecks(): void {
    if (this.peerCheckMs === 0 || this.peerTimer || this.closed) return;
    this.peerTimer = setInterval(() => void this.countPeers(), this.peerCheckMs);
    this.peerTimer.unref?.();
    void this.countPeers();
  }

  private async countPeers(): Promise<void> {
    // Only while listening: this channel's own connection is then known and left out of the count.
    if (this.countingPeers || this.closed || !this.up) return;
    this.countingPeers = true;
    try {
      const { rows } = await this.pool.query<{ n: number }>(PEERS_SQL, [this.listenConnection.backendPid ?? 0]);
      if ((rows[0]?.n ?? 1) > 0) this.peerFound();
      else if (++this.emptyCounts >= (this.peersSeen ? FORGET_AFTER : 1)) this.peers = 'absent';
    } catch {
      // Not known (the database is unreachable, say): publish, as before any count.
      this.peers = 'unknown';
      this.emptyCounts = 0;
    } finally {
      this.countingPeers = false;
    }
  }

  private peerFound(): void {
    this.peers = 'present';
    this.peersSeen = true;
    this.emptyCounts = 0;
  }

  /**
   * Tells the counting channels of other processes that this one listens (again). Tried again
   * while it fails (after an outage the pool may still hand out a connection that died), a few
   * times over about 3 s; past that, their next counts find this one anyway.
   */
  private announce(attempt = 0): void {
    this.pool.query('SELECT pg_notify($1, $2)', [PEERS_CHANNEL, this.id]).catch(() => {
      if (this.closed || attempt >= 4) return;
      setTimeout(() => this.up && this.announce(attempt + 1), 100 * 2 ** attempt).unref?.();
    });
  }

  // ---- receiving --------------------------------------------------------------------------

  private start(): void {
    if (this.unlisten || this.closed) return;
    this.listenForPeers();
    try {
      this.unlisten = this.listenConnection.listen(this.channel, this.subscriber());
    } catch (err) {
      // A shared connection closed under the channel (its store closed first): nothing to hear.
      this.logger?.warn({ err }, 'cannot LISTEN for job events');
    }
  }

  private subscriber(): ListenSubscriber {
    return {
      notification: (payload) => this.deliver(payload),
      up: () => {
        this.up = true;
        this.startPeerChecks();
        this.announce();
        this.markUp();
        if (this.missed) {
          this.missed = false;
          this.resync();
        }
      },
      down: () => {
        this.up = false;
        this.missed = true;
      },
    };
  }

  private deliver(payload: string | undefined): void {
    if (payload === undefined) {
      this.deliverOne(undefined);
      return;
    }
    let start = 0;
    for (let end = payload.indexOf('\n'); end !== -1; end = payload.indexOf('\n', start)) {
      this.deliverOne(payload.slice(start, end));
      start = end + 1;
    }
    this.deliverOne(start === 0 ? payload : payload.slice(start));
  }

  private deliverOne(text: string | undefined): void {
    deliverMessage(this.handlers, text, this.logger, this.channel);
  }

  private resync(): void {
    for (const h of [...this.handlers]) {
      try {
        h.resync();
      } catch (err) {
        this.logger?.warn({ err }, 'a resync listener threw');
      }
    }
  }
}

/**
 * Packs encoded events (each at most NOTIFY_MAX_BYTES) into as few payloads as fit that limit,
 * in order, one event per line.
 */
export function pack(texts: readonly string[]): string[] {
  const out: string[] = [];
  let lines: string[] = [];
  let bytes = 0;
  for (const t of texts) {
    const n = Buffer.byteLength(t);
    if (lines.length > 0 && bytes + 1 + n > NOTIFY_MAX_BYTES) {
      out.push(lines.join('\n'));
      lines = [];
      bytes = 0;
    }
    bytes += (lines.length > 0 ? 1 : 0) + n;
    lines.push(t);
  }
  if (lines.length > 0) out.push(lines.join('\n'));
  return out;
}
