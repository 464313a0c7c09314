/**
 * SQLite migration: the figures /v1/stats and /metrics read, kept by triggers in the same
 * transaction as every write of `jobs` (insert, state change, end, delete), so they stay exact
 * across retention, purges and crashes; the migration fills them from the jobs already there.
 *
 * - `job_counts`: jobs per (tenant, type, state). A state change moves one unit between rows.
 * - `job_rates`: jobs submitted and ended per second (by `created_at` / `finished_at`).
 * - `job_durations`: run times (started_at → finished_at of succeeded or failed jobs) per minute
 *   of their end, counted in log-scaled buckets (core/stats-window.ts).
 *
 * SQLite has one writer at a time, so the counter rows cannot be contended; the rate and
 * duration rows older than the stats window are deleted by `compactStats` (the sweeper). Rates and
 * run times are keyed by tenant first: /v1/stats reads one tenant's window.
 */
import { BUCKETS_PER_OCTAVE } from '../../core/stats-window.js';
import { ZOMBIE_REASONS } from '../../core/transitions.js';

/**
 * core/stats-window.ts's durationBucket in SQLite (3.35+, with its math functions), over an
 * expression of ms (negative times count as 0); test/unit/stats-window.test.ts checks that
 * both give the same buckets.
 */
export function durationBucketSql(ms: string): string {
  return `CAST(${BUCKETS_PER_OCTAVE} * log2(max(${ms}, 0) + 1) AS INTEGER)`;
}

const BUCKET = durationBucketSql('NEW.finished_at - NEW.started_at');
const ENDED_WITH_TIME = "NEW.started_at IS NOT NULL AND NEW.state IN ('succeeded', 'failed', 'expired')";
/** The start of the window the backfill fills (16 minutes back from the migration). */
const WINDOW_START = "(CAST(unixepoch('subsec') * 1000 AS INTEGER) - 960000)";

const finished = (when: string) => `
    INSERT INTO job_rates (second, tenant, type, submitted, finished) VALUES (NEW.finished_at / 1000, NEW.tenant, NEW.type, 0, 1)
      ON CONFLICT (tenant, second, type) DO UPDATE SET finished = finished + 1;
    INSERT INTO job_durations (minute, tenant, type, bucket, n) SELECT NEW.finished_at / 60000, NEW.tenant, NEW.type, ${BUCKET}, 1
      WHERE ${when} ON CONFLICT (tenant, minute, type, bucket) DO UPDATE SET n = n + 1;`;

export const STATS_MIGRATION = `
  CREATE TABLE job_counts (
    tenant TEXT NOT NULL,
    type TEXT NOT NULL,
    state TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (tenant, type, state)
  ) WITHOUT ROWID;
  CREATE TABLE job_rates (
    second INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    type TEXT NOT NULL,
    submitted INTEGER NOT NULL,
    finished INTEGER NOT NULL,
    PRIMARY KEY (tenant, second, type)
  ) WITHOUT ROWID;
  CREATE INDEX job_rates_second ON job_rates (second);
  CREATE TABLE job_durations (
    minute INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    type TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (tenant, minute, type, bucket)
  ) WITHOUT ROWID;
  CREATE INDEX job_durations_minute ON job_durations (minute);

  CREATE TRIGGER jobs_stats_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (tenant, type, state, n) VALUES (NEW.tenant, NEW.type, NEW.state, 1)
      ON CONFLICT (tenant, type, state) DO UPDATE SET n = n + 1;
    INSERT INTO job_rates (second, tenant, type, submitted, finished) VALUES (NEW.created_at / 1000, NEW.tenant, NEW.type, 1, 0)
      ON CONFLICT (tenant, second, type) DO UPDATE SET submitted = submitted + 1;
  END;
  CREATE TRIGGER jobs_stats_insert_ended AFTER INSERT ON jobs WHEN NEW.finished_at IS NOT NULL BEGIN ${finished(ENDED_WITH_TIME)}
  END;
  -- One statement moves the unit (a multi-row upsert: one statement less per transition than an
  -- UPDATE and an upsert, on the worker's hot path).
  CREATE TRIGGER jobs_stats_state AFTER UPDATE OF state ON jobs WHEN OLD.state IS NOT NEW.state BEGIN
    INSERT INTO job_counts (tenant, type, state, n) VALUES (OLD.tenant, OLD.type, OLD.state, -1), (NEW.tenant, NEW.type, NEW.state, 1)
      ON CONFLICT (tenant, type, state) DO UPDATE SET n = n + excluded.n;
  END;
  CREATE TRIGGER jobs_stats_ended AFTER UPDATE OF finished_at ON jobs
    WHEN NEW.finished_at IS NOT NULL AND OLD.finished_at IS NOT NEW.finished_at BEGIN ${finished(ENDED_WITH_TIME)}
  END;
  CREATE TRIGGER jobs_stats_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1 WHERE tenant = OLD.tenant AND type = OLD.type AND state = OLD.state;
  END;

  INSERT INTO job_counts (tenant, type, state, n) SELECT tenant, type, state, count(*) FROM jobs GROUP BY tenant, type, state;
  INSERT INTO job_rates (second, tenant, type, submitted, finished)
    SELECT second, tenant, type, sum(submitted), sum(finished) FROM (
      SELECT created_at / 1000 AS second, tenant, type, 1 AS submitted, 0 AS finished FROM jobs WHERE created_at >= ${WINDOW_START}
      UNION ALL
      SELECT finished_at / 1000, tenant, type, 0, 1 FROM jobs WHERE finished_at >= ${WINDOW_START}
    ) GROUP BY second, tenant, type;
  INSERT INTO job_durations (minute, tenant, type, bucket, n)
    SELECT finished_at / 60000, tenant, type, ${durationBucketSql('finished_at - started_at')}, count(*) FROM jobs
    WHERE finished_at >= ${WINDOW_START} AND started_at IS NOT NULL AND state IN ('succeeded', 'failed', 'expired')
    GROUP BY 1, 2, 3, 4;
`;

