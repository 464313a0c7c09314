/**
 * PostgreSQL migration: the figures /v1/stats and /metrics read, kept by triggers in the same
 * transaction as every write of `jobs`, so they stay exact across retention, purges and crashes;
 * the migration fills them from the jobs already there.
 *
 * Many transactions change jobs at once here. Counter rows updated in place by each of them
 * would be hot rows: a submit and a claim of the same type would queue on one row lock, and two
 * transactions touching two rows in opposite orders would deadlock. So the triggers only append
 * to `job_changes` (no shared row is locked), and `compact_stats` (the elected sweeper's pass,
 * one caller at a time under an advisory lock) folds those rows into
 * - `job_counts`: jobs per (tenant, type, state),
 * - `job_rates`: jobs submitted and ended per second,
 * - `job_durations`: run times per minute of their end in log-scaled buckets (core/stats-window.ts),
 * and deletes what it folded in the same transaction. A read adds the folded figures and the
 * changes not yet folded in one statement (one snapshot), so it is exact at any moment; its cost
 * is the number of counter rows plus the changes since the last pass, not the number of jobs.
 */
import { BUCKETS_PER_OCTAVE } from '../../core/stats-window.js';
import { ZOMBIE_REASONS } from '../../core/transitions.js';
import { SKIP_SELF_COUNTED } from './self-count-sql.js';

const ENDED_WITH_TIME = (r: string) => `${r}.started_at IS NOT NULL AND ${r}.state IN ('succeeded', 'failed', 'expired')`;

/**
 * core/stats-window.ts's durationBucket in PostgreSQL, over an expression of ms (negative
 * times count as 0); test/unit/stats-window.test.ts checks that both give the same buckets.
 */
export function durationBucketSql(ms: string): string {
  return `floor(${BUCKETS_PER_OCTAVE} * log(2, greatest(${ms}, 0)::numeric + 1))::integer`;
}

const bucket = (r: string) => durationBucketSql(`${r}.finished_at - ${r}.started_at`);
/** The start of the window the backfill fills (16 minutes back from the migration). */
const WINDOW_START = '((extract(epoch FROM clock_timestamp()) * 1000)::bigint - 960000)';

