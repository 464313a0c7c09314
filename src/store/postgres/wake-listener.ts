/**
 * The store's change signal on PostgreSQL: the wake-up channel, heard on the process's LISTEN
 * connection (listen-connection.ts). Writers NOTIFY it (empty payload) when jobs may have
 * become claimable: inserts, promotions, hand-backs, manual retries. NOTIFY is delivered only
 * when the writing transaction commits, so a job enqueued inside a caller's transaction wakes
 * workers exactly when it becomes visible to them.
 *
 * `take()` answers "did anything arrive since the last call?". It is also true once when the
 * connection drops and once when it is back, because notifications sent meanwhile are lost.
 * `subscribe()` also pushes each notification (and each reconnect) to a listener: an idle
 * worker claims at once instead of at its next poll (PostgresStore.onChanges).
 * While it is down, idle workers find new jobs through their fallback poll (a claim attempt at
 * least every `maxIdleMs`, 1 s by default).
 */
import type { ListenConnection } from './listen-connection.js';

export class WakeListener {
  private changed = true;
  private listening = false;
  private unlisten: (() => void) | null = null;
  /** Told at each notification (and at a reconnect): idle workers claim at once. */
  private readonly pushed = new Set<() => void>();

  constructor(
    private readonly connection: ListenConnection,
    private readonly channel: string,
  ) {}

  /** Whether the wake-up channel is being listened to (tests, health checks). */
  get connected(): boolean {
    return this.listening && this.connection.connected;
  }

  /** The backend pid of the listen connection, or null (tests). */
  get backendPid(): number | null {
    return this.connected ? this.connection.backendPid : null;
  }

  /** Calls `listener` at each notification, from now on (listening starts if it had not). */
  subscribe(listener: () => void): () => void {
    this.pushed.add(listener);
    this.take();
    this.changed = true;
    return () => this.pushed.delete(listener);
  }

  private push(): void {
    for (const listener of this.pushed) listener();
  }

  take(): boolean {
    if (!this.unlisten) {
      this.unlisten = this.connection.listen(this.channel, {
        notification: () => {
          this.changed = true;
          this.push();
        },
        up: () => {
          this.listening = true;
          this.changed = true;
          this.push();
        },
        down: () => {
          this.listening = false;
          this.changed = true;
        },
      });
    }
    const v = this.changed;
    this.changed = false;
    return v;
  }

  /** Stops listening; take() never subscribes again (the connection may be closed next). */
  close(): void {
    this.pushed.clear();
    this.unlisten?.();
    this.unlisten = () => undefined;
    this.listening = false;
  }
}
