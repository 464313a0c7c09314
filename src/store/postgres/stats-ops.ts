/**
 * PostgresStore's stats reads and their upkeep, over the statistics tables of migrations/0001_baseline.sql. Every read is
 * one statement that adds the folded counters and the changes not yet folded (one snapshot, so
 * exact); its cost is the number of counter rows plus the change rows since the last compaction
 * (each weighed by its count `n`: a statement's changes are grouped, see STATS_BATCH_MIGRATION).
 */
import type pg from 'pg';
import { JOB_STATES, type JobState } from '../../core/states.js';
import type { Activity, ActivityParams, SweepHealth, TypeStateCount } from '../store.js';

type Rows = (name: string, text: string, values: unknown[]) => Promise<unknown[][]>;

/** Vacuum the change log once this many folded rows are dead in it, or this long after the last vacuum. */
const VACUUM_AFTER_ROWS = 10_000;
const VACUUM_AFTER_MS = 5_000;

export class PgStatsOps {
  private readonly sql: ReturnType<typeof statements>;
  private foldedSinceVacuum = 0;
  private lastVacuum = 0;
  private lastZeroDrop = 0;

  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
    private readonly rows: Rows,
  ) {
    this.sql = statements(s);
  }

  async countByState(params: { tenant?: string }): Promise<Record<JobState, number>> {
    const rows =
      params.tenant === undefined
        ? await this.rows('stats_states_all', this.sql.states(false), [])
        : await this.rows('stats_states_tenant', this.sql.states(true), [params.tenant]);
    const out = Object.fromEntries(JOB_STATES.map((st) => [st, 0])) as Record<JobState, number>;
    for (const r of rows) if ((r[0] as string) in out) out[r[0] as JobState] = Number(r[1]);
    return out;
  }

  async countByTypeAndState(params: { tenant?: string }): Promise<TypeStateCount[]> {
    const rows =
      params.tenant === undefined
        ? await this.rows('stats_types_all', this.sql.types(false), [])
        : await this.rows('stats_types_tenant', this.sql.types(true), [params.tenant]);
    return rows.map((r) => ({ type: r[0] as string, state: r[1] as JobState, count: Number(r[2]) }));
  }

  async activity(params: ActivityParams): Promise<Activity> {
    const t = params.tenant !== undefined;
    const extra = t ? [params.tenant] : [];
    const [[rates], durations] = await Promise.all([
      this.rows(`stats_rates_${t ? 'tenant' : 'all'}`, this.sql.rates(t), [Math.floor(params.since / 1000), ...extra]),
      this.rows(`stats_durations_${t ? 'tenant' : 'all'}`, this.sql.durations(t), [Math.floor(params.durationsSince / 60_000), ...extra]),
    ]);
    return {
      submitted: Number(rates?.[0] ?? 0),
      finished: Number(rates?.[1] ?? 0),
      durations: durations.map((r) => ({ type: r[0] as string, bucket: Number(r[1]), count: Number(r[2]) })),
    };
  }

  async sweepHealth(params: { tenant?: string; reapedSince: number }): Promise<SweepHealth> {
    const t = params.tenant !== undefined;
    const [row] = await this.rows(`stats_sweep_${t ? 'tenant' : 'all'}`, this.sql.sweepHealth(t), [Math.floor(params.reapedSince / 60_000), ...(t ? [params.tenant] : [])]);
    return { stalled: Number(row?.[0] ?? 0), zombiesReaped: Number(row?.[1] ?? 0) };
  }

  /**
   * Folds the change log, then vacuums it when it folded many rows or some time has passed: the
   * deleted rows stay in the table's pages until a vacuum, and every read scans those pages
   * (300,000 dead rows cost a stats read 12 ms instead of 2). Autovacuum alone wakes once a
   * minute at best.
   */
  async compactStats(params: { before: number }): Promise<void> {
    // Counter rows at zero (a type or tenant with no job left) go once a minute: the delete scans them all.
    const dropZero = Date.now() - this.lastZeroDrop >= 60_000;
    if (dropZero) this.lastZeroDrop = Date.now();
    const res = await this.pool.query<{ n: number }>({ name: 'lh_stats_compact', text: `SELECT ${this.s}.compact_stats($1, $2) AS n`, values: [params.before, dropZero] });
    // The reaps of minutes before the window, with the zero counters' cadence: a few rows a minute.
    if (dropZero) await this.pool.query({ name: 'lh_stats_reaps_drop', text: `DELETE FROM ${this.s}.job_reaps WHERE minute < $1`, values: [Math.floor(params.before / 60_000)] });
    const folded = Number(res.rows[0]?.n ?? 0);
    if (folded <= 0) return;
    this.foldedSinceVacuum += folded;
    const now = Date.now();
    if (this.foldedSinceVacuum < VACUUM_AFTER_ROWS && now - this.lastVacuum < VACUUM_AFTER_MS) return;
    this.foldedSinceVacuum = 0;
    this.lastVacuum = now;
    // SKIP_LOCKED: never waits for a lock. A vacuum that fails (a role that may not vacuum) is
    // tried again later; autovacuum is the backstop (see job_changes in migrations/0001_baseline.sql).
    await this.pool.query(`VACUUM (SKIP_LOCKED) ${this.s}.job_changes`).catch(() => undefined);
  }
}

