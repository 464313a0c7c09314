/**
 * PostgresStore's part of the retention contract (RetentionStore in ../store.ts): finding ended
 * jobs to delete and deleting them with every dependent row. A deletion is one statement over one
 * batch of ids: the job rows are locked FOR UPDATE SKIP LOCKED (a row another transaction holds,
 * a worker's or a manual retry's, is left for a later batch instead of waited for), and the state
 * is checked again on the locked row, so a job that left its ended state is kept.
 */
import type pg from 'pg';
import { isUuid } from '../../core/ids.js';
import type { JobState } from '../../core/states.js';
import type { DeletedRows, EndedJobFilter } from '../store.js';

const ENDED_SQL = "('succeeded', 'expired', 'failed', 'cancelled')";

export class PgRetentionOps {
  private readonly deleteSql: string;

  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
  ) {
    const q = s;
    const dep = (name: string, table: string) => `${name} AS (DELETE FROM ${q}.${table} t USING due WHERE t.job_id = due.id RETURNING 1)`;
    this.deleteSql = `
      WITH due AS (
        SELECT j.id FROM ${q}.jobs j
        WHERE j.id = ANY($1::uuid[]) AND j.state IN ${ENDED_SQL} AND ($2::text[] IS NULL OR j.state = ANY($2::text[]))
          AND NOT EXISTS (SELECT 1 FROM ${q}.jobs c WHERE c.parent_id = j.id::text)
        FOR UPDATE OF j SKIP LOCKED
      ),
      ${dep('p', 'progress')},
      ${dep('r', 'job_results')},
      ${dep('w', 'job_webhooks')},
      ${dep('d', 'webhook_deliveries')},
      ${dep('g', 'job_signals')},
      ${dep('a', 'job_attempts')},
      jd AS (DELETE FROM ${q}.jobs j USING due WHERE j.id = due.id RETURNING 1)
      SELECT (SELECT count(*) FROM jd)::integer, (SELECT count(*) FROM p)::integer, (SELECT count(*) FROM r)::integer,
        (SELECT count(*) FROM w)::integer, (SELECT count(*) FROM d)::integer, (SELECT count(*) FROM g)::integer, (SELECT count(*) FROM a)::integer`;
  }

  async endedJobs(params: { filter: EndedJobFilter; limit: number }): Promise<Array<{ id: string; finishedAt: number }>> {
    const { filter } = params;
    if (filter.states.length === 0) return [];
    // One state is compared with `=`: the (state, finished_at) index then gives the order (with
    // `= ANY(array)` PostgreSQL 15 sorts every match instead).
    const single = filter.states.length === 1;
    const values: unknown[] = [single ? filter.states[0] : [...filter.states]];
    const where = [`j.state IN ${ENDED_SQL}`, single ? 'j.state = $1::text' : 'j.state = ANY($1::text[])'];
    const add = (sql: (n: number) => string, value: unknown) => {
      values.push(value);
      where.push(sql(values.length));
    };
    if (filter.finishedBefore !== undefined) add((n) => `j.finished_at < $${n}`, filter.finishedBefore);
    if (filter.finishedFrom !== undefined) add((n) => `j.finished_at >= $${n}`, filter.finishedFrom);
    if (filter.tenant !== undefined) add((n) => `j.tenant = $${n}`, filter.tenant);
    if (filter.types !== undefined) add((n) => `j.type = ANY($${n}::text[])`, [...filter.types]);
    if (filter.excludeTypes !== undefined && filter.excludeTypes.length > 0) add((n) => `NOT (j.type = ANY($${n}::text[]))`, [...filter.excludeTypes]);
    where.push(`NOT EXISTS (SELECT 1 FROM ${this.s}.jobs c WHERE c.parent_id = j.id::text)`);
    values.push(Math.max(0, Math.floor(params.limit)));
    const text = `SELECT j.id::text, j.finished_at FROM ${this.s}.jobs j WHERE ${where.join(' AND ')} ORDER BY j.finished_at LIMIT $${values.length}`;
    const res = await this.pool.query({ text, values, rowMode: 'array' });
    return (res.rows as unknown[][]).map((r) => ({ id: r[0] as string, finishedAt: Number(r[1]) }));
  }

  async countOpenJobs(params: { tenant?: string; type?: string }): Promise<number> {
    const open = `state NOT IN ${ENDED_SQL} AND ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR type = $2)`;
    // A tenant's running jobs apart (jobs_running): jobs_tenant leaves them out.
    const text =
      params.tenant === undefined
        ? `SELECT count(*)::integer FROM ${this.s}.jobs WHERE ${open}`
        : `SELECT ((SELECT count(*) FROM ${this.s}.jobs WHERE ${open} AND state <> 'running')
            + (SELECT count(*) FROM ${this.s}.jobs WHERE ${open} AND state = 'running'))::integer`;
    const res = await this.pool.query({ text, values: [params.tenant ?? null, params.type ?? null], rowMode: 'array' });
    return Number((res.rows as unknown[][])[0]?.[0] ?? 0);
  }

  async deleteJobs(params: { ids: readonly string[]; states?: readonly JobState[] }): Promise<DeletedRows> {
    if (params.ids.length === 0) return { jobs: 0, progress: 0, resultFiles: 0, webhooks: 0, deliveries: 0, signals: 0, attempts: 0 };
    const ids = params.ids.filter(isUuid);
    const res = await this.pool.query({ text: this.deleteSql, values: [ids, params.states === undefined ? null : [...params.states]], rowMode: 'array' });
    const row = ((res.rows as unknown[][])[0] ?? []).map(Number);
    return {
      jobs: row[0] ?? 0,
      progress: row[1] ?? 0,
      resultFiles: row[2] ?? 0,
      webhooks: row[3] ?? 0,
      deliveries: row[4] ?? 0,
      signals: row[5] ?? 0,
      attempts: row[6] ?? 0,
    };
  }
}
