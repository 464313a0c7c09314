/**
 * PostgresStore's part of the schedule contract (ScheduleStore in ../store.ts). Each operation
 * is one statement; the tick's advance is an UPDATE guarded by the nextRunAt the caller read
 * (compare-and-swap), so of several processes handling one tick exactly one moves it on.
 */
import type pg from 'pg';
import type { ScheduleRecord } from '../../core/schedule.js';
import { parseJson } from '../job-row.js';
import type { AdvanceScheduleParams, ScheduleStore } from '../store.js';

const COLUMNS = 'tenant, name, task, cron, timezone, input, catch_up, overlap, declared, paused, next_run_at, last_run_at, last_job_id, created_at, updated_at';
const PLACEHOLDERS = '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15';

/** bigint columns arrive as strings from pg. */
function num(v: unknown): number | null {
  return v === null || v === undefined ? null : Number(v);
}

function toRecord(r: Record<string, unknown>): ScheduleRecord {
  return {
    tenant: r.tenant as string,
    name: r.name as string,
    task: r.task as string,
    cron: r.cron as string,
    timezone: r.timezone as string,
    input: parseJson(r.input, null),
    catchUp: r.catch_up === 'runOnce' ? 'runOnce' : 'skip',
    overlap: r.overlap === true,
    declared: r.declared === true,
    paused: r.paused === true,
    nextRunAt: num(r.next_run_at),
    lastRunAt: num(r.last_run_at),
    lastJobId: (r.last_job_id as string | null) ?? null,
    createdAt: num(r.created_at) ?? 0,
    updatedAt: num(r.updated_at) ?? 0,
  };
}

function values(s: ScheduleRecord): unknown[] {
  return [
    s.tenant,
    s.name,
    s.task,
    s.cron,
    s.timezone,
    s.input === undefined || s.input === null ? null : JSON.stringify(s.input),
    s.catchUp,
    s.overlap,
    s.declared,
    s.paused,
    s.nextRunAt,
    s.lastRunAt,
    s.lastJobId,
    s.createdAt,
    s.updatedAt,
  ];
}

export class PgScheduleOps implements ScheduleStore {
  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
  ) {}

  private async rows(text: string, params: unknown[]): Promise<ScheduleRecord[]> {
    const r = await this.pool.query(text, params);
    return r.rows.map((row) => toRecord(row as Record<string, unknown>));
  }

  async insertSchedule(params: { schedule: ScheduleRecord }): Promise<boolean> {
    const r = await this.pool.query(`INSERT INTO ${this.s}.schedules (${COLUMNS}) VALUES (${PLACEHOLDERS}) ON CONFLICT DO NOTHING`, values(params.schedule));
    return r.rowCount === 1;
  }

  async replaceSchedule(params: { schedule: ScheduleRecord }): Promise<void> {
    const set = COLUMNS.split(', ')
      .slice(2)
      .map((c) => `${c} = excluded.${c}`)
      .join(', ');
    await this.pool.query(`INSERT INTO ${this.s}.schedules (${COLUMNS}) VALUES (${PLACEHOLDERS}) ON CONFLICT (tenant, name) DO UPDATE SET ${set}`, values(params.schedule));
  }

  async getSchedule(params: { tenant: string; name: string }): Promise<ScheduleRecord | null> {
    return (await this.rows(`SELECT * FROM ${this.s}.schedules WHERE tenant = $1 AND name = $2`, [params.tenant, params.name]))[0] ?? null;
  }

  async listSchedules(params: { tenant?: string; limit: number }): Promise<ScheduleRecord[]> {
    return params.tenant === undefined
      ? this.rows(`SELECT * FROM ${this.s}.schedules ORDER BY name, tenant LIMIT $1`, [params.limit])
      : this.rows(`SELECT * FROM ${this.s}.schedules WHERE tenant = $1 ORDER BY name LIMIT $2`, [params.tenant, params.limit]);
  }

  async deleteSchedule(params: { tenant: string; name: string }): Promise<boolean> {
    const r = await this.pool.query(`DELETE FROM ${this.s}.schedules WHERE tenant = $1 AND name = $2`, [params.tenant, params.name]);
    return r.rowCount === 1;
  }

  async setSchedulePaused(params: { tenant: string; name: string; paused: boolean; nextRunAt?: number | null; now: number }): Promise<ScheduleRecord | null> {
    const found = await this.rows(
      `UPDATE ${this.s}.schedules SET paused = $1, next_run_at = CASE WHEN $2 THEN next_run_at ELSE $3::bigint END, updated_at = $4
       WHERE tenant = $5 AND name = $6 RETURNING *`,
      [params.paused, params.nextRunAt === undefined, params.nextRunAt ?? null, params.now, params.tenant, params.name],
    );
    return found[0] ?? null;
  }

  async recordScheduleRun(params: { tenant: string; name: string; at: number; jobId: string }): Promise<void> {
    await this.pool.query(`UPDATE ${this.s}.schedules SET last_run_at = $1, last_job_id = $2 WHERE tenant = $3 AND name = $4`, [
      params.at,
      params.jobId,
      params.tenant,
      params.name,
    ]);
  }

  async dueSchedules(params: { now: number; limit: number }): Promise<ScheduleRecord[]> {
    return this.rows(`SELECT * FROM ${this.s}.schedules WHERE NOT paused AND next_run_at IS NOT NULL AND next_run_at <= $1 ORDER BY next_run_at LIMIT $2`, [
      params.now,
      params.limit,
    ]);
  }

  async advanceSchedule(params: AdvanceScheduleParams): Promise<boolean> {
    const { lastRun } = params;
    const r = await this.pool.query(
      `UPDATE ${this.s}.schedules SET next_run_at = $1,
         last_run_at = CASE WHEN $2 THEN $3::bigint ELSE last_run_at END,
         last_job_id = CASE WHEN $2 THEN $4::text ELSE last_job_id END, updated_at = $5
       WHERE tenant = $6 AND name = $7 AND next_run_at = $8`,
      [params.nextRunAt, lastRun !== undefined, lastRun?.at ?? null, lastRun?.jobId ?? null, params.now, params.tenant, params.name, params.expectedNextRunAt],
    );
    return r.rowCount === 1;
  }
}
