/**
 * A Channel over Redis (ioredis): pub/sub fan-out of job events, plus the latest progress of
 * each job kept under `<prefix>progress:<id>` with a TTL, so an API server can serve fresh
 * progress with one GET instead of a jobs-table read.
 *
 * Two connections: one subscribed (a subscribed RESP2 connection can run nothing else) and
 * one for commands. ioredis reconnects both by itself; the channel subscribes again on every
 * 'ready' and, when the subscribed connection had dropped, tells subscribers to `resync` once
 * the subscription is confirmed. Publishing while the command connection is down fails at
 * once (no offline queue): the event is logged and dropped, the store stays the truth.
 */
import { Redis } from 'ioredis';
import type { Progress } from '../core/progress.js';
import type { Channel, ChannelHandlers, ChannelLogger, Envelope } from './channel.js';
import { deliverMessage } from './deliver.js';
import { encode, isProgress } from './wire.js';
import { parseJson } from '../core/json-text.js';

export interface RedisChannelOptions {
  /** `redis://[user:password@]host:port[/db]` (or `rediss://`). */
  url: string;
  /** Prefix of the pub/sub channel and keys. Default `longhaul:`. */
  prefix?: string;
  /** How long a progress snapshot lives after its last update. Default 1 h. */
  progressTtlMs?: number;
  /** CLIENT SETNAME of the two connections (`<name>:sub`, `<name>:cmd`). Default `longhaul`. */
  connectionName?: string;
  /** Longest wait for a command reply (getProgress, publish). Default 2000 ms. */
  commandTimeoutMs?: number;
  logger?: ChannelLogger;
}

export class RedisChannel implements Channel {
  readonly transport = 'redis';
  /** The pub/sub channel events travel on. */
  readonly channel: string;
  /** CLIENT SETNAME prefix of the connections: `<name>:sub` and `<name>:cmd`. */
  readonly connectionName: string;
  private readonly prefix: string;
  private readonly ttlMs: number;
  private readonly sub: Redis;
  private readonly cmd: Redis;
  private readonly handlers = new Set<ChannelHandlers>();
  private readonly logger: ChannelLogger | undefined;
  private closed = false;
  /** The subscribed connection went down (or failed to come up): messages may have been missed. */
  private missed = false;
  private subscribed = false;
  private droppedSinceWarn = 0;
  /** When each kind of warning was last logged. */
  private readonly warnedAt = new Map<string, number>();
  private readonly firstUp: Promise<void>;
  private markUp: () => void = () => undefined;
  private failUp: (err: Error) => void = () => undefined;
  private readonly cmdUp: Promise<void>;

  constructor(options: RedisChannelOptions) {
    this.prefix = options.prefix ?? 'longhaul:';
    this.channel = `${this.prefix}events`;
    this.ttlMs = options.progressTtlMs ?? 3_600_000;
    if (!Number.isInteger(this.ttlMs) || this.ttlMs < 1) throw new Error('progressTtlMs must be a positive integer');
    this.logger = options.logger;
    const name = options.connectionName ?? 'longhaul';
    this.connectionName = name;
    const common = { commandTimeout: options.commandTimeoutMs ?? 2000, keepAlive: 10_000 };
    this.sub = new Redis(options.url, { ...common, connectionName: `${name}:sub`, autoResubscribe: false, maxRetriesPerRequest: null });
    this.cmd = new Redis(options.url, { ...common, connectionName: `${name}:cmd`, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    this.firstUp = new Promise((resolve, reject) => {
      this.markUp = resolve;
      this.failUp = reject;
    });
    this.firstUp.catch(() => undefined);
    this.cmdUp = new Promise((resolve) => this.cmd.once('ready', () => resolve()));

    // ioredis reports every failed (re)connection attempt as 'error'; unhandled they would be printed raw.
    this.sub.on('error', (err: Error) => this.warn(err, 'Redis events connection error; reconnecting'));
    this.cmd.on('error', (err: Error) => this.warn(err, 'Redis command connection error; reconnecting'));
    // Any loss (or a first connection that failed) may have missed messages.
    this.sub.on('close', () => {
      this.missed = true;
      this.subscribed = false;
    });
    this.sub.on('ready', () => void this.onSubReady());
    this.sub.on('message', (channel: string, message: string) => {
      if (channel === this.channel) this.deliver(message);
    });
  }

  /** Whether the subscription is active (tests, health checks). */
  get listening(): boolean {
    return this.subscribed;
  }

  /** Whether events can be published now (the command connection is up; tests, health checks). */
  get publishing(): boolean {
    return this.cmd.status === 'ready';
  }

  progressKey(id: string): string {
    return `${this.prefix}progress:${id}`;
  }

  publish(envelope: Envelope): void {
    if (this.closed) return;
    const text = encode(envelope);
    let sent: Promise<unknown>;
    if (envelope.event === 'job:progress' && envelope.data.progress !== null) {
      sent = this.cmd
        .multi()
        .set(this.progressKey(envelope.data.id), JSON.stringify(envelope.data.progress), 'PX', this.ttlMs)
        .publish(this.channel, text)
        .exec();
    } else {
      sent = this.cmd.publish(this.channel, text);
    }
    sent.catch((err: unknown) => this.dropped(err));
  }

  /** The latest progress published for job `id` within the TTL, or null. Rejects when Redis is unreachable. */
  async getProgress(id: string): Promise<Progress | null> {
    const text = await this.cmd.get(this.progressKey(id));
    if (text === null) return null;
    let value: unknown;
    try {
      value = parseJson(text);
    } catch {
      return null;
    }
    return isProgress(value) ? value : null;
  }

  subscribe(handlers: ChannelHandlers): () => void {
    this.handlers.add(handlers);
    return () => {
      this.handlers.delete(handlers);
    };
  }

  /** Resolves once events are received and can be published. */
  async ready(): Promise<void> {
    await Promise.all([this.firstUp, this.cmdUp]);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.failUp(new Error('the Redis events channel was closed before it connected'));
    // quit() lets the replies of commands already sent (publishes) arrive first.
    await Promise.all([this.sub.quit().catch(() => this.sub.disconnect()), this.cmd.quit().catch(() => this.cmd.disconnect())]);
  }

  private async onSubReady(): Promise<void> {
    try {
      await this.sub.subscribe(this.channel);
    } catch (err) {
      // The connection dropped again; the next 'ready' subscribes.
      this.warn(err, 'Redis SUBSCRIBE failed; retrying on reconnect');
      return;
    }
    if (this.closed) return;
    this.subscribed = true;
    this.markUp();
    if (!this.missed) return;
    this.missed = false;
    for (const h of [...this.handlers]) {
      try {
        h.resync();
      } catch (err) {
        this.logger?.warn({ err }, 'a resync listener threw');
      }
    }
  }

  private deliver(message: string): void {
    deliverMessage(this.handlers, message, this.logger, this.channel);
  }

  private dropped(err: unknown): void {
    this.droppedSinceWarn++;
    if (this.warn(err, 'could not publish job events to Redis; dropped them (the store stays correct)', { dropped: this.droppedSinceWarn })) {
      this.droppedSinceWarn = 0;
    }
  }

  /** At most one warning every 10 s: an outage would otherwise flood the log. */
  private warn(err: unknown, msg: string, extra: object = {}): boolean {
    if (this.closed) return false;
    const now = Date.now();
    if (now - (this.warnedAt.get(msg) ?? 0) < 10_000) return false;
    this.warnedAt.set(msg, now);
    this.logger?.warn({ err, ...extra }, msg);
    return true;
  }
}
