/**
 * PostgresStore's part of the dead-letter contract (DeadLetterStore in ../dead-letter-store.ts):
 * reading the attempt history (written by apply_transitions, migrations/0001_baseline.sql), and the
 * failed jobs by group, page and filter. Reads only. The filters follow the index
 * jobs_dead_letters (tenant, type, error_code, finished_at, id; failed jobs only), which covers
 * the grouped listing (an index-only scan).
 */
import type pg from 'pg';
import type { JobError } from '../../core/errors.js';
import { isUuid } from '../../core/ids.js';
import type { JobRecord } from '../../core/job.js';
import type { JobState } from '../../core/states.js';
import type { AttemptRecord, DeadLetterCursor, DeadLetterFilter, DeadLetterGroup } from '../dead-letter-store.js';
import { parseJson } from '../job-row.js';
import { JOB_SELECT, rowToJob } from './rows.js';

/** A failed job's error code (kept by apply_transitions), as the index jobs_dead_letters has it. */
export const DEAD_LETTER_CODE_SQL = 'j.error_code';

/** The groups of a filter's failed jobs, in schema `s` (`limit` is the last value). */
export function deadLetterGroupsSql(s: string, where: readonly string[], limitParam: number): string {
  return `SELECT j.tenant, j.type, ${DEAD_LETTER_CODE_SQL} AS code, count(*)::bigint, max(j.finished_at) AS last FROM ${s}.jobs j
    WHERE ${where.join(' AND ')} GROUP BY j.tenant, j.type, ${DEAD_LETTER_CODE_SQL}
    ORDER BY last DESC NULLS LAST, j.tenant, j.type, code LIMIT $${limitParam}`;
}

/** A page of a filter's failed jobs (`select` over `jobs j LEFT JOIN progress p`), in order, `limit` the last value. */
export function failedJobsSql(s: string, where: readonly string[], order: 'asc' | 'desc', select: string, limitParam: number): string {
  const dir = order === 'asc' ? 'ASC' : 'DESC';
  return `SELECT ${select} FROM ${s}.jobs j LEFT JOIN ${s}.progress p ON p.job_id = j.id
    WHERE ${where.join(' AND ')} ORDER BY j.finished_at ${dir}, j.id ${dir} LIMIT $${limitParam}`;
}

/** The WHERE clause and values of a filter over failed jobs (`j`); `values` may already hold some. */
export function deadLetterWhere(filter: DeadLetterFilter, values: unknown[] = []): { where: string[]; values: unknown[] } {
  const where = ["j.state = 'failed'"];
  const add = (sql: (n: number) => string, value: unknown) => {
    values.push(value);
    where.push(sql(values.length));
  };
  if (filter.tenant !== undefined) add((n) => `j.tenant = $${n}`, filter.tenant);
  if (filter.type !== undefined) add((n) => `j.type = $${n}`, filter.type);
  if (filter.code === null) where.push(`${DEAD_LETTER_CODE_SQL} IS NULL`);
  else if (filter.code !== undefined) add((n) => `${DEAD_LETTER_CODE_SQL} = $${n}`, filter.code);
  if (filter.failedFrom !== undefined) add((n) => `j.finished_at >= $${n}`, filter.failedFrom);
  if (filter.failedBefore !== undefined) add((n) => `j.finished_at < $${n}`, filter.failedBefore);
  // An id that is not a UUID names no job (and would not cast).
  if (filter.ids !== undefined) add((n) => `j.id = ANY($${n}::uuid[])`, filter.ids.filter(isUuid));
  return { where, values };
}

export class PgDeadLetterOps {
  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
  ) {}

  private async rows(text: string, values: unknown[]): Promise<unknown[][]> {
    return (await this.pool.query({ text, values, rowMode: 'array' })).rows as unknown[][];
  }

  async listAttempts(params: { id: string; tenant?: string; afterLease?: number; limit: number }): Promise<AttemptRecord[] | null> {
    if (!isUuid(params.id)) return null;
    // One statement: the job's tenant (no row: no such job), then its attempts.
    const rows = await this.rows(
      `SELECT j.tenant, a.lease, a.attempt, a.worker_id, a.started_at, a.ended_at, a.outcome, a.reason, a.error::text, a.stack
       FROM ${this.s}.jobs j
       LEFT JOIN LATERAL (
         SELECT * FROM ${this.s}.job_attempts a WHERE a.job_id = j.id AND a.lease > $2 ORDER BY a.lease LIMIT $3
       ) a ON true
       WHERE j.id = $1
       ORDER BY a.lease`,
      [params.id, params.afterLease ?? -1, Math.max(0, Math.floor(params.limit))],
    );
    const first = rows[0];
    if (!first || (params.tenant !== undefined && first[0] !== params.tenant)) return null;
    return rows
      .filter((r) => r[1] !== null)
      .map((r) => ({
        attempt: Number(r[2]),
        lease: Number(r[1]),
        workerId: (r[3] as string | null) ?? null,
        startedAt: r[4] === null ? null : Number(r[4]),
        endedAt: Number(r[5]),
        outcome: r[6] as JobState,
        reason: r[7] as string,
        error: parseJson<JobError | null>(r[8], null),
        stack: (r[9] as string | null) ?? null,
      }));
  }

  async deadLetterGroups(params: { filter: DeadLetterFilter; limit: number }): Promise<DeadLetterGroup[]> {
    const { where, values } = deadLetterWhere(params.filter);
    values.push(Math.max(0, Math.floor(params.limit)));
    const rows = await this.rows(deadLetterGroupsSql(this.s, where, values.length), values);
    return rows.map((r) => ({
      tenant: r[0] as string,
      type: r[1] as string,
      code: (r[2] as string | null) ?? null,
      count: Number(r[3]),
      lastFailedAt: r[4] === null ? 0 : Number(r[4]),
    }));
  }

  async failedJobs(params: { filter: DeadLetterFilter; limit: number; order: 'asc' | 'desc'; cursor?: DeadLetterCursor | null }): Promise<JobRecord[]> {
    const { where, values } = deadLetterWhere(params.filter);
    if (params.cursor) {
      values.push(params.cursor.finishedAt, isUuid(params.cursor.id) ? params.cursor.id : '00000000-0000-0000-0000-000000000000');
      where.push(`(j.finished_at, j.id) ${params.order === 'asc' ? '>' : '<'} ($${values.length - 1}::bigint, $${values.length}::uuid)`);
    }
    values.push(Math.max(0, Math.floor(params.limit)));
    const rows = await this.rows(failedJobsSql(this.s, where, params.order, JOB_SELECT, values.length), values);
    return rows.map((r) => rowToJob(r));
  }
}
