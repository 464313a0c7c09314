/**
 * A session-level advisory lock held on a dedicated connection: the sweeper's election.
 *
 * The process that gets the lock keeps it for as long as its connection lives; the others'
 * tries fail fast (pg_try_advisory_lock does not wait). When the holder closes its store, exits
 * or dies, PostgreSQL ends its session and drops the lock, and the next try elsewhere takes it
 * over. A holder that is alive but frozen (SIGSTOP, a stuck event loop) keeps the lock; its
 * session ends only when the server notices the connection is dead (TCP keepalive).
 */
import pg from 'pg';
import type { ListenLogger } from './listen-connection.js';

export class SessionLock {
  private client: pg.Client | null = null;
  private held = false;
  private closed = false;

  constructor(
    private readonly config: pg.ClientConfig,
    /** The lock's name; hashed by the server into the advisory lock key. */
    private readonly name: string,
    private readonly logger: ListenLogger | undefined,
  ) {}

  /** True while this process holds the lock; otherwise tries once to take it. */
  async tryAcquire(): Promise<boolean> {
    if (this.closed) return false;
    if (this.held && this.client) return true;
    const client = this.client ?? (await this.open());
    const res = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtext($1), 0) AS ok', [this.name]);
    this.held = res.rows[0]?.ok === true && this.client === client;
    return this.held;
  }

  private async open(): Promise<pg.Client> {
    const client = new pg.Client(this.config);
    const drop = (err?: Error) => {
      if (this.client !== client) return;
      if (err && this.held) this.logger?.warn({ err }, 'lost the PostgreSQL connection holding the sweeper lock');
      this.client = null;
      this.held = false;
      client.end().catch(() => undefined);
    };
    client.on('error', (err) => drop(err));
    client.on('end', () => drop());
    await client.connect();
    if (this.closed) {
      await client.end().catch(() => undefined);
      throw new Error('the store is closed');
    }
    this.client = client;
    return client;
  }

  /** Gives the lock up (ends the session); a later tryAcquire opens a new one. */
  async release(): Promise<void> {
    const c = this.client;
    this.client = null;
    this.held = false;
    if (c) await c.end().catch(() => undefined);
  }

  /** Releases the lock by ending the session, for good. */
  async close(): Promise<void> {
    this.closed = true;
    const c = this.client;
    this.client = null;
    this.held = false;
    if (c) await c.end().catch(() => undefined);
  }
}