export const STATS_MIGRATION = `
  CREATE TABLE {s}.job_counts (
    tenant text COLLATE "C" NOT NULL,
    type text COLLATE "C" NOT NULL,
    state text NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (tenant, type, state)
  );
  CREATE TABLE {s}.job_rates (
    second bigint NOT NULL,
    tenant text COLLATE "C" NOT NULL,
    type text COLLATE "C" NOT NULL,
    submitted bigint NOT NULL,
    finished bigint NOT NULL,
    PRIMARY KEY (tenant, second, type)
  );
  CREATE INDEX job_rates_second ON {s}.job_rates (second);
  CREATE TABLE {s}.job_durations (
    minute bigint NOT NULL,
    tenant text COLLATE "C" NOT NULL,
    type text COLLATE "C" NOT NULL,
    bucket integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (tenant, minute, type, bucket)
  );
  CREATE INDEX job_durations_minute ON {s}.job_durations (minute);
  -- One row per change of a job that moves a figure: -1 for old_state, +1 for new_state, a
  -- submission at submitted_at, an end at finished_at (with its run-time bucket when timed).
  CREATE TABLE {s}.job_changes (
    tenant text COLLATE "C" NOT NULL,
    type text COLLATE "C" NOT NULL,
    old_state text,
    new_state text,
    submitted_at bigint,
    finished_at bigint,
    bucket integer
  );
  -- A queue: rows are appended and soon deleted. The store vacuums it after folding (stats-ops.ts);
  -- autovacuum as a backstop, early.
  ALTER TABLE {s}.job_changes SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0);

  CREATE FUNCTION {s}.jobs_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, submitted_at, finished_at, bucket)
    SELECT n.tenant, n.type, NULL, n.state, n.created_at, n.finished_at,
      CASE WHEN n.finished_at IS NOT NULL AND ${ENDED_WITH_TIME('n')} THEN ${bucket('n')} END
    FROM new_rows n;
    RETURN NULL;
  END $$;
  CREATE TRIGGER jobs_stats_insert AFTER INSERT ON {s}.jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.jobs_stats_insert();

  CREATE FUNCTION {s}.jobs_stats_update() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    moved boolean := OLD.state IS DISTINCT FROM NEW.state;
    ended boolean := NEW.finished_at IS NOT NULL AND OLD.finished_at IS DISTINCT FROM NEW.finished_at;
  BEGIN
    INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, submitted_at, finished_at, bucket)
    VALUES (NEW.tenant, NEW.type, CASE WHEN moved THEN OLD.state END, CASE WHEN moved THEN NEW.state END, NULL,
      CASE WHEN ended THEN NEW.finished_at END,
      CASE WHEN ended AND ${ENDED_WITH_TIME('NEW')} THEN ${bucket('NEW')} END);
    RETURN NULL;
  END $$;
  -- Row-level with a WHEN: heartbeats, progress and checkpoints never call the function.
  CREATE TRIGGER jobs_stats_update AFTER UPDATE ON {s}.jobs FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR (NEW.finished_at IS NOT NULL AND OLD.finished_at IS DISTINCT FROM NEW.finished_at))
    EXECUTE FUNCTION {s}.jobs_stats_update();

  CREATE FUNCTION {s}.jobs_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO {s}.job_changes (tenant, type, old_state) SELECT o.tenant, o.type, o.state FROM old_rows o;
    RETURN NULL;
  END $$;
  CREATE TRIGGER jobs_stats_delete AFTER DELETE ON {s}.jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.jobs_stats_delete();

  -- Folds job_changes into the three tables and drops buckets older than before_ms. One caller
  -- at a time (a second one returns at once, with -1); returns how many changes it folded.
  CREATE FUNCTION {s}.compact_stats(before_ms bigint, drop_zero boolean) RETURNS integer LANGUAGE plpgsql AS $$
  DECLARE
    folded integer;
  BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('{name}:stats'), 0) THEN
      RETURN -1;
    END IF;
    WITH d AS (DELETE FROM {s}.job_changes RETURNING *),
    c AS (
      INSERT INTO {s}.job_counts AS t (tenant, type, state, n)
      SELECT tenant, type, state, sum(n) FROM (
        SELECT tenant, type, old_state AS state, -1 AS n FROM d WHERE old_state IS NOT NULL
        UNION ALL SELECT tenant, type, new_state, 1 FROM d WHERE new_state IS NOT NULL
      ) x GROUP BY tenant, type, state
      ON CONFLICT (tenant, type, state) DO UPDATE SET n = t.n + excluded.n
    ),
    r AS (
      INSERT INTO {s}.job_rates AS t (second, tenant, type, submitted, finished)
      SELECT second, tenant, type, sum(sub), sum(fin) FROM (
        SELECT submitted_at / 1000 AS second, tenant, type, 1 AS sub, 0 AS fin FROM d WHERE submitted_at IS NOT NULL
        UNION ALL SELECT finished_at / 1000, tenant, type, 0, 1 FROM d WHERE finished_at IS NOT NULL
      ) x WHERE second >= before_ms / 1000 GROUP BY second, tenant, type
      ON CONFLICT (tenant, second, type) DO UPDATE SET submitted = t.submitted + excluded.submitted, finished = t.finished + excluded.finished
    ),
    h AS (
      INSERT INTO {s}.job_durations AS t (minute, tenant, type, bucket, n)
      SELECT finished_at / 60000, tenant, type, bucket, count(*) FROM d
      WHERE bucket IS NOT NULL AND finished_at / 60000 >= before_ms / 60000 GROUP BY 1, 2, 3, 4
      ON CONFLICT (tenant, minute, type, bucket) DO UPDATE SET n = t.n + excluded.n
    )
    SELECT count(*) INTO folded FROM d;
    DELETE FROM {s}.job_rates WHERE second < before_ms / 1000;
    DELETE FROM {s}.job_durations WHERE minute < before_ms / 60000;
    IF drop_zero THEN
      DELETE FROM {s}.job_counts WHERE n = 0;
    END IF;
    RETURN folded;
  END $$;

  INSERT INTO {s}.job_counts (tenant, type, state, n) SELECT tenant, type, state, count(*) FROM {s}.jobs GROUP BY tenant, type, state;
  INSERT INTO {s}.job_rates (second, tenant, type, submitted, finished)
    SELECT second, tenant, type, sum(sub), sum(fin) FROM (
      SELECT created_at / 1000 AS second, tenant, type, 1 AS sub, 0 AS fin FROM {s}.jobs WHERE created_at >= ${WINDOW_START}
      UNION ALL SELECT finished_at / 1000, tenant, type, 0, 1 FROM {s}.jobs WHERE finished_at >= ${WINDOW_START}
    ) x GROUP BY second, tenant, type;
  INSERT INTO {s}.job_durations (minute, tenant, type, bucket, n)
    SELECT finished_at / 60000, tenant, type, ${bucket('j')}, count(*) FROM {s}.jobs j
    WHERE finished_at >= ${WINDOW_START} AND ${ENDED_WITH_TIME('j')} GROUP BY 1, 2, 3, 4;
`;

