/**
 * PostgreSQL schema: the numbered SQL files of `migrations/` (0001_baseline.sql first), read as
 * they are (store/migration-files.ts). Everything lives in one schema of its own (`longhaul` by
 * default), so Longhaul shares a database with the application that uses it (transactional
 * enqueue needs that) without touching the application's tables.
 *
 * The files name the schema `{s}`, the wake-up channel `{ch}` and the schema's bare name (the
 * prefix of advisory lock keys) `{name}`: renderMigrations fills in those three, configuration
 * only; no other TypeScript value goes into a migration.
 */
import type pg from 'pg';
import { type MigrationFile, pendingMigrations, preReleaseSchemaError, readMigrationFiles } from '../migration-files.js';
import type { MigrationResult } from '../store.js';

/** A schema name we are willing to interpolate into SQL (it is also the channel name's prefix). */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,39}$/;

/** The LISTEN/NOTIFY channel that says "jobs may be claimable": payloads are always empty. */
export function channelName(schema: string): string {
  return `${schema}_wake`;
}

let files: MigrationFile[] | undefined;

/** The migration files, in order (read once per process). */
export function migrationFiles(): readonly MigrationFile[] {
  files ??= readMigrationFiles(new URL('./migrations/', import.meta.url));
  return files;
}

/** The migration files with the schema, channel and lock prefix filled in. */
export function renderMigrations(schema: string): MigrationFile[] {
  if (!SCHEMA_NAME.test(schema)) throw new Error(`invalid PostgreSQL schema name "${schema}": use lower-case letters, digits and _ (at most 40)`);
  return migrationFiles().map((f) => ({
    ...f,
    sql: f.sql.replaceAll('{s}', `"${schema}"`).replaceAll('{ch}', channelName(schema)).replaceAll('{name}', schema),
  }));
}

/**
 * Applies the files the schema has not applied yet (up to `to`, else all) on `client`, inside
 * the caller's transaction, under a transaction-level advisory lock on the schema's name:
 * concurrent migrations (several processes on several machines starting at once) apply each
 * version once; the others wait, then find nothing to do. Applied versions are rows of
 * `<schema>.schema_migrations`. A schema made by a build from before the baseline (it has the
 * old `migrations` table) is refused with what to do about it.
 */
export async function applyMigrations(client: pg.ClientBase, schema: string, to?: number): Promise<MigrationResult> {
  const migrations = renderMigrations(schema);
  const s = `"${schema}"`;
  await client.query('SELECT pg_advisory_xact_lock(hashtext($1), 0)', [`${schema}:migrate`]);
  const found = await client.query<{ old: boolean; tracked: boolean }>(
    'SELECT to_regclass($1) IS NOT NULL AS old, to_regclass($2) IS NOT NULL AS tracked',
    [`${s}.migrations`, `${s}.schema_migrations`],
  );
  const { old, tracked } = found.rows[0] as { old: boolean; tracked: boolean };
  if (old && !tracked) {
    throw preReleaseSchemaError(`PostgreSQL schema "${schema}"`, `drop it (DROP SCHEMA "${schema}" CASCADE; its jobs are lost) or configure another schema`);
  }
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
  await client.query(`CREATE TABLE IF NOT EXISTS ${s}.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
  const res = await client.query<{ v: number }>(`SELECT coalesce(max(version), 0)::integer AS v FROM ${s}.schema_migrations`);
  const current = res.rows[0]?.v ?? 0;
  const pending = pendingMigrations(migrations, current, to);
  for (const m of pending) {
    await client.query(m.sql);
    await client.query(`INSERT INTO ${s}.schema_migrations (version, name) VALUES ($1, $2)`, [m.version, m.name]);
  }
  return { from: current, to: pending.at(-1)?.version ?? current };
}
