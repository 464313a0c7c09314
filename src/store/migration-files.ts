/**
 * A store's schema as numbered SQL files: `migrations/0001_baseline.sql`, `0002_<what>.sql`, …
 * beside the store's code (copied into `dist/` by the build). The files are read as they are:
 * no migration text is built from TypeScript values. A released file never changes (the test
 * `test/unit/migration-hashes.test.ts` holds the SHA-256 of each); a change of schema is a new
 * file with the next number. See CONTRIBUTING.md, "Changing the schema".
 */
import { readdirSync, readFileSync } from 'node:fs';

export interface MigrationFile {
  /** 1, 2, …: the file's number, also the version a database has once it is applied. */
  version: number;
  /** The file name without its number and extension (`baseline`). */
  name: string;
  /** The file name (`0001_baseline.sql`). */
  file: string;
  sql: string;
}

const FILE_NAME = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/**
 * The migration files of one store's folder, in order. Throws when a file is misnamed or the
 * numbers are not 1, 2, 3… without a gap (a file lost from a package must not go unnoticed).
 */
export function readMigrationFiles(dir: URL): MigrationFile[] {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.sql'))
    .sort();
  return files.map((file, i) => {
    const m = FILE_NAME.exec(file);
    if (!m) throw new Error(`migration file ${file} in ${dir.pathname}: expected NNNN_name.sql`);
    const version = Number(m[1]);
    if (version !== i + 1) throw new Error(`migration files in ${dir.pathname}: expected number ${i + 1}, found ${file}`);
    return { version, name: m[2] as string, file, sql: readFileSync(new URL(file, dir), 'utf8') };
  });
}

/** The error for a database made by a build of Longhaul from before the schema was folded into 0001. */
export function preReleaseSchemaError(where: string, remedy: string): Error {
  return new Error(
    `${where} was created by a pre-release build of Longhaul (before its migrations were folded into 0001_baseline.sql) and cannot be upgraded: ${remedy}`,
  );
}

/**
 * The versions to apply to go from `current` to `target` (the latest when not given), checked:
 * a database newer than this Longhaul, or a target outside the known versions, is an error.
 */
export function pendingMigrations(files: readonly MigrationFile[], current: number, target?: number): MigrationFile[] {
  const latest = files.length;
  if (current > latest) throw new Error(`database schema version ${current} is newer than this Longhaul (${latest}); upgrade Longhaul`);
  const to = target ?? latest;
  if (!Number.isInteger(to) || to < current || to > latest) {
    throw new Error(`cannot migrate from version ${current} to ${target}: this Longhaul knows versions 1 to ${latest}`);
  }
  return files.slice(current, to);
}