/**
 * Migration 10: the change log written once per statement instead of once per job. Every trigger
 * is statement-level with transition tables, and writes its changes grouped, with their count in
 * `n`: a claim of 500 jobs of one type writes one row (-500 queued, +500 running) where it wrote
 * 500, each through a call of a row trigger. Times are kept to the second (`submitted_at` and
 * `finished_at` are then whole seconds, in ms), which is all the rate and run-time windows read.
 * Updates that change no state and end nothing (heartbeats, checkpoints) write nothing: their
 * -1 and +1 cancel out in the grouping. `compact_stats` and the reads weigh each row by `n`.
 */
const second = (col: string) => `${col} / 1000 * 1000`;

/**
 * The update trigger's function: the changes of a statement's rows grouped, as STATS_BATCH_MIGRATION
 * created it; from migration 20 (`skipSelfCounted`) it does nothing for a claim, which appends its
 * own change (self-count-sql.ts).
 */
export function statsUpdateFunction(skipSelfCounted: boolean): string {
  return `  CREATE OR REPLACE FUNCTION {s}.jobs_stats_update() RETURNS trigger LANGUAGE plpgsql SET enable_nestloop = off AS $$
  BEGIN
${skipSelfCounted ? SKIP_SELF_COUNTED : ''}    -- A statement trigger runs for statements that changed no row too (the claim's promote_due, mostly).
    IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
      RETURN NULL;
    END IF;
    INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, submitted_at, finished_at, bucket, n)
    SELECT m.tenant, m.type, CASE WHEN m.d < 0 THEN m.state END, CASE WHEN m.d > 0 THEN m.state END, NULL::bigint, NULL::bigint, NULL::integer, abs(m.d)
    FROM (
      SELECT x.tenant, x.type, x.state, sum(x.d)::integer AS d FROM (
        SELECT o.tenant, o.type, o.state, -1 AS d FROM old_rows o
        UNION ALL SELECT n.tenant, n.type, n.state, 1 FROM new_rows n
      ) x GROUP BY x.tenant, x.type, x.state
    ) m WHERE m.d <> 0
    UNION ALL
    SELECT n.tenant, n.type, NULL, NULL, NULL::bigint, ${second('n.finished_at')},
      CASE WHEN ${ENDED_WITH_TIME('n')} THEN ${bucket('n')} END, count(*)::integer
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.finished_at IS NOT NULL AND o.finished_at IS DISTINCT FROM n.finished_at
    GROUP BY 1, 2, 6, 7;
    RETURN NULL;
  END $$;
`;
}

/**
 * The delete trigger's function: the deleted rows counted per (tenant, type, state), as
 * STATS_BATCH_MIGRATION created it; from migration 20 (`skipSelfCounted`) it does nothing for
 * end_succeeded's delete, which appends its own change (self-count-sql.ts).
 */
export function statsDeleteFunction(skipSelfCounted: boolean): string {
  return `  CREATE OR REPLACE FUNCTION {s}.jobs_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
${skipSelfCounted ? SKIP_SELF_COUNTED : ''}    INSERT INTO {s}.job_changes (tenant, type, old_state, n) SELECT o.tenant, o.type, o.state, count(*) FROM old_rows o GROUP BY 1, 2, 3;
    RETURN NULL;
  END $$;

`;
}

