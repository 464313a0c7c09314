/**
 * Fresh PostgreSQL databases for the PostgreSQL benchmarks (bench/pg-throughput.ts and the
 * peers in bench/peers/): each run gets its own database, so schemas never collide and no run
 * inherits the rows or the bloat of the one before; it is dropped afterwards.
 *
 * The server comes from `--pg URL` or LONGHAUL_BENCH_DATABASE_URL (default
 * postgres://postgres@127.0.0.1:5432/postgres); that URL names the maintenance database the
 * CREATE/DROP DATABASE statements run in, and each fresh database gets the same credentials.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { strFlag } from './util.js';

export const adminUrl = strFlag('pg') ?? process.env.LONGHAUL_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

let counter = 0;
/** Databases created and not dropped yet: dropped on SIGINT/SIGTERM too (`timeout`, Ctrl-C). */
const live = new Set<string>();
let signalled = false;
let handlersInstalled = false;
function dropLiveAndExit(signal: NodeJS.Signals): void {
  if (signalled) return;
  signalled = true;
  const names = [...live];
  console.error(`${signal}: dropping ${names.length} benchmark database(s) and exiting`);
  // DROP … WITH (FORCE) ends the benchmark's own connections: their errors no longer matter.
  process.on('uncaughtException', () => {});
  process.on('unhandledRejection', () => {});
  void Promise.allSettled(names.map((n) => admin((c) => c.query(`DROP DATABASE IF EXISTS "${n}" WITH (FORCE)`)))).finally(() => process.exit(130));
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

export interface BenchDatabase {
  name: string;
  url: string;
  /** Drops the database, ending any connection still open on it. */
  drop(): Promise<void>;
}

/** A new empty database named `<prefix>_<pid>_<n>` (lower-case letters, digits and _ only). */
export async function createDatabase(prefix: string): Promise<BenchDatabase> {
  if (!/^[a-z][a-z0-9_]{0,30}$/.test(prefix)) throw new Error(`invalid database prefix "${prefix}"`);
  counter += 1;
  const name = `${prefix}_${process.pid}_${counter}`;
  if (!handlersInstalled) {
    handlersInstalled = true;
    process.once('SIGINT', dropLiveAndExit);
    process.once('SIGTERM', dropLiveAndExit);
  }
  await admin((c) => c.query(`CREATE DATABASE "${name}"`));
  live.add(name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: async () => {
      await admin((c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
      live.delete(name);
    },
  };
}

/** Runs `fn` on a fresh database and drops it afterwards, whatever happens. */
export async function withDatabase<T>(prefix: string, fn: (db: BenchDatabase) => Promise<T>): Promise<T> {
  const db = await createDatabase(prefix);
  try {
    return await fn(db);
  } finally {
    await db.drop();
  }
}

/** One line for the notes: the server's version and the settings that decide commit cost. */
export async function serverNote(): Promise<string> {
  return admin(async (c) => {
    const version = (await c.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ?? 'unknown';
    const rows = (
      await c.query<{ name: string; setting: string; unit: string | null }>(
        `SELECT name, setting, unit FROM pg_settings
          WHERE name IN ('synchronous_commit', 'fsync', 'shared_buffers', 'max_connections') ORDER BY name`,
      )
    ).rows;
    const settings = rows.map((r) => `${r.name}=${r.name === 'shared_buffers' ? `${(Number(r.setting) * 8) / 1024}MB` : r.setting}`).join(', ');
    const host = new URL(adminUrl).host;
    return `PostgreSQL ${version} at ${host} (separate processes; ${settings}); fresh database per run, dropped after`;
  });
}

/**
 * The version of the package `name` that a module in `fromDir` would load: the first
 * `node_modules/<name>/package.json` up the tree (read directly, since some packages' `exports`
 * hide their package.json).
 */
export function packageVersion(fromDir: string, name: string): string {
  let dir = fromDir.startsWith('file:') ? dirname(fileURLToPath(fromDir)) : fromDir;
  for (;;) {
    const file = join(dir, 'node_modules', name, 'package.json');
    if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
    const up = dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}

/** The directory of an installed package, as `packageVersion` finds it. */
export function packageDir(fromDir: string, name: string): string {
  let dir = fromDir.startsWith('file:') ? dirname(fileURLToPath(fromDir)) : fromDir;
  for (;;) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    const up = dirname(dir);
    if (up === dir) throw new Error(`package ${name} is not installed (cd bench && npm install)`);
    dir = up;
  }
}

/** What has been spent so far: this process's CPU, the CPU of one database's backends, and the cluster's WAL. */
export interface ServerCost {
  /** This process's CPU, ms (process.cpuUsage). */
  node: number;
  /** utime + stime of the database's backends, ms (/proc; same machine only; leaves out the WAL writer and checkpointer). */
  server: number;
  /** WAL inserted so far (pg_current_wal_insert_lsn, the whole cluster), bytes. */
  walBytes: number;
}

interface Queryable {
  query<R extends pg.QueryResultRow>(sql: string): Promise<{ rows: R[] }>;
}

/** Reads a ServerCost through `db` (a pool or client on the benchmark's database). */
export async function serverCost(db: Queryable): Promise<ServerCost> {
  const u = process.cpuUsage();
  const { rows } = await db.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = current_database()');
  const tick = 100; // USER_HZ
  let server = 0;
  for (const { pid } of rows) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      server += ((Number(f[11]) + Number(f[12])) * 1000) / tick;
    } catch {
      // not on this machine, or gone
    }
  }
  const wal = (await db.query<{ b: string }>(`SELECT pg_current_wal_insert_lsn() - '0/0' AS b`)).rows[0];
  return { node: (u.user + u.system) / 1000, server, walBytes: Number(wal?.b) };
}

/** One line: the cost per job between two readings. */
export function costLine(label: string, a: ServerCost, b: ServerCost, jobs: number, wallMs: number): string {
  const us = (x: number, y: number) => (((y - x) * 1000) / jobs).toFixed(1);
  return (
    `${label}: per job: this process ${us(a.node, b.node)} µs CPU, the database's backends ${us(a.server, b.server)} µs CPU, ` +
    `WAL ${((b.walBytes - a.walBytes) / jobs).toFixed(0)} B; wall ${((wallMs * 1000) / jobs).toFixed(1)} µs`
  );
}