function statements(s: string) {
  /** Counter rows plus pending changes, per (type, state), optionally of one tenant ($1). */
  const counts = (tenant: boolean) => {
    const and = tenant ? 'AND tenant = $1' : '';
    return `
      SELECT type, state, n FROM ${s}.job_counts WHERE true ${and}
      UNION ALL SELECT type, old_state, -n FROM ${s}.job_changes WHERE old_state IS NOT NULL ${and}
      UNION ALL SELECT type, new_state, n FROM ${s}.job_changes WHERE new_state IS NOT NULL ${and}`;
  };
  return {
    states: (tenant: boolean) => `SELECT state, sum(n)::bigint FROM (${counts(tenant)}) x GROUP BY state`,
    types: (tenant: boolean) => `SELECT type, state, sum(n)::bigint FROM (${counts(tenant)}) x GROUP BY type, state HAVING sum(n) > 0`,
    rates: (tenant: boolean) => {
      const and = tenant ? 'AND tenant = $2' : '';
      return `SELECT
        coalesce((SELECT sum(submitted) FROM ${s}.job_rates WHERE second >= $1 ${and}), 0)
          + (SELECT coalesce(sum(n), 0) FROM ${s}.job_changes WHERE submitted_at / 1000 >= $1 ${and}),
        coalesce((SELECT sum(finished) FROM ${s}.job_rates WHERE second >= $1 ${and}), 0)
          + (SELECT coalesce(sum(n), 0) FROM ${s}.job_changes WHERE finished_at / 1000 >= $1 ${and})`;
    },
    /** Running jobs flagged stalled (the partial index jobs_stalled: its WHERE repeated) and the window's reaps ($1: its first minute). */
    sweepHealth: (tenant: boolean) => {
      const and = tenant ? 'AND tenant = $2' : '';
      return `SELECT (SELECT count(*) FROM ${s}.jobs WHERE state = 'running' AND stalled ${and}),
        coalesce((SELECT sum(n) FROM ${s}.job_reaps WHERE minute >= $1 ${and}), 0)`;
    },
    durations: (tenant: boolean) => {
      const and = tenant ? 'AND tenant = $2' : '';
      return `SELECT type, bucket, sum(n)::bigint FROM (
          SELECT type, bucket, n FROM ${s}.job_durations WHERE minute >= $1 ${and}
          UNION ALL SELECT type, bucket, n FROM ${s}.job_changes WHERE bucket IS NOT NULL AND finished_at / 60000 >= $1 ${and}
        ) x GROUP BY type, bucket`;
    },
  };
}