export const STATS_BATCH_MIGRATION = `
  ALTER TABLE {s}.job_changes ADD COLUMN n integer NOT NULL DEFAULT 1;

  CREATE OR REPLACE FUNCTION {s}.jobs_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, submitted_at, finished_at, bucket, n)
    SELECT n.tenant, n.type, NULL, n.state, ${second('n.created_at')}, ${second('n.finished_at')},
      CASE WHEN n.finished_at IS NOT NULL AND ${ENDED_WITH_TIME('n')} THEN ${bucket('n')} END, count(*)
    FROM new_rows n GROUP BY 1, 2, 4, 5, 6, 7;
    RETURN NULL;
  END $$;

  DROP TRIGGER jobs_stats_update ON {s}.jobs;
  -- No nested loop: the end rows join old to new by id, and a plan made for a few rows must not
  -- compare every pair when a statement changes thousands.
${statsUpdateFunction(false)}  CREATE TRIGGER jobs_stats_update AFTER UPDATE ON {s}.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.jobs_stats_update();

${statsDeleteFunction(false)}  CREATE OR REPLACE FUNCTION {s}.compact_stats(before_ms bigint, drop_zero boolean) RETURNS integer LANGUAGE plpgsql AS $$
  DECLARE
    folded integer;
  BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('{name}:stats'), 0) THEN
      RETURN -1;
    END IF;
    WITH d AS (DELETE FROM {s}.job_changes RETURNING *),
    c AS (
      INSERT INTO {s}.job_counts AS t (tenant, type, state, n)
      SELECT tenant, type, state, sum(n) FROM (
        SELECT tenant, type, old_state AS state, -n AS n FROM d WHERE old_state IS NOT NULL
        UNION ALL SELECT tenant, type, new_state, n FROM d WHERE new_state IS NOT NULL
      ) x GROUP BY tenant, type, state
      ON CONFLICT (tenant, type, state) DO UPDATE SET n = t.n + excluded.n
    ),
    r AS (
      INSERT INTO {s}.job_rates AS t (second, tenant, type, submitted, finished)
      SELECT second, tenant, type, sum(sub), sum(fin) FROM (
        SELECT submitted_at / 1000 AS second, tenant, type, n AS sub, 0 AS fin FROM d WHERE submitted_at IS NOT NULL
        UNION ALL SELECT finished_at / 1000, tenant, type, 0, n FROM d WHERE finished_at IS NOT NULL
      ) x WHERE second >= before_ms / 1000 GROUP BY second, tenant, type
      ON CONFLICT (tenant, second, type) DO UPDATE SET submitted = t.submitted + excluded.submitted, finished = t.finished + excluded.finished
    ),
    h AS (
      INSERT INTO {s}.job_durations AS t (minute, tenant, type, bucket, n)
      SELECT finished_at / 60000, tenant, type, bucket, sum(n) FROM d
      WHERE bucket IS NOT NULL AND finished_at / 60000 >= before_ms / 60000 GROUP BY 1, 2, 3, 4
      ON CONFLICT (tenant, minute, type, bucket) DO UPDATE SET n = t.n + excluded.n
    )
    SELECT coalesce(sum(n), 0) INTO folded FROM d;
    DELETE FROM {s}.job_rates WHERE second < before_ms / 1000;
    DELETE FROM {s}.job_durations WHERE minute < before_ms / 60000;
    IF drop_zero THEN
      DELETE FROM {s}.job_counts WHERE n = 0;
    END IF;
    RETURN folded;
  END $$;
`;

/** SQL `reason IN (...)` of the attempts that reaped a zombie (core ZOMBIE_REASONS), over `r`. */
export function zombieReasonSql(r: string): string {
  return `${r}.reason IN (${ZOMBIE_REASONS.map((x) => `'${x.replaceAll("'", "''")}'`).join(', ')})`;
}

/**
 * Migration 11: what the sweeper found, cluster-wide (Store.sweepHealth).
 * - `jobs_stalled`: running jobs flagged stalled, a partial index as small as their number.
 * - `job_reaps`: zombies reaped per (tenant, minute), counted by a trigger as apply_transitions
 *   records the attempt a reap ends (same transaction; later deletion of the job does not
 *   uncount it). Only the elected sweeper reaps, one pass at a time, so the upserted row is not
 *   contended the way a shared counter of every transition would be (see STATS_MIGRATION). Rows
 *   older than the window are deleted by the stats upkeep (stats-ops.ts). Filled from the
 *   attempts of the window already recorded.
 */
export const SWEEP_HEALTH_MIGRATION = `
  CREATE INDEX jobs_stalled ON {s}.jobs (tenant) WHERE state = 'running' AND stalled;
  CREATE TABLE {s}.job_reaps (
    tenant text COLLATE "C" NOT NULL,
    minute bigint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (tenant, minute)
  );
  CREATE INDEX job_reaps_minute ON {s}.job_reaps (minute);
  CREATE FUNCTION {s}.job_attempts_reaped() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO {s}.job_reaps AS t (tenant, minute, n)
    SELECT j.tenant, NEW.ended_at / 60000, 1 FROM {s}.jobs j WHERE j.id = NEW.job_id
    ON CONFLICT (tenant, minute) DO UPDATE SET n = t.n + 1;
    RETURN NULL;
  END $$;
  -- Row-level with a WHEN: the attempts of failures, retries and cancels never call the function.
  CREATE TRIGGER job_attempts_reaped AFTER INSERT ON {s}.job_attempts FOR EACH ROW
    WHEN (${zombieReasonSql('NEW')}) EXECUTE FUNCTION {s}.job_attempts_reaped();
  INSERT INTO {s}.job_reaps (tenant, minute, n)
    SELECT j.tenant, a.ended_at / 60000, count(*) FROM {s}.job_attempts a JOIN {s}.jobs j ON j.id = a.job_id
    WHERE ${zombieReasonSql('a')} AND a.ended_at >= ${WINDOW_START} GROUP BY 1, 2;
`;
