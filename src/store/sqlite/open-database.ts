/**
 * Opening SqliteStore's database file: node:sqlite loaded only then, errors that name the file,
 * and the switch to WAL, tried again while other processes hold the file.
 */
import { closeSync, existsSync, openSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { DatabaseSync } from 'node:sqlite';

/** Opens the file, naming it (and a missing directory) when that fails: node:sqlite's own message names neither. */
export function openDatabase(path: string): DatabaseSync {
  // Loaded when a store opens, not when this module is imported: a process that never opens
  // one (the CLI's client commands) does not load node:sqlite, nor get Node 22's warning that
  // it is experimental; and the CLI can hide that warning before it is emitted.
  const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
  createPrivately(path);
  try {
    return new DatabaseSync(path);
  } catch (err) {
    const message = (err as Error).message;
    const dir = dirname(resolve(path));
    if (path !== ':memory:' && !existsSync(dir)) throw new Error(`cannot open the SQLite database ${path}: the directory ${dir} does not exist`);
    throw new Error(`cannot open the SQLite database ${path}: ${message}`);
  }
}

/**
 * Switches the file to WAL. Changing the journal mode needs the file to itself, and SQLite
 * answers "database is locked" at once, without its busy handler, while another connection holds
 * a lock: several processes opening a new file together (or one opening while another writes
 * in rollback mode) would fail. Tried again for up to the busy timeout.
 */
export function enterWal(db: DatabaseSync, busyTimeoutMs: number): void {
  const deadline = Date.now() + busyTimeoutMs;
  for (let pause = 5; ; pause = Math.min(100, pause * 2)) {
    try {
      db.exec('PRAGMA journal_mode = WAL');
      return;
    } catch (err) {
      if (!/locked|busy/i.test((err as Error).message) || Date.now() >= deadline) throw err;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, pause);
    }
  }
}

/**
 * Creates a new database file with mode 0600 before SQLite opens it (SQLite would create it
 * 0644 under the usual umask). SQLite gives the -wal and -shm files it creates the mode of the
 * database file, so they are 0600 too. An existing file keeps its mode: the operator chose it.
 */
function createPrivately(path: string): void {
  if (path === '' || path === ':memory:' || path.startsWith('file:')) return;
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o600);
  } catch {
    return; // exists already, or cannot be created: SQLite's open reports the latter with the path
  }
  closeSync(fd);
}