/**
 * Migration 10: the worker's own writes (a claim, the end of a running job) report their changes
 * themselves, grouped, at the end of their transaction (stats-batch.ts), instead of through a row
 * trigger per job: such a write marks the rows it changes (`stats_seq = stats_seq + 1`), and the
 * update triggers skip marked rows. Every other write leaves `stats_seq` as it is and is counted
 * by the triggers as before. A claim also clears `finished_at`, so that a running job's is NULL.
 */
export const STATS_BATCH_MIGRATION = `
  ALTER TABLE jobs ADD COLUMN stats_seq INTEGER NOT NULL DEFAULT 0;
  DROP TRIGGER jobs_stats_state;
  CREATE TRIGGER jobs_stats_state AFTER UPDATE OF state ON jobs WHEN OLD.state IS NOT NEW.state AND NEW.stats_seq IS OLD.stats_seq BEGIN
    INSERT INTO job_counts (tenant, type, state, n) VALUES (OLD.tenant, OLD.type, OLD.state, -1), (NEW.tenant, NEW.type, NEW.state, 1)
      ON CONFLICT (tenant, type, state) DO UPDATE SET n = n + excluded.n;
  END;
  DROP TRIGGER jobs_stats_ended;
  CREATE TRIGGER jobs_stats_ended AFTER UPDATE OF finished_at ON jobs
    WHEN NEW.finished_at IS NOT NULL AND OLD.finished_at IS NOT NEW.finished_at AND NEW.stats_seq IS OLD.stats_seq BEGIN ${finished(ENDED_WITH_TIME)}
  END;
`;

/** SQL `reason IN (...)` of the attempts that reaped a zombie (core ZOMBIE_REASONS), over `r`. */
export function zombieReasonSql(r: string): string {
  return `${r}.reason IN (${ZOMBIE_REASONS.map((x) => `'${x.replaceAll("'", "''")}'`).join(', ')})`;
}

/**
 * Migration 11: what the sweeper found, cluster-wide (Store.sweepHealth).
 * - `jobs_stalled`: running jobs flagged stalled, a partial index as small as their number.
 * - `job_reaps`: zombies reaped per (tenant, minute), counted by a trigger as the attempt a reap
 *   ends is recorded (same transaction; later deletion of the job does not uncount it), dropped
 *   with the other stats older than the window by `compactStats`. Filled from the attempts of the
 *   window already recorded.
 */
export const SWEEP_HEALTH_MIGRATION = `
  CREATE INDEX jobs_stalled ON jobs (tenant) WHERE state = 'running' AND stalled = 1;
  CREATE TABLE job_reaps (
    tenant TEXT NOT NULL,
    minute INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (tenant, minute)
  ) WITHOUT ROWID;
  CREATE INDEX job_reaps_minute ON job_reaps (minute);
  CREATE TRIGGER job_attempts_reaped AFTER INSERT ON job_attempts WHEN ${zombieReasonSql('NEW')} BEGIN
    INSERT INTO job_reaps (tenant, minute, n) SELECT tenant, NEW.ended_at / 60000, 1 FROM jobs WHERE id = NEW.job_id
      ON CONFLICT (tenant, minute) DO UPDATE SET n = n + 1;
  END;
  INSERT INTO job_reaps (tenant, minute, n)
    SELECT j.tenant, a.ended_at / 60000, count(*) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
    WHERE ${zombieReasonSql('a')} AND a.ended_at >= ${WINDOW_START} GROUP BY 1, 2;
`;
