/**
 * SqliteStore's part of the schedule contract (ScheduleStore in ../store.ts). Every write is one
 * IMMEDIATE transaction of the store, and the tick's advance is an UPDATE guarded by the
 * nextRunAt the caller read (compare-and-swap), so several processes on one file move a
 * schedule on once per tick.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { ScheduleRecord } from '../../core/schedule.js';
import { parseJson } from '../job-row.js';
import type { ScheduleStore } from '../store.js';
import { statementCache } from './sql.js';

type Write = <T>(fn: () => T, rows?: number) => T;

interface Row {
  tenant: string;
  name: string;
  task: string;
  cron: string;
  timezone: string;
  input: string | null;
  catch_up: string;
  overlap: number;
  declared: number;
  paused: number;
  next_run_at: number | null;
  last_run_at: number | null;
  last_job_id: string | null;
  created_at: number;
  updated_at: number;
}

function toRecord(r: Row): ScheduleRecord {
  return {
    tenant: r.tenant,
    name: r.name,
    task: r.task,
    cron: r.cron,
    timezone: r.timezone,
    input: parseJson(r.input, null),
    catchUp: r.catch_up === 'runOnce' ? 'runOnce' : 'skip',
    overlap: r.overlap === 1,
    declared: r.declared === 1,
    paused: r.paused === 1,
    nextRunAt: r.next_run_at,
    lastRunAt: r.last_run_at,
    lastJobId: r.last_job_id,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

const COLUMNS = 'tenant, name, task, cron, timezone, input, catch_up, overlap, declared, paused, next_run_at, last_run_at, last_job_id, created_at, updated_at';

function values(s: ScheduleRecord): Array<string | number | null> {
  return [
    s.tenant,
    s.name,
    s.task,
    s.cron,
    s.timezone,
    s.input === undefined || s.input === null ? null : JSON.stringify(s.input),
    s.catchUp,
    s.overlap ? 1 : 0,
    s.declared ? 1 : 0,
    s.paused ? 1 : 0,
    s.nextRunAt,
    s.lastRunAt,
    s.lastJobId,
    s.createdAt,
    s.updatedAt,
  ];
}

export class SqliteScheduleOps implements ScheduleStore {
  /** The store's statement cache (same connection). */
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async insertSchedule(params: { schedule: ScheduleRecord }): Promise<boolean> {
    return this.write(
      () => Number(this.stmt(`INSERT INTO schedules (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`).run(...values(params.schedule)).changes) === 1,
    );
  }

  async replaceSchedule(params: { schedule: ScheduleRecord }): Promise<void> {
    this.write(() => this.stmt(`INSERT OR REPLACE INTO schedules (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(...values(params.schedule)));
  }

  async getSchedule(params: { tenant: string; name: string }): Promise<ScheduleRecord | null> {
    const row = this.stmt('SELECT * FROM schedules WHERE tenant = ? AND name = ?').get(params.tenant, params.name) as Row | undefined;
    return row ? toRecord(row) : null;
  }

  async listSchedules(params: { tenant?: string; limit: number }): Promise<ScheduleRecord[]> {
    const rows = (
      params.tenant === undefined
        ? this.stmt('SELECT * FROM schedules ORDER BY name, tenant LIMIT ?').all(params.limit)
        : this.stmt('SELECT * FROM schedules WHERE tenant = ? ORDER BY name LIMIT ?').all(params.tenant, params.limit)
    ) as unknown as Row[];
    return rows.map(toRecord);
  }

  async deleteSchedule(params: { tenant: string; name: string }): Promise<boolean> {
    return this.write(() => Number(this.stmt('DELETE FROM schedules WHERE tenant = ? AND name = ?').run(params.tenant, params.name).changes) === 1);
  }

  async setSchedulePaused(params: { tenant: string; name: string; paused: boolean; nextRunAt?: number | null; now: number }): Promise<ScheduleRecord | null> {
    return this.write(() => {
      const keepNext = params.nextRunAt === undefined ? 1 : 0;
      this.stmt('UPDATE schedules SET paused = ?, next_run_at = CASE WHEN ? = 1 THEN next_run_at ELSE ? END, updated_at = ? WHERE tenant = ? AND name = ?').run(
        params.paused ? 1 : 0,
        keepNext,
        params.nextRunAt ?? null,
        params.now,
        params.tenant,
        params.name,
      );
      const row = this.stmt('SELECT * FROM schedules WHERE tenant = ? AND name = ?').get(params.tenant, params.name) as Row | undefined;
      return row ? toRecord(row) : null;
    });
  }

  async recordScheduleRun(params: { tenant: string; name: string; at: number; jobId: string }): Promise<void> {
    this.write(() => this.stmt('UPDATE schedules SET last_run_at = ?, last_job_id = ? WHERE tenant = ? AND name = ?').run(params.at, params.jobId, params.tenant, params.name));
  }

  async dueSchedules(params: { now: number; limit: number }): Promise<ScheduleRecord[]> {
    // The WHERE terms repeat the partial index's condition: SQLite uses it only then.
    const rows = this.stmt('SELECT * FROM schedules WHERE paused = 0 AND next_run_at IS NOT NULL AND next_run_at <= ? ORDER BY next_run_at LIMIT ?').all(
      params.now,
      params.limit,
    ) as unknown as Row[];
    return rows.map(toRecord);
  }

  async advanceSchedule(params: Parameters<ScheduleStore['advanceSchedule']>[0]): Promise<boolean> {
    const { lastRun } = params;
    return this.write(
      () =>
        Number(
          this.stmt(
            `UPDATE schedules SET next_run_at = ?, last_run_at = CASE WHEN ? = 1 THEN ? ELSE last_run_at END,
               last_job_id = CASE WHEN ? = 1 THEN ? ELSE last_job_id END, updated_at = ?
             WHERE tenant = ? AND name = ? AND next_run_at = ?`,
          ).run(
            params.nextRunAt,
            lastRun ? 1 : 0,
            lastRun?.at ?? null,
            lastRun ? 1 : 0,
            lastRun?.jobId ?? null,
            params.now,
            params.tenant,
            params.name,
            params.expectedNextRunAt,
          ).changes,
        ) === 1,
    );
  }
}
