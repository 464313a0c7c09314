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
import { type MigrationFile, readMigrationFiles } from '../migration-files.js';

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
