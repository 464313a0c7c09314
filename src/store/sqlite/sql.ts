/**
 * SQL shared by SqliteStore's statements, and `compile`, which turns a statement written with
 * named parameters (`@at`) into one with positional parameters plus the list of values to
 * bind. A driver binds named parameters by looking every name up on the object passed (a few
 * µs per call with better-sqlite3, measured before the move to node:sqlite); on the worker's
 * hot path that cost more than the UPDATE itself.
 */
import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite';

/**
 * A job's visible change sequence (SSE ids) is max(updated_at, progress time): every write
 * moves updated_at strictly past both, so two changes of one job never share a sequence.
 */
export const NEXT_UPDATED_AT = 'max(@at, updated_at + 1, coalesce((SELECT p.updated_at FROM job_progress p WHERE p.job_id = jobs.id), 0) + 1)';

/** Appends one entry to the JSON array in `log` by string surgery (json_insert would re-parse the whole log). */
export function logEntrySql(from: string, to: string, attempt: string, reason: string, worker: string): string {
  return `substr(log, 1, length(log) - 1) || CASE WHEN log = '[]' THEN '' ELSE ',' END
    || json_object('from', ${from}, 'to', ${to}, 'at', @at, 'reason', ${reason}, 'attempt', ${attempt}, 'workerId', ${worker}) || ']'`;
}

/** A prepared statement and how to lay out its parameters from one input value. */
export interface Compiled<P> {
  readonly stmt: StatementSync;
  /** The values to bind, in the order the statement's `?` appear. */
  args(p: P): SQLInputValue[];
}

/**
 * Prepares `sql`, written with `@name` parameters, as a statement with positional ones. Each
 * name must have a getter in `params`; a name used twice is bound twice.
 */
export function compile<P>(db: DatabaseSync, sql: string, params: Readonly<Record<string, (p: P) => SQLInputValue>>): Compiled<P> {
  const getters: ((p: P) => SQLInputValue)[] = [];
  const text = sql.replace(/@([A-Za-z]\w*)/g, (_, name: string) => {
    const get = params[name];
    if (!get) throw new Error(`no value for SQL parameter @${name}`);
    getters.push(get);
    return '?';
  });
  const n = getters.length;
  return {
    stmt: db.prepare(text),
    args(p: P): SQLInputValue[] {
      const out = new Array<SQLInputValue>(n);
      for (let i = 0; i < n; i++) out[i] = (getters[i] as (p: P) => SQLInputValue)(p);
      return out;
    },
  };
}

/**
 * Sets `stmt` to return each row as an array of its columns, in order, and returns it.
 * node:sqlite has no `pluck`: a one-column statement set so is read as `row[0]`.
 */
export function arrays(stmt: StatementSync): StatementSync {
  stmt.setReturnArrays(true);
  return stmt;
}

/** A cached prepared statement per SQL text, on one connection (the store and its ops modules share one). */
export function statementCache(db: DatabaseSync): (sql: string) => StatementSync {
  const statements = new Map<string, StatementSync>();
  return (sql) => {
    let s = statements.get(sql);
    if (!s) {
      s = db.prepare(sql);
      statements.set(sql, s);
    }
    return s;
  };
}
