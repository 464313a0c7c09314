/**
 * One dedicated PostgreSQL connection (not from the pool) that LISTENs on any number of
 * channels for a process. The store's wake-ups and the NOTIFY event relay share it, so a
 * process holds one LISTEN connection, not one per use.
 *
 * It opens on the first `listen()` that asks for it (`start`), and when it drops (server
 * restart, pg_terminate_backend, network) every subscriber hears `down`; it is re-opened with
 * exponential backoff and jitter, LISTEN is issued again for every channel, and every
 * subscriber hears `up`. Notifications sent while no connection listened are gone for good:
 * subscribers resynchronise on `up` after a `down`. A loss is logged once; while the server
 * stays unreachable, failed reconnects are not logged each (core/outage.ts: once when they
 * start failing, once when one succeeds).
 */
import pg from 'pg';
import { reconnectDelay } from '../../core/backoff.js';
import { Outage, type OutageLine } from '../../core/outage.js';

/** Where connection problems are reported (pino-compatible; without `error` and `info`, at `warn`). */
export interface ListenLogger {
  warn(obj: object, msg?: string): void;
  error?(obj: object, msg?: string): void;
  info?(obj: object, msg?: string): void;
}

export interface ListenSubscriber {
  /** A notification on the subscribed channel. */
  notification(payload: string | undefined): void;
  /** The connection listens on the channel: at subscription when already up, and after each (re)connect. */
  up(): void;
  /** The connection was lost, or an attempt to open it failed: notifications may have been missed. */
  down(): void;
}

/**
 * How Longhaul names its LISTEN connections' application_name: `<name>:listen` (the store's,
 * shared with the event relay) and `<name>:events` (a relay's own). The NOTIFY relay counts
 * the connections so named to tell whether any other process listens (postgres-notify.ts).
 */
export const LISTEN_NAME_SUFFIX = ':listen';
export const EVENTS_NAME_SUFFIX = ':events';

/** A channel name we are willing to quote into LISTEN / UNLISTEN. */
export const CHANNEL_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export class ListenConnection {
  private client: pg.Client | null = null;
  private readonly subscribers = new Map<string, Set<ListenSubscriber>>();
  private connecting = false;
  private closed = false;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private readonly outage = new Outage('listen connection');
  /** The connection's statements, one after the other (pg refuses to queue them itself from v9). */
  private statements: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly logger: ListenLogger | undefined,
    private readonly reconnect: { minMs?: number; maxMs?: number } = {},
  ) {}

  /** Whether the connection is up (tests, health checks). */
  get connected(): boolean {
    return this.client !== null;
  }

  /** The backend pid of the connection, or null (tests). */
  get backendPid(): number | null {
    return (this.client as unknown as { processID?: number } | null)?.processID ?? null;
  }

  /**
   * Delivers `channel`'s notifications to `subscriber`, opening the connection if needed.
   * Returns the unsubscribe; the last subscriber of a channel leaving UNLISTENs it.
   */
  listen(channel: string, subscriber: ListenSubscriber): () => void {
    if (!CHANNEL_NAME.test(channel)) throw new Error(`invalid LISTEN channel name "${channel}": use lower-case letters, digits and _ (at most 63)`);
    if (this.closed) throw new Error('the listen connection is closed');
    let set = this.subscribers.get(channel);
    const fresh = set === undefined;
    if (!set) {
      set = new Set();
      this.subscribers.set(channel, set);
    }
    set.add(subscriber);
    const client = this.client;
    if (client && fresh) {
      // Subscribers of a channel the connection does not listen on yet hear `up` once it does;
      // a failure here drops the connection, and the reconnect listens on every channel.
      this.send(client, `LISTEN "${channel}"`).then(
        () => {
          if (this.client === client && set.has(subscriber)) subscriber.up();
        },
        (err: Error) => this.lost(client, err),
      );
    } else if (client) {
      queueMicrotask(() => {
        if (this.client === client && set.has(subscriber)) subscriber.up();
      });
    } else if (!this.retryTimer) {
      void this.connect();
    }
    return () => {
      if (!set.delete(subscriber) || set.size > 0 || this.subscribers.get(channel) !== set) return;
      this.subscribers.delete(channel);
      if (this.client) this.send(this.client, `UNLISTEN "${channel}"`).catch(() => undefined);
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    const c = this.client;
    this.client = null;
    if (c) {
      c.removeAllListeners('end');
      c.removeAllListeners('notification');
      await c.end().catch(() => undefined);
    }
  }

  /** Runs `sql` on `client` once the statements sent before it have settled. */
  private send(client: pg.Client, sql: string): Promise<unknown> {
    const run = this.statements.then(() => client.query(sql));
    this.statements = run.catch(() => undefined);
    return run;
  }

  private each(fn: (s: ListenSubscriber) => void): void {
    for (const set of [...this.subscribers.values()]) {
      for (const s of [...set]) {
        try {
          fn(s);
        } catch (err) {
          this.logger?.warn({ err }, 'a LISTEN subscriber threw');
        }
      }
    }
  }

  private lost(client: pg.Client, err?: Error): void {
    if (this.client !== client || this.closed) return;
    this.client = null;
    client.removeAllListeners('notification');
    this.logger?.warn({ err }, 'PostgreSQL listen connection lost; reconnecting');
    client.end().catch(() => undefined);
    this.each((s) => s.down());
    this.scheduleReconnect();
  }

  private async connect(): Promise<void> {
    if (this.closed || this.connecting || this.client) return;
    this.connecting = true;
    const client = new pg.Client(this.config);
    // Without an 'error' listener a dropped connection would crash the process.
    client.on('error', (err) => this.lost(client, err));
    client.on('end', () => this.lost(client));
    client.on('notification', (msg) => {
      const set = this.subscribers.get(msg.channel);
      if (!set) return;
      for (const s of [...set]) {
        try {
          s.notification(msg.payload);
        } catch (err) {
          this.logger?.warn({ err }, 'a LISTEN subscriber threw');
        }
      }
    });
    try {
      await client.connect();
      const channels = [...this.subscribers.keys()];
      if (channels.length > 0) await client.query(channels.map((c) => `LISTEN "${c}"`).join('; '));
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      this.statements = Promise.resolve();
      this.failures = 0;
      this.log(this.outage.succeeded(Date.now()));
      // A channel first subscribed while LISTEN was in flight is not among `channels`.
      const late = [...this.subscribers.keys()].filter((c) => !channels.includes(c));
      if (late.length > 0) await this.send(client, late.map((c) => `LISTEN "${c}"`).join('; '));
      if (this.client === client) this.each((s) => s.up());
    } catch (err) {
      if (this.client === client) {
        this.lost(client, err as Error);
        return;
      }
      this.log(this.outage.failed(err, Date.now(), 'PostgreSQL listen connection failed; retrying'));
      client.removeAllListeners('notification');
      client.end().catch(() => undefined);
      this.each((s) => s.down());
      this.scheduleReconnect();
    } finally {
      this.connecting = false;
    }
  }

  private log(line: OutageLine | null): void {
    if (!line || !this.logger) return;
    const write = this.logger[line.level] ?? this.logger.warn;
    write.call(this.logger, line.fields, line.msg);
  }

  private scheduleReconnect(): void {
    if (this.closed || this.retryTimer) return;
    this.failures++;
    const delay = reconnectDelay(this.failures, this.reconnect.minMs ?? 100, this.reconnect.maxMs ?? 5000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.connect();
    }, delay);
    this.retryTimer.unref?.();
  }
}
