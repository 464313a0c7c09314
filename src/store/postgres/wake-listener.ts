/**
 * The store's change signal on PostgreSQL: one dedicated connection LISTENing on the wake-up
 * channel. Writers NOTIFY it (empty payload) when jobs may have become claimable: inserts,
 * promotions, hand-backs, manual retries. NOTIFY is delivered only when the writing
 * transaction commits, so a job enqueued inside a caller's transaction wakes workers exactly
 * when it becomes visible to them.
 *
 * `take()` answers "did anything arrive since the last call?". It is also true once when the
 * connection drops and once when it is back, because notifications sent meanwhile are lost.
 * While it is down, idle workers find new jobs through their fallback poll (a claim attempt at
 * least every `maxIdleMs`, 1 s by default); the connection is re-opened with exponential
 * backoff and jitter.
 */
import { reconnectDelay } from '../../core/backoff.js';
import pg from 'pg';

export interface ListenerLogger {
  warn(obj: object, msg?: string): void;
}

export class WakeListener {
  private client: pg.Client | null = null;
  private connecting = false;
  private changed = true;
  private started = false;
  private closed = false;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly channel: string,
    private readonly logger: ListenerLogger | undefined,
  ) {}

  /** Whether the listen connection is up (tests, health checks). */
  get connected(): boolean {
    return this.client !== null;
  }

  /** The backend pid of the listen connection, or null (tests). */
  get backendPid(): number | null {
    return (this.client as unknown as { processID?: number } | null)?.processID ?? null;
  }

  take(): boolean {
    if (!this.started) {
      this.started = true;
      void this.connect();
    }
    const v = this.changed;
    this.changed = false;
    return v;
  }

  private async connect(): Promise<void> {
    if (this.closed || this.connecting || this.client) return;
    this.connecting = true;
    const client = new pg.Client(this.config);
    let up = false;
    const drop = (err?: Error) => {
      if (err) this.logger?.warn({ err }, 'PostgreSQL listen connection lost; reconnecting');
      client.removeAllListeners('notification');
      if (this.client === client) this.client = null;
      this.changed = true;
      if (up) {
        up = false;
        client.end().catch(() => undefined);
        this.scheduleReconnect();
      }
    };
    // Without an 'error' listener a dropped connection would crash the process.
    client.on('error', (err) => drop(err));
    client.on('end', () => drop());
    client.on('notification', () => {
      this.changed = true;
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${this.channel}`);
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      up = true;
      this.client = client;
      this.changed = true;
      this.failures = 0;
    } catch (err) {
      this.logger?.warn({ err }, 'PostgreSQL listen connection failed; retrying');
      client.end().catch(() => undefined);
      this.scheduleReconnect();
    } finally {
      this.connecting = false;
    }
  }

  private scheduleReconnect(): void {
    if (this.closed || this.retryTimer) return;
    this.failures++;
    const delay = reconnectDelay(this.failures, 100, 5000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.connect();
    }, delay);
    this.retryTimer.unref?.();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    const c = this.client;
    this.client = null;
    if (c) {
      c.removeAllListeners('end');
      await c.end().catch(() => undefined);
    }
  }
}
