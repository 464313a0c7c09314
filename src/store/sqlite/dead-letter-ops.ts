/**
 * SqliteStore's part of the dead-letter contract (DeadLetterStore in ../dead-letter-store.ts):
 * reading the attempt history (written by transitions.ts), and the failed jobs by group, page
 * and filter. Reads only. The filters follow the index jobs_dead_letters (tenant, type,
 * error_code, finished_at, id; failed jobs only), which covers the grouped listing.
 */
import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite';
import type { JobError } from '../../core/errors.js';
import type { JobRecord } from '../../core/job.js';
import type { JobState } from '../../core/states.js';
import type { AttemptRecord, DeadLetterCursor, DeadLetterFilter, DeadLetterGroup } from '../dead-letter-store.js';
import { parseJson } from '../job-row.js';
import { jobJson, jobsFromRows } from './rows.js';
import { arrays, statementCache } from './sql.js';

/** A failed job's error code (kept by transitions.ts), as the index jobs_dead_letters has it. */
export const DEAD_LETTER_CODE_SQL = 'j.error_code';

/** The groups of a filter's failed jobs (GROUP BY follows the index order: no sort of the jobs). */
export function deadLetterGroupsSql(where: readonly string[]): string {
  return `SELECT j.tenant, j.type, ${DEAD_LETTER_CODE_SQL} AS code, count(*) AS n, max(j.finished_at) AS last FROM jobs j
    WHERE ${where.join(' AND ')} GROUP BY j.tenant, j.type, code ORDER BY last DESC, j.tenant, j.type, code LIMIT ?`;
}

/** A page of a filter's failed jobs after a cursor, newest first (the listing's order). */
export function failedJobsSql(where: readonly string[], order: 'asc' | 'desc', select: string): string {
  const dir = order === 'asc' ? 'ASC' : 'DESC';
  return `SELECT ${select} FROM jobs j WHERE ${where.join(' AND ')} ORDER BY j.finished_at ${dir}, j.id ${dir} LIMIT ?`;
}

/** The WHERE clause and arguments of a filter over failed jobs (`j`). */
export function deadLetterWhere(filter: DeadLetterFilter): { where: string[]; args: SQLInputValue[] } {
  const where = ["j.state = 'failed'"];
  const args: SQLInputValue[] = [];
  if (filter.tenant !== undefined) {
    where.push('j.tenant = ?');
    args.push(filter.tenant);
  }
  if (filter.type !== undefined) {
    where.push('j.type = ?');
    args.push(filter.type);
  }
  if (filter.code === null) where.push(`${DEAD_LETTER_CODE_SQL} IS NULL`);
  else if (filter.code !== undefined) {
    where.push(`${DEAD_LETTER_CODE_SQL} = ?`);
    args.push(filter.code);
  }
  if (filter.failedFrom !== undefined) {
    where.push('j.finished_at >= ?');
    args.push(filter.failedFrom);
  }
  if (filter.failedBefore !== undefined) {
    where.push('j.finished_at < ?');
    args.push(filter.failedBefore);
  }
  if (filter.ids !== undefined) {
    where.push('j.id IN (SELECT value FROM json_each(?))');
    args.push(JSON.stringify(filter.ids));
  }
  return { where, args };
}

export class SqliteDeadLetterOps {
  private readonly stmt: (sql: string) => StatementSync;
  private readonly arrayStatements = new Map<string, StatementSync>();

  constructor(private readonly db: DatabaseSync) {
    this.stmt = statementCache(db);
  }

  private arrayStmt(sql: string): StatementSync {
    let st = this.arrayStatements.get(sql);
    if (!st) {
      st = arrays(this.db.prepare(sql));
      this.arrayStatements.set(sql, st);
    }
    return st;
  }

  async listAttempts(params: { id: string; tenant?: string; afterLease?: number; limit: number }): Promise<AttemptRecord[] | null> {
    const owner = this.stmt('SELECT tenant FROM jobs WHERE id = ?').get(params.id) as { tenant: string } | undefined;
    if (!owner || (params.tenant !== undefined && owner.tenant !== params.tenant)) return null;
    const rows = this.stmt(
      `SELECT lease, attempt, worker_id, started_at, ended_at, outcome, reason, error, stack FROM job_attempts
       WHERE job_id = ? AND lease > ? ORDER BY lease LIMIT ?`,
    ).all(params.id, params.afterLease ?? -1, Math.max(0, Math.floor(params.limit))) as Array<{
      lease: number;
      attempt: number;
      worker_id: string | null;
      started_at: number | null;
      ended_at: number;
      outcome: string;
      reason: string;
      error: string | null;
      stack: string | null;
    }>;
    return rows.map((r) => ({
      attempt: r.attempt,
      lease: r.lease,
      workerId: r.worker_id,
      startedAt: r.started_at,
      endedAt: r.ended_at,
      outcome: r.outcome as JobState,
      reason: r.reason,
      error: parseJson<JobError | null>(r.error, null),
      stack: r.stack,
    }));
  }

  async deadLetterGroups(params: { filter: DeadLetterFilter; limit: number }): Promise<DeadLetterGroup[]> {
    const { where, args } = deadLetterWhere(params.filter);
    const rows = this.stmt(deadLetterGroupsSql(where)).all(...args, Math.max(0, Math.floor(params.limit))) as Array<{
      tenant: string;
      type: string;
      code: unknown;
      n: number;
      last: number | null;
    }>;
    return rows.map((r) => ({ tenant: r.tenant, type: r.type, code: r.code === null ? null : String(r.code), count: r.n, lastFailedAt: r.last ?? 0 }));
  }

  async failedJobs(params: { filter: DeadLetterFilter; limit: number; order: 'asc' | 'desc'; cursor?: DeadLetterCursor | null }): Promise<JobRecord[]> {
    const { where, args } = deadLetterWhere(params.filter);
    if (params.cursor) {
      const cmp = params.order === 'asc' ? '>' : '<';
      // A row value: SQLite seeks the index to it (an OR of the two cases would walk every row before it).
      where.push(`(j.finished_at, j.id) ${cmp} (?, ?)`);
      args.push(params.cursor.finishedAt, params.cursor.id);
    }
    return jobsFromRows(this.arrayStmt(failedJobsSql(where, params.order, jobJson('j'))).all(...args, Math.max(0, Math.floor(params.limit))));
  }
}
