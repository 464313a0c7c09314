/**
 * SQLite schema: the numbered SQL files of `migrations/` (0001_baseline.sql first), read as they
 * are (store/migration-files.ts), applied by SqliteStore.migrate inside its IMMEDIATE
 * transaction and recorded in `longhaul_migrations` (version, name, applied_at).
 */
import type { DatabaseSync } from 'node:sqlite';
import { type MigrationFile, pendingMigrations, preReleaseSchemaError, readMigrationFiles } from '../migration-files.js';
import type { MigrationResult } from '../store.js';

let files: MigrationFile[] | undefined;

/** The schema's migration files (migrations/0001_baseline.sql, …), read once per process. */
export function migrationFiles(): readonly MigrationFile[] {
  files ??= readMigrationFiles(new URL('./migrations/', import.meta.url));
  return files;
}

/**
 * Applies the files `db` has not applied yet (up to `to`, else all), each recorded in
 * longhaul_migrations. The caller holds the write transaction: several processes opening the
 * same file at once apply each file exactly once (the others wait for the write lock, then find
 * nothing to do). `path` names the database in errors.
 */
export function applyMigrations(db: DatabaseSync, path: string, to?: number): MigrationResult {
  const current = appliedVersion(db, path);
  const pending = pendingMigrations(migrationFiles(), current, to);
  if (!hasTable(db, 'longhaul_migrations')) {
    db.exec('CREATE TABLE longhaul_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)');
  }
  const record = db.prepare('INSERT INTO longhaul_migrations (version, name, applied_at) VALUES (?, ?, ?)');
  for (const file of pending) {
    try {
      db.exec(file.sql);
    } catch (err) {
      throw new Error(`SQLite migration ${file.file} failed on ${path}: ${(err as Error).message}`, { cause: err });
    }
    record.run(file.version, file.name, Date.now());
  }
  return { from: current, to: pending.at(-1)?.version ?? current };
}

/**
 * The newest version applied (0: none). A database written by a build from before the baseline
 * (it has longhaul_meta, not longhaul_migrations) is refused with what to do about it.
 */
export function appliedVersion(db: DatabaseSync, path: string): number {
  if (!hasTable(db, 'longhaul_migrations')) {
    if (hasTable(db, 'longhaul_meta')) {
      throw preReleaseSchemaError(
        `The SQLite database ${path}`,
        'delete the file (and its -wal and -shm files) to start with an empty database, or point Longhaul at another file',
      );
    }
    return 0;
  }
  const row = db.prepare('SELECT max(version) AS v FROM longhaul_migrations').get() as { v: number | null };
  return row.v ?? 0;
}

function hasTable(db: DatabaseSync, name: string): boolean {
  return db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined;
}
