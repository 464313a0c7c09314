/**
 * SqliteStore's part of the retention contract (RetentionStore in ../store.ts): finding ended
 * jobs to delete and deleting them with every dependent row. Each deletion is one IMMEDIATE
 * transaction of the store over one batch of ids, so the write lock is held for one batch only.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { JobState } from '../../core/states.js';
import type { DeletedRows, EndedJobFilter } from '../store.js';
import { statementCache } from './sql.js';

/** The store's IMMEDIATE transaction (`rows`: about how many rows it writes, for the checkpointer). */
type Write = <T>(fn: () => T, rows?: number) => T;

/** The condition of the partial index jobs_ended, repeated so that SQLite uses it. */
const ENDED_SQL = "state IN ('succeeded', 'expired', 'failed', 'cancelled')";
const ENDED_STATES: ReadonlySet<string> = new Set(['succeeded', 'expired', 'failed', 'cancelled']);
const NO_CHILD_SQL = 'NOT EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = j.id)';

const DEPENDENTS: ReadonlyArray<[keyof DeletedRows, string]> = [
  ['progress', 'job_progress'],
  ['resultFiles', 'job_results'],
  ['webhooks', 'job_webhooks'],
  ['deliveries', 'webhook_deliveries'],
  ['signals', 'job_signals'],
  ['attempts', 'job_attempts'],
];

export class SqliteRetentionOps {
  /** The store's statement cache (same connection). */
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async endedJobs(params: { filter: EndedJobFilter; limit: number }): Promise<Array<{ id: string; finishedAt: number }>> {
    const { filter } = params;
    if (filter.states.length === 0) return [];
    const where = [ENDED_SQL, `j.state IN (${filter.states.map(() => '?').join(', ')})`];
    const args: (string | number)[] = [...filter.states];
    if (filter.finishedBefore !== undefined) {
      where.push('j.finished_at < ?');
      args.push(filter.finishedBefore);
    }
    if (filter.finishedFrom !== undefined) {
      where.push('j.finished_at >= ?');
      args.push(filter.finishedFrom);
    }
    if (filter.tenant !== undefined) {
      where.push('j.tenant = ?');
      args.push(filter.tenant);
    }
    if (filter.types !== undefined) {
      where.push(`j.type IN (${filter.types.map(() => '?').join(', ')})`);
      args.push(...filter.types);
    }
    if (filter.excludeTypes !== undefined && filter.excludeTypes.length > 0) {
      where.push(`j.type NOT IN (${filter.excludeTypes.map(() => '?').join(', ')})`);
      args.push(...filter.excludeTypes);
    }
    where.push(NO_CHILD_SQL);
    args.push(Math.max(0, Math.floor(params.limit)));
    const sql = `SELECT j.id, j.finished_at FROM jobs j WHERE ${where.join(' AND ')} ORDER BY j.finished_at LIMIT ?`;
    return (this.stmt(sql).all(...args) as Array<{ id: string; finished_at: number }>).map((r) => ({ id: r.id, finishedAt: Number(r.finished_at) }));
  }

  async countOpenJobs(params: { tenant?: string; type?: string }): Promise<number> {
    const where = [`NOT (${ENDED_SQL})`];
    const args: string[] = [];
    if (params.tenant !== undefined) {
      where.push('tenant = ?');
      args.push(params.tenant);
    }
    if (params.type !== undefined) {
      where.push('type = ?');
      args.push(params.type);
    }
    const row = this.stmt(`SELECT count(*) AS n FROM jobs WHERE ${where.join(' AND ')}`).get(...args) as { n: number };
    return row.n;
  }

  async deleteJobs(params: { ids: readonly string[]; states?: readonly JobState[] }): Promise<DeletedRows> {
    const out: DeletedRows = { jobs: 0, progress: 0, resultFiles: 0, webhooks: 0, deliveries: 0, signals: 0, attempts: 0 };
    if (params.ids.length === 0) return out;
    const ids = JSON.stringify(params.ids);
    // Only ended states: a state list naming an open state matches nothing more.
    const states = params.states === undefined ? '' : ` AND j.state IN (SELECT value FROM json_each('${JSON.stringify(params.states.filter((s) => ENDED_STATES.has(s))).replaceAll("'", "''")}'))`;
    return this.write(() => {
      // Re-checked inside the transaction: a job retried or given a child since it was selected stays.
      const due = JSON.stringify(
        (
          this.stmt(`SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?)) AND j.${ENDED_SQL}${states} AND ${NO_CHILD_SQL}`).all(ids) as Array<{
            id: string;
          }>
        ).map((r) => r.id),
      );
      for (const [key, table] of DEPENDENTS) {
        out[key] = Number(this.stmt(`DELETE FROM ${table} WHERE job_id IN (SELECT value FROM json_each(?))`).run(due).changes);
      }
      out.jobs = Number(this.stmt('DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))').run(due).changes);
      return out;
    }, params.ids.length * 2);
  }
}
