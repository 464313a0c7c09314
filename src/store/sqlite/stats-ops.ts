/**
 * SqliteStore's stats reads: counts, rates and run-time buckets from the tables the triggers of
 * migrations/0001_baseline.sql ("Stats") and stats-batch.ts keep. Each read touches rows per (tenant, type, state) or per second/minute of
 * the window, never per job, so its cost does not grow with the jobs table.
 */
import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite';
import { JOB_STATES, type JobState } from '../../core/states.js';
import type { Activity, ActivityParams, SweepHealth, TypeStateCount } from '../store.js';
import { statementCache } from './sql.js';

type Write = <T>(fn: () => T, rows?: number) => T;

export class SqliteStatsOps {
  private readonly stmt: (sql: string) => StatementSync;
  private lastZeroDrop = 0;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async countByState(params: { tenant?: string }): Promise<Record<JobState, number>> {
    const rows = (
      params.tenant === undefined
        ? this.stmt('SELECT state, sum(n) AS n FROM job_counts GROUP BY state').all()
        : this.stmt('SELECT state, sum(n) AS n FROM job_counts WHERE tenant = ? GROUP BY state').all(params.tenant)
    ) as { state: JobState; n: number }[];
    const out = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    for (const r of rows) if (r.state in out) out[r.state] = r.n;
    return out;
  }

  async countByTypeAndState(params: { tenant?: string }): Promise<TypeStateCount[]> {
    const rows = (
      params.tenant === undefined
        ? this.stmt('SELECT type, state, sum(n) AS n FROM job_counts GROUP BY type, state HAVING sum(n) > 0').all()
        : this.stmt('SELECT type, state, sum(n) AS n FROM job_counts WHERE tenant = ? GROUP BY type, state HAVING sum(n) > 0').all(params.tenant)
    ) as { type: string; state: JobState; n: number }[];
    return rows.map((r) => ({ type: r.type, state: r.state, count: r.n }));
  }

  async activity(params: ActivityParams): Promise<Activity> {
    const tenantSql = params.tenant === undefined ? '' : 'AND tenant = ?';
    const tenant: SQLInputValue[] = params.tenant === undefined ? [] : [params.tenant];
    const rates = this.stmt(`SELECT coalesce(sum(submitted), 0) AS s, coalesce(sum(finished), 0) AS f FROM job_rates WHERE second >= ? ${tenantSql}`).get(
      Math.floor(params.since / 1000),
      ...tenant,
    ) as { s: number; f: number };
    const durations = this.stmt(`SELECT type, bucket, sum(n) AS n FROM job_durations WHERE minute >= ? ${tenantSql} GROUP BY type, bucket`).all(
      Math.floor(params.durationsSince / 60_000),
      ...tenant,
    ) as { type: string; bucket: number; n: number }[];
    return { submitted: rates.s, finished: rates.f, durations: durations.map((d) => ({ type: d.type, bucket: d.bucket, count: d.n })) };
  }

  async sweepHealth(params: { tenant?: string; reapedSince: number }): Promise<SweepHealth> {
    // The stalled count reads the partial index jobs_stalled (its WHERE is repeated exactly, so
    // SQLite picks it); the reaps, the window's minutes of job_reaps (migration 11).
    const row = (
      params.tenant === undefined
        ? this.stmt(
            `SELECT (SELECT count(*) FROM jobs WHERE state = 'running' AND stalled = 1) AS stalled,
              (SELECT coalesce(sum(n), 0) FROM job_reaps WHERE minute >= ?) AS reaped`,
          ).get(Math.floor(params.reapedSince / 60_000))
        : this.stmt(
            `SELECT (SELECT count(*) FROM jobs WHERE state = 'running' AND stalled = 1 AND tenant = ?) AS stalled,
              (SELECT coalesce(sum(n), 0) FROM job_reaps WHERE tenant = ? AND minute >= ?) AS reaped`,
          ).get(params.tenant, params.tenant, Math.floor(params.reapedSince / 60_000))
    ) as { stalled: number; reaped: number };
    return { stalled: row.stalled, zombiesReaped: row.reaped };
  }

  async compactStats(params: { before: number }): Promise<void> {
    // Counter rows at zero (a type or tenant with no job left) go once a minute: the delete scans them all.
    const dropZero = Date.now() - this.lastZeroDrop >= 60_000;
    if (dropZero) this.lastZeroDrop = Date.now();
    this.write(() => {
      this.stmt('DELETE FROM job_rates WHERE second < ?').run(Math.floor(params.before / 1000));
      this.stmt('DELETE FROM job_durations WHERE minute < ?').run(Math.floor(params.before / 60_000));
      this.stmt('DELETE FROM job_reaps WHERE minute < ?').run(Math.floor(params.before / 60_000));
      if (dropZero) this.stmt('DELETE FROM job_counts WHERE n = 0').run();
    });
  }
}
