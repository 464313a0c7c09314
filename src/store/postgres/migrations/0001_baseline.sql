-- Longhaul's PostgreSQL schema, version 1: the baseline.
--
-- Released: this file never changes (test/unit/migration-hashes.test.ts holds its SHA-256). A
-- change of table, index or function is a new file, 0002_<what>.sql, applied after this one;
-- CONTRIBUTING.md says how. The current definition of a function is in the last file that
-- creates or replaces it.
--
-- PostgresStore.migrate() runs this file as it is, after three substitutions of configuration
-- (never of values from TypeScript code):
--   {s}     the schema, quoted ("longhaul" by default). Everything lives in it, so Longhaul
--           shares a database with the application that uses it (a job can be submitted in the
--           application's own transaction) without touching the application's tables.
--   {ch}    the LISTEN/NOTIFY channel that says "jobs may be claimable" (<schema>_wake; payloads
--           are always empty). Idle workers listen on it.
--   {name}  the schema's bare name, a prefix of the advisory lock keys.
--
-- Conventions: times are bigint milliseconds since the epoch; NEVER (8640000000000000,
-- core/workflow.ts) is a time that never comes. Job ids are UUIDv7. Tenant, type and the other
-- keys compared by byte are COLLATE "C". JSON values are json, not jsonb: they are stored and
-- returned as the text they were given (the store reads them with a lossless parser).
--
-- The TypeScript side of each function call is in src/store/postgres/ (postgres-store.ts
-- calls worker_cycle and promote_due, transitions.ts encodes the items of apply_transitions,
-- rows.ts reads the claimed rows, stats-ops.ts calls compact_stats). Where TypeScript and this
-- file must agree (job states, the patch mask, zombie reasons, run-time buckets, the
-- self-counted setting), test/unit/postgres-schema-agreement.test.ts reads both and compares.

-- ===========================================================================================
-- Wire formats shared with TypeScript
-- ===========================================================================================
--
-- The transition log (jobs.log): the job's transitions, oldest first, as JSON arrays
--   [from, to, at, reason, attempt, workerId]
-- separated by commas, without the enclosing brackets: a transition appends ',' || entry to the
-- row it updates anyway (no row and no index entry of its own), and '[' || log || ']' is a JSON
-- array (rows.ts). A claim writes no entry: it sets claim_logged false, and the job's next change
-- first writes the pending entry ["queued","running",started_at,"claimed",attempts,worker_id]
-- (log-sql.ts pendingClaim builds the same text for readers), or never, when the job is
-- deleted on its end (retention 0). While the job runs, its row holds what that entry says.
--
-- A transition item (apply_transitions's p_items, a JSON array; transitions.ts
-- encodeTransitions): a compare-and-swap decided by core/transitions.ts.
--   o       the item's ordinal in the caller's batch (1, 2, ...): what comes back when it applied
--   r       the round: a job named twice in a batch has its second item in the next round
--   id      the job
--   f, t    from state, to state: applied only while the job is in state f
--   l       the lease the writer holds (null: any lease)
--   q       the cancel flag the writer saw (null: either)
--   d       true: retention 0, delete the job as it ends when nothing else holds it
--   why     the log entry's reason;  w  the worker (or null);  at  the transition's time
--   m       the patch mask below; the fields it names are given under their column's name
--           (run_at, result, error, finished_at, expires_at, cancel_reason, stalled)
--   stack   the attempt history's copy of a failure's stack (job_attempts.stack)
--
-- The patch mask (item key m), the same bits as PATCH in src/store/postgres/transitions.ts:
--      1  run_at             set run_at
--      2  result             set result
--      4  error              set error (and error_code, its code)
--      8  finished_at        set finished_at
--     16  expires_at         set expires_at
--     32  reset_attempts     attempts back to 0
--     64  refund_attempt     attempts one less (a hand-back or a wait does not use up an attempt)
--    128  clear_checkpoint   checkpoint to null
--    256  request_cancel     cancel_requested true, with cancel_reason and cancel_requested_at
--    512  clear_cancel       cancel_requested false, its reason and time cleared
--   1024  stalled            set stalled
-- In the SQL below each test of a bit names it: i.m & 1024 /* stalled */.
--
-- The self-counted setting: the transaction-local setting longhaul.self_counted is 'on' only
-- while a statement that appends its own change to job_changes runs (the worker's claim and
-- end_succeeded's delete); the statistics triggers do nothing for it (self-count-sql.ts).

-- ===========================================================================================
-- Jobs
-- ===========================================================================================

CREATE TABLE {s}.jobs (
  id uuid PRIMARY KEY,
  tenant text COLLATE "C" NOT NULL,
  type text COLLATE "C" NOT NULL,
  -- core/states.ts JOB_STATES
  state text NOT NULL CHECK (state IN ('pending', 'queued', 'running', 'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired')),
  priority smallint NOT NULL,
  input json,
  metadata json,
  result json,
  error json,
  attempts integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL,
  -- The fencing token: a claim increments it, and every write of a worker names the lease it
  -- holds, so a worker that lost its job cannot change it any more.
  lease integer NOT NULL DEFAULT 0,
  worker_id text,
  cancel_requested boolean NOT NULL DEFAULT false,
  cancel_reason text,
  cancel_requested_at bigint,
  stalled boolean NOT NULL DEFAULT false,
  parent_id text,
  created_at bigint NOT NULL,
  started_at bigint,
  finished_at bigint,
  -- Strictly increasing per job (every write sets it past the last one and past the job's last
  -- progress): the version a client's cached snapshot or an SSE stream compares.
  updated_at bigint NOT NULL,
  -- When a pending, retrying or waiting job comes due; a queued job's place in its queue.
  run_at bigint NOT NULL,
  expires_at bigint,
  heartbeat_at bigint,
  timeout_ms bigint,
  heartbeat_timeout_ms bigint NOT NULL,
  stall_timeout_ms bigint,
  result_ttl_ms bigint NOT NULL,
  checkpoint json,
  idempotency_key text COLLATE "C",
  request_hash text,
  -- The transition log (see "Wire formats" above).
  log text NOT NULL,
  -- Workflows: the journal of a job's steps, children and waits (core/workflow.ts), and what a
  -- waiting job waits for (a sleep, a signal by name and key, its children; failFast).
  workflow json,
  wait_kind text,
  wait_name text,
  wait_key text,
  wait_fail_fast boolean NOT NULL DEFAULT false,
  children_total integer NOT NULL DEFAULT 0,
  -- The concurrency key of a type with a per-key limit.
  ckey text COLLATE "C",
  -- error's code, kept by apply_transitions: a column, not an expression, so that the dead-letter
  -- groups (jobs_dead_letters) are an index-only scan.
  error_code text COLLATE "C",
  -- The W3C trace context of the submit, continued by the attempts' spans.
  trace_parent text,
  -- false while a claim's log entry waits in the row (see "Wire formats").
  claim_logged boolean NOT NULL DEFAULT true
) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
-- fillfactor 85: room on each page for a row's new version, so the many updates of a job (claim,
-- heartbeats, end) stay on its page (HOT) when they touch no indexed column.

-- Partial indexes: a job entering a state adds an entry only to the indexes of that state.

-- The queues: per type, the tenants with queued jobs are found by a skip scan, then each
-- tenant's queue is read in order (priority, run_at, id).
CREATE INDEX jobs_queued ON {s}.jobs (type, tenant, priority, run_at, id) WHERE state = 'queued';
-- Types with a concurrency key: a queue and a running count per key. Jobs without a key never
-- touch these.
CREATE INDEX jobs_queued_by_key ON {s}.jobs (type, ckey, priority, run_at, id) WHERE state = 'queued' AND ckey IS NOT NULL;
CREATE INDEX jobs_running_by_key ON {s}.jobs (type, ckey) WHERE state = 'running' AND ckey IS NOT NULL;
-- Running jobs per type and tenant (concurrency limits, tenant caps). Every claim rewrites
-- entries here under two or three distinct keys: duplicates are not merged (deduplication cost
-- a claim about 0.9 µs per job and saves nothing in an index this small).
CREATE INDEX jobs_running ON {s}.jobs (type, tenant) WITH (deduplicate_items = off) WHERE state = 'running';
-- Jobs that come due: delayed (pending), backing off (retrying), sleeping or waiting with a
-- time limit (waiting; a wait without one has run_at = NEVER).
CREATE INDEX jobs_due ON {s}.jobs (run_at) WHERE state IN ('pending', 'retrying', 'waiting');
CREATE INDEX jobs_expiring ON {s}.jobs (expires_at) WHERE state = 'succeeded';
-- A tenant's jobs by id (listings), without its running ones: a claim (queued -> running) then
-- writes no entry here, one index entry fewer per claimed job. Listings by tenant read running
-- jobs through jobs_running (postgres-store.ts listJobs).
CREATE INDEX jobs_tenant ON {s}.jobs (tenant, id) WHERE state <> 'running';
-- A tenant's backlog counted at submission against its quota (maxQueued): the count stops at
-- the limit, so it costs O(limit) whatever the table holds.
CREATE INDEX jobs_tenant_backlog ON {s}.jobs (tenant) WHERE state IN ('pending', 'queued', 'retrying');
CREATE INDEX jobs_finished ON {s}.jobs (finished_at) WHERE finished_at IS NOT NULL;
-- Retention: ended jobs by state and end time (the sweeper's deletion scan). Claims and
-- transitions between open states never touch it.
CREATE INDEX jobs_ended ON {s}.jobs (state, finished_at) WHERE state IN ('succeeded', 'expired', 'failed', 'cancelled');
CREATE UNIQUE INDEX jobs_idempotency ON {s}.jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Dead letters: failed jobs by tenant, type and error code (the groups, their pages, bulk filters).
CREATE INDEX jobs_dead_letters ON {s}.jobs (tenant, type, error_code, finished_at, id) WHERE state = 'failed';
-- Running jobs flagged stalled: as small as their number (Store.sweepHealth).
CREATE INDEX jobs_stalled ON {s}.jobs (tenant) WHERE state = 'running' AND stalled;
-- A parent's children, in id order (listing, counting).
CREATE INDEX jobs_children ON {s}.jobs (parent_id, id) WHERE parent_id IS NOT NULL;
-- Open children only: "does this parent still have an open child" is one probe, however many
-- children it has and however many of them ended.
CREATE INDEX jobs_open_children ON {s}.jobs (parent_id)
  WHERE parent_id IS NOT NULL AND state IN ('pending', 'queued', 'running', 'retrying', 'waiting');
-- Children that failed or were cancelled (a failFast parent's backstop check), few by nature.
CREATE INDEX jobs_failed_children ON {s}.jobs (parent_id) WHERE parent_id IS NOT NULL AND state IN ('failed', 'cancelled');
-- Parents waiting for their children (the sweeper's backstop walks only these).
CREATE INDEX jobs_waiting_parents ON {s}.jobs (id) WHERE state = 'waiting' AND wait_kind = 'children';

-- Progress is rewritten a few times a second per running job: keeping it out of the jobs row
-- keeps those writes from making new versions of job rows. UNLOGGED: no WAL; a crash of the
-- server empties it (jobs, their state and results are unaffected). Only a lease holder saves
-- progress, so a job never claimed (lease 0) has no row here.
CREATE UNLOGGED TABLE {s}.progress (
  job_id uuid PRIMARY KEY,
  data json NOT NULL,
  updated_at bigint NOT NULL
);

-- The attempt history: one row per run that ended without succeeding, keyed by the run's lease,
-- written by apply_transitions in the transition's own statement.
CREATE TABLE {s}.job_attempts (
  job_id uuid NOT NULL,
  lease integer NOT NULL,
  attempt integer NOT NULL,
  worker_id text,
  started_at bigint,
  ended_at bigint NOT NULL,
  outcome text NOT NULL,
  reason text NOT NULL,
  error json,
  stack text,
  PRIMARY KEY (job_id, lease)
);

-- Signals sent to jobs, consumed by a wait (consumed_by names the wait).
CREATE TABLE {s}.job_signals (
  seq bigserial PRIMARY KEY,
  job_id uuid NOT NULL,
  name text COLLATE "C" NOT NULL,
  payload json,
  sent_at bigint NOT NULL,
  consumed_by text COLLATE "C"
);
-- The oldest unconsumed signal of (job, name), and the signal a wait consumed.
CREATE INDEX job_signals_unconsumed ON {s}.job_signals (job_id, name, seq) WHERE consumed_by IS NULL;
CREATE INDEX job_signals_consumed ON {s}.job_signals (job_id, consumed_by) WHERE consumed_by IS NOT NULL;
-- Signals by job, deleted with their job.
CREATE INDEX job_signals_job ON {s}.job_signals (job_id);

-- ===========================================================================================
-- Result files, webhooks, schedules
-- ===========================================================================================

-- Result files: the blob (key) and what is known of it; seq orders a job's files.
CREATE TABLE {s}.job_results (
  job_id uuid NOT NULL,
  name text COLLATE "C" NOT NULL,
  seq integer NOT NULL,
  size bigint NOT NULL,
  content_type text NOT NULL,
  sha256 text NOT NULL,
  key text NOT NULL,
  downloads integer NOT NULL DEFAULT 0,
  created_at bigint NOT NULL,
  PRIMARY KEY (job_id, name)
);

-- A job's webhook target; pending while an end is not yet notified (the outbox).
CREATE TABLE {s}.job_webhooks (
  job_id uuid PRIMARY KEY,
  url text NOT NULL,
  secret text,
  pending boolean NOT NULL DEFAULT true,
  notified_finished_at bigint
);
CREATE INDEX job_webhooks_pending ON {s}.job_webhooks (job_id) WHERE pending;

-- The delivery log: one row per delivery attempt.
CREATE TABLE {s}.webhook_deliveries (
  seq bigserial PRIMARY KEY,
  job_id uuid NOT NULL,
  delivery_id uuid NOT NULL,
  event_type text NOT NULL,
  attempt integer NOT NULL,
  at bigint NOT NULL,
  url text NOT NULL,
  status integer,
  ok boolean NOT NULL,
  error text,
  duration_ms integer NOT NULL,
  response_snippet text
);
CREATE INDEX webhook_deliveries_job ON {s}.webhook_deliveries (job_id, seq);

-- Schedules (cron): one row per (tenant, name); next_run_at is the tick not yet handled. input
-- is JSON text, read back with the project's lossless reader like every other value.
CREATE TABLE {s}.schedules (
  tenant text COLLATE "C" NOT NULL,
  name text COLLATE "C" NOT NULL,
  task text NOT NULL,
  cron text NOT NULL,
  timezone text NOT NULL,
  input text,
  catch_up text NOT NULL,
  overlap boolean NOT NULL,
  declared boolean NOT NULL,
  paused boolean NOT NULL DEFAULT false,
  next_run_at bigint,
  last_run_at bigint,
  last_job_id text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (tenant, name)
);
CREATE INDEX schedules_due ON {s}.schedules (next_run_at) WHERE NOT paused AND next_run_at IS NOT NULL;

-- ===========================================================================================
-- Statistics: the figures /v1/stats and /metrics read
-- ===========================================================================================
--
-- Kept by triggers in the same transaction as every write of jobs, so they stay exact across
-- retention, purges and crashes. Many transactions change jobs at once: counter rows updated in
-- place by each of them would be hot rows (a submit and a claim of one type would queue on one
-- row lock; two transactions touching two rows in opposite orders would deadlock). So the
-- triggers only append to job_changes (no shared row is locked), and compact_stats (the elected
-- sweeper's pass, one caller at a time) folds those rows into job_counts, job_rates and
-- job_durations and deletes what it folded, in one transaction. A read adds the folded figures
-- and the changes not yet folded in one statement (one snapshot), so it is exact at any moment;
-- its cost is the number of counter rows plus the changes since the last pass, not the number
-- of jobs (stats-ops.ts).

-- Jobs per (tenant, type, state).
CREATE TABLE {s}.job_counts (
  tenant text COLLATE "C" NOT NULL,
  type text COLLATE "C" NOT NULL,
  state text NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (tenant, type, state)
);

-- Jobs submitted and ended per second.
CREATE TABLE {s}.job_rates (
  second bigint NOT NULL,
  tenant text COLLATE "C" NOT NULL,
  type text COLLATE "C" NOT NULL,
  submitted bigint NOT NULL,
  finished bigint NOT NULL,
  PRIMARY KEY (tenant, second, type)
);
CREATE INDEX job_rates_second ON {s}.job_rates (second);

-- Run times per minute of their end, in log-scaled buckets: bucket = floor(8 * log2(ms + 1)),
-- 8 buckets per octave (core/stats-window.ts BUCKETS_PER_OCTAVE and durationBucket).
CREATE TABLE {s}.job_durations (
  minute bigint NOT NULL,
  tenant text COLLATE "C" NOT NULL,
  type text COLLATE "C" NOT NULL,
  bucket integer NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (tenant, minute, type, bucket)
);
CREATE INDEX job_durations_minute ON {s}.job_durations (minute);

-- The change log the triggers append to, grouped per statement: a row counts -n for old_state
-- and +n for new_state, n submissions at submitted_at, n ends at finished_at (with their
-- run-time bucket when timed). Times are kept to the second (whole seconds, in ms), which is all
-- the rate and run-time windows read.
CREATE TABLE {s}.job_changes (
  tenant text COLLATE "C" NOT NULL,
  type text COLLATE "C" NOT NULL,
  old_state text,
  new_state text,
  submitted_at bigint,
  finished_at bigint,
  bucket integer,
  n integer NOT NULL DEFAULT 1
);
-- A queue: rows are appended and soon deleted. The store vacuums it after folding (stats-ops.ts);
-- autovacuum as a backstop, early.
ALTER TABLE {s}.job_changes SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0);

-- Zombies reaped per (tenant, minute), counted by a trigger as apply_transitions records the
-- attempt a reap ends (same transaction; a later deletion of the job does not uncount it). Only
-- the elected sweeper reaps, one pass at a time, so the upserted row is not contended the way a
-- shared counter of every transition would be. Rows older than the window are deleted by the
-- stats upkeep (stats-ops.ts).
CREATE TABLE {s}.job_reaps (
  tenant text COLLATE "C" NOT NULL,
  minute bigint NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (tenant, minute)
);
CREATE INDEX job_reaps_minute ON {s}.job_reaps (minute);

-- A statement that inserts jobs (a submit, a batch, children): one change row per group.
CREATE FUNCTION {s}.jobs_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, submitted_at, finished_at, bucket, n)
  SELECT n.tenant, n.type, NULL, n.state, n.created_at / 1000 * 1000, n.finished_at / 1000 * 1000,
    CASE WHEN n.finished_at IS NOT NULL AND n.started_at IS NOT NULL AND n.state IN ('succeeded', 'failed', 'expired')
      THEN floor(8 * log(2, greatest(n.finished_at - n.started_at, 0)::numeric + 1))::integer END,
    count(*)
  FROM new_rows n GROUP BY 1, 2, 4, 5, 6, 7;
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_stats_insert AFTER INSERT ON {s}.jobs REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION {s}.jobs_stats_insert();

-- A statement that updates jobs: its rows' state changes grouped, with their count in n (a
-- claim of 500 jobs of one type writes one row: -500 queued, +500 running), and its ends.
-- Updates that change no state and end nothing (heartbeats, checkpoints) write nothing: their
-- -1 and +1 cancel out in the grouping. SET enable_nestloop = off: the end rows join old to new
-- by id, and a plan made for a few rows must not compare every pair when a statement changes
-- thousands.
CREATE FUNCTION {s}.jobs_stats_update() RETURNS trigger LANGUAGE plpgsql SET enable_nestloop = off AS $$
BEGIN
  -- A statement that appends its own change (the self-counted setting, "Wire formats").
  IF current_setting('longhaul.self_counted', true) = 'on' THEN
    RETURN NULL;
  END IF;
  -- A statement trigger runs for statements that changed no row too (the claim's promote_due, mostly).
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
  SELECT n.tenant, n.type, NULL, NULL, NULL::bigint, n.finished_at / 1000 * 1000,
    CASE WHEN n.started_at IS NOT NULL AND n.state IN ('succeeded', 'failed', 'expired')
      THEN floor(8 * log(2, greatest(n.finished_at - n.started_at, 0)::numeric + 1))::integer END,
    count(*)::integer
  FROM new_rows n JOIN old_rows o ON o.id = n.id
  WHERE n.finished_at IS NOT NULL AND o.finished_at IS DISTINCT FROM n.finished_at
  GROUP BY 1, 2, 6, 7;
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_stats_update AFTER UPDATE ON {s}.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION {s}.jobs_stats_update();

-- A statement that deletes jobs (retention, purges): the deleted rows counted per (tenant, type, state).
CREATE FUNCTION {s}.jobs_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- A statement that appends its own change (the self-counted setting, "Wire formats").
  IF current_setting('longhaul.self_counted', true) = 'on' THEN
    RETURN NULL;
  END IF;
  INSERT INTO {s}.job_changes (tenant, type, old_state, n) SELECT o.tenant, o.type, o.state, count(*) FROM old_rows o GROUP BY 1, 2, 3;
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_stats_delete AFTER DELETE ON {s}.jobs REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION {s}.jobs_stats_delete();

-- Folds job_changes into the three tables, each row weighed by its n, and drops rates and
-- run times older than before_ms. One caller at a time (a second one returns at once, with -1);
-- returns how many changes it folded.
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

CREATE FUNCTION {s}.job_attempts_reaped() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {s}.job_reaps AS t (tenant, minute, n)
  SELECT j.tenant, NEW.ended_at / 60000, 1 FROM {s}.jobs j WHERE j.id = NEW.job_id
  ON CONFLICT (tenant, minute) DO UPDATE SET n = t.n + 1;
  RETURN NULL;
END $$;
-- Row-level with a WHEN: the attempts of failures, retries and cancels never call the function.
-- The reasons of a reap: core/transitions.ts ZOMBIE_REASONS.
CREATE TRIGGER job_attempts_reaped AFTER INSERT ON {s}.job_attempts FOR EACH ROW
  WHEN (NEW.reason IN ('heartbeat lost; requeued', 'heartbeat lost; attempts exhausted', 'cancelled (heartbeat lost)', 'timeout (heartbeat lost)'))
  EXECUTE FUNCTION {s}.job_attempts_reaped();

-- ===========================================================================================
-- Transitions
-- ===========================================================================================
--
-- Functions that write many rows are planned generically (plan_cache_mode =
-- force_generic_plan): a custom plan per call costs more to make than the statement costs to
-- run, and the generic plans below are written to stay on their indexes whatever the estimates.

-- Moves due pending, retrying and waiting jobs to queued (earliest first, skipping rows another
-- transaction holds) and wakes idle workers when it moved any. Called by the worker's cycle and
-- by the sweeper.
CREATE FUNCTION {s}.promote_due(p_now bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  v_count integer;
BEGIN
  WITH due AS (
    SELECT j.id, j.state FROM {s}.jobs j
    WHERE j.state IN ('pending', 'retrying', 'waiting') AND j.run_at <= p_now
    ORDER BY j.run_at
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  ), moved AS (
    UPDATE {s}.jobs j
    SET state = 'queued',
        updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
        log = j.log || ',' || json_build_array(due.state, 'queued', p_now, CASE due.state WHEN 'waiting' THEN 'wait over' ELSE 'due' END, j.attempts, NULL::text)::text
    FROM due
    WHERE j.id = due.id
    RETURNING j.id
  )
  SELECT count(*) INTO v_count FROM moved;
  IF v_count > 0 THEN
    PERFORM pg_notify('{ch}', '');
  END IF;
  RETURN v_count;
END
$fn$;

-- The store's one writer of job state changes: the compare-and-swap transitions of p_items (see
-- "Wire formats"), round by round: items of one round have distinct ids, and a job named twice
-- in a batch has its second item in the next round, so items apply in order. Returns the
-- ordinals that applied; those of jobs it deleted (retention 0) negated. Wakes idle workers
-- when a job became claimable.
--
-- Retention 0: an item with d deletes its job as it ends, with the same compare-and-swap, when
-- the job holds nothing the eraser must handle (result files, a webhook target or deliveries, a
-- parent, children); otherwise the item is applied as an ordinary transition and the job is
-- erased later. Whether any job holds such rows is asked once per call (EXISTS over each table),
-- so that the common case, none, pays no probe per deleted job; a deleted job's progress and
-- signal rows are looked for only when those tables hold any, and its attempt rows only when it
-- ran under an earlier lease (1.6 µs per deleted job, a third of the delete, when none is).
--
-- An attempt that ended without succeeding is recorded in job_attempts in the same statement
-- (core/transitions.ts endsRecordedAttempt); the refunded attempt of a hand-back or a wait keeps
-- its number.
CREATE FUNCTION {s}.apply_transitions(p_items json, p_rounds integer) RETURNS integer[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  v_applied integer[] := '{}';
  v_part integer[];
  v_wake boolean;
  v_any_wake boolean := false;
  v_deletes boolean;
  v_round_items integer;
  v_any_owner boolean;
  v_any_parent boolean;
  v_any_progress boolean;
  v_any_signal boolean;
BEGIN
  -- A text search, cheaper than parsing: most calls carry no d (a false positive, such as a
  -- result holding "d":true, only costs the DELETE below finding nothing).
  v_deletes := strpos(p_items::text, '"d":true') > 0;
  IF v_deletes THEN
    v_any_owner := EXISTS (SELECT 1 FROM {s}.job_results) OR EXISTS (SELECT 1 FROM {s}.job_webhooks) OR EXISTS (SELECT 1 FROM {s}.webhook_deliveries);
    -- (Not EXISTS, which drops the ORDER BY and may scan the table: this stays on jobs_children.)
    v_any_parent := (SELECT c.parent_id FROM {s}.jobs c WHERE c.parent_id IS NOT NULL ORDER BY c.parent_id LIMIT 1) IS NOT NULL;
    v_any_progress := EXISTS (SELECT 1 FROM {s}.progress);
    v_any_signal := EXISTS (SELECT 1 FROM {s}.job_signals);
  END IF;
  FOR v_round IN 1 .. p_rounds LOOP
    IF v_deletes THEN
      -- The round's items with d whose job may be deleted: deleted, their ordinals negated. The
      -- others are applied by the UPDATE below (a deleted row no longer matches it).
      WITH round AS MATERIALIZED (
        SELECT * FROM json_to_recordset(p_items) AS x(o integer, r integer, id uuid, f text, t text, l integer, q boolean, d boolean)
        WHERE x.r = v_round
      ), item AS (
        SELECT * FROM round x WHERE x.d AND x.t IN ('succeeded', 'failed', 'cancelled')
      ), gone AS (
        DELETE FROM {s}.jobs j USING item i
        WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
          AND j.parent_id IS NULL
          AND (NOT v_any_owner OR (NOT EXISTS (SELECT 1 FROM {s}.job_results r WHERE r.job_id = j.id)
            AND NOT EXISTS (SELECT 1 FROM {s}.job_webhooks w WHERE w.job_id = j.id)
            AND NOT EXISTS (SELECT 1 FROM {s}.webhook_deliveries dl WHERE dl.job_id = j.id)))
          AND (NOT v_any_parent OR NOT EXISTS (SELECT 1 FROM {s}.jobs c WHERE c.parent_id = j.id::text))
        RETURNING j.id, i.o, j.lease
      ), gone_progress AS (
        DELETE FROM {s}.progress p USING gone WHERE v_any_progress AND p.job_id = gone.id
      ), gone_signals AS (
        DELETE FROM {s}.job_signals g USING gone WHERE v_any_signal AND g.job_id = gone.id
      ), gone_attempts AS (
        -- Attempt rows are those of runs that ended before this one, each under its own lease:
        -- a job ending its first lease has none.
        DELETE FROM {s}.job_attempts a USING gone WHERE gone.lease > 1 AND a.job_id = gone.id
      )
      SELECT array_agg(-gone.o), (SELECT count(*) FROM round) INTO v_part, v_round_items FROM gone;
      v_applied := v_applied || coalesce(v_part, '{}');
      -- Every item of the round deleted its job: nothing is left for the UPDATE (which would parse
      -- the items again and probe each deleted id).
      CONTINUE WHEN coalesce(cardinality(v_part), 0) = v_round_items;
    END IF;
    WITH item AS (
      SELECT * FROM json_to_recordset(p_items) AS x(
        o integer, r integer, id uuid, f text, t text, l integer, q boolean, why text, w text, at bigint, m integer,
        run_at bigint, result json, error json, finished_at bigint, expires_at bigint, cancel_reason text, stalled boolean, stack text)
      WHERE x.r = v_round
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = i.t,
          -- The pending claim entry first, if any, then this transition's (see "Wire formats").
          log = j.log
            || CASE WHEN j.claim_logged THEN '' ELSE ',["queued","running",' || j.started_at::text || ',"claimed",' || j.attempts::text || ',' || coalesce(to_json(j.worker_id)::text, 'null') || ']' END
            || ',' || json_build_array(i.f, i.t, i.at, i.why,
                 CASE WHEN i.m & 32 /* reset_attempts */ <> 0 THEN 0 WHEN i.m & 64 /* refund_attempt */ <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
                 i.w)::text,
          claim_logged = true,
          updated_at = greatest(i.at, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
          run_at = CASE WHEN i.m & 1 /* run_at */ <> 0 THEN i.run_at ELSE j.run_at END,
          result = CASE WHEN i.m & 2 /* result */ <> 0 THEN i.result ELSE j.result END,
          error = CASE WHEN i.m & 4 /* error */ <> 0 THEN i.error ELSE j.error END,
          error_code = CASE WHEN i.m & 4 /* error */ <> 0 THEN i.error->>'code' ELSE j.error_code END,
          finished_at = CASE WHEN i.m & 8 /* finished_at */ <> 0 THEN i.finished_at ELSE j.finished_at END,
          expires_at = CASE WHEN i.m & 16 /* expires_at */ <> 0 THEN i.expires_at ELSE j.expires_at END,
          attempts = CASE WHEN i.m & 32 /* reset_attempts */ <> 0 THEN 0 WHEN i.m & 64 /* refund_attempt */ <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
          checkpoint = CASE WHEN i.m & 128 /* clear_checkpoint */ <> 0 THEN NULL ELSE j.checkpoint END,
          cancel_requested = CASE WHEN i.m & 256 /* request_cancel */ <> 0 THEN true WHEN i.m & 512 /* clear_cancel */ <> 0 THEN false ELSE j.cancel_requested END,
          cancel_reason = CASE WHEN i.m & 256 /* request_cancel */ <> 0 THEN i.cancel_reason WHEN i.m & 512 /* clear_cancel */ <> 0 THEN NULL ELSE j.cancel_reason END,
          cancel_requested_at = CASE WHEN i.m & 256 /* request_cancel */ <> 0 THEN i.at WHEN i.m & 512 /* clear_cancel */ <> 0 THEN NULL ELSE j.cancel_requested_at END,
          stalled = CASE WHEN i.m & 1024 /* stalled */ <> 0 THEN i.stalled ELSE j.stalled END
      FROM item i
      WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
      RETURNING j.id, j.state AS to_state, j.run_at, i.o, i.at, i.f, i.m, i.why, i.error, i.stack, j.lease, j.attempts, j.worker_id, j.started_at
    ), dropped AS (
      -- An expired job's progress goes with its result.
      DELETE FROM {s}.progress p USING moved WHERE p.job_id = moved.id AND moved.to_state = 'expired'
    ), attempted AS (
      INSERT INTO {s}.job_attempts (job_id, lease, attempt, worker_id, started_at, ended_at, outcome, reason, error, stack)
      SELECT moved.id, moved.lease, moved.attempts + CASE WHEN moved.m & 64 /* refund_attempt */ <> 0 THEN 1 ELSE 0 END, moved.worker_id, moved.started_at,
        moved.at, moved.to_state, moved.why, CASE WHEN moved.m & 4 /* error */ <> 0 THEN moved.error END, moved.stack
      FROM moved
      WHERE moved.f = 'running' AND moved.to_state NOT IN ('running', 'succeeded')
      ON CONFLICT DO NOTHING
    )
    SELECT array_agg(moved.o), bool_or(moved.to_state = 'queued' OR (moved.to_state = 'retrying' AND moved.run_at <= moved.at))
    INTO v_part, v_wake
    FROM moved;
    v_applied := v_applied || coalesce(v_part, '{}');
    v_any_wake := v_any_wake OR coalesce(v_wake, false);
  END LOOP;
  IF v_any_wake THEN
    PERFORM pg_notify('{ch}', '');
  END IF;
  RETURN v_applied;
END
$fn$;

-- The jobs a worker ended as succeeded and asks to delete (retention 0: the write
-- core/transitions.ts succeed builds with deleteOnEnd), as parallel arrays instead of JSON
-- items: ids (sorted, so rows are locked in the order apply_transitions locks them), leases,
-- ordinals, end times, expiry times, results as JSON text (transitions.ts endedArrays). Parsing
-- them costs the server less than the JSON (validated on input, then read again by
-- json_to_recordset), and encoding them costs the worker less. Each job is deleted as
-- apply_transitions deletes one (the same compare-and-swap, the same checks); the delete appends
-- its own change to job_changes (the self-counted setting) instead of through the delete
-- trigger. Those it may not delete (they hold rows the eraser must handle) or whose lease moved
-- on go through apply_transitions as the JSON items the worker would have sent: kept as
-- succeeded, or refused. Deleted ordinals come back negated, like apply_transitions's.
CREATE FUNCTION {s}.end_succeeded(p_ids uuid[], p_leases integer[], p_ords integer[], p_ats bigint[], p_expires bigint[], p_results text[], p_worker text)
RETURNS integer[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  v_done integer[];
  v_rest json;
  v_any_owner boolean;
  v_any_parent boolean;
  v_any_progress boolean;
  v_any_signal boolean;
BEGIN
  -- Asked once per call, as in apply_transitions.
  v_any_owner := EXISTS (SELECT 1 FROM {s}.job_results) OR EXISTS (SELECT 1 FROM {s}.job_webhooks) OR EXISTS (SELECT 1 FROM {s}.webhook_deliveries);
  -- (Not EXISTS, which drops the ORDER BY and may scan the table: this stays on jobs_children.)
  v_any_parent := (SELECT c.parent_id FROM {s}.jobs c WHERE c.parent_id IS NOT NULL ORDER BY c.parent_id LIMIT 1) IS NOT NULL;
  v_any_progress := EXISTS (SELECT 1 FROM {s}.progress);
  v_any_signal := EXISTS (SELECT 1 FROM {s}.job_signals);
  PERFORM set_config('longhaul.self_counted', 'on', true);
  WITH item AS (
    SELECT x.o, x.id, 'running'::text AS f, x.l, NULL::boolean AS q FROM unnest(p_ords, p_ids, p_leases) AS x(o, id, l)
  ), gone AS (
    DELETE FROM {s}.jobs j USING item i
    WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
      AND j.parent_id IS NULL
      AND (NOT v_any_owner OR (NOT EXISTS (SELECT 1 FROM {s}.job_results r WHERE r.job_id = j.id)
        AND NOT EXISTS (SELECT 1 FROM {s}.job_webhooks w WHERE w.job_id = j.id)
        AND NOT EXISTS (SELECT 1 FROM {s}.webhook_deliveries dl WHERE dl.job_id = j.id)))
      AND (NOT v_any_parent OR NOT EXISTS (SELECT 1 FROM {s}.jobs c WHERE c.parent_id = j.id::text))
    RETURNING j.id, i.o, j.lease, j.tenant, j.type, j.state
  ), gone_counted AS (
    INSERT INTO {s}.job_changes (tenant, type, old_state, n)
    SELECT g.tenant, g.type, g.state, count(*)::integer FROM gone g GROUP BY g.tenant, g.type, g.state
  ), gone_progress AS (
    DELETE FROM {s}.progress p USING gone WHERE v_any_progress AND p.job_id = gone.id
  ), gone_signals AS (
    DELETE FROM {s}.job_signals g USING gone WHERE v_any_signal AND g.job_id = gone.id
  ), gone_attempts AS (
    -- Attempt rows are those of runs that ended before this one, each under its own lease:
    -- a job ending its first lease has none.
    DELETE FROM {s}.job_attempts a USING gone WHERE gone.lease > 1 AND a.job_id = gone.id
  )
  SELECT array_agg(-gone.o) INTO v_done FROM gone;
  PERFORM set_config('longhaul.self_counted', 'off', true);
  IF coalesce(cardinality(v_done), 0) < cardinality(p_ids) THEN
    -- The others, as the worker's JSON items (core/transitions.ts succeed): kept as succeeded, or refused.
    SELECT json_agg(json_build_object('o', x.o, 'r', 1, 'id', x.id, 'f', 'running', 't', 'succeeded', 'l', x.l, 'why', 'completed',
        'w', p_worker, 'at', x.at, 'm', 154 /* result | finished_at | expires_at | clear_checkpoint */, 'result', x.result::json,
        'finished_at', x.at, 'expires_at', x.expires) ORDER BY x.id)
      INTO v_rest
      FROM unnest(p_ords, p_ids, p_leases, p_ats, p_expires, p_results) AS x(o, id, l, at, expires, result)
      WHERE -x.o <> ALL (coalesce(v_done, '{}'));
    v_done := coalesce(v_done, '{}') || {s}.apply_transitions(v_rest, 1);
  END IF;
  RETURN coalesce(v_done, '{}');
END
$fn$;

-- ===========================================================================================
-- The claim
-- ===========================================================================================
--
-- A worker's cycle is one call of worker_cycle (one round trip, one transaction): it applies
-- the worker's completions, promotes due jobs, then claims up to p_limit queued jobs of the
-- types it runs, with the rules of core/claim-plan.ts planClaim: priority aging, fairness
-- between tenants, per-type concurrency, per-key concurrency, per-type rate limits and tenant
-- running caps. claim-args.ts builds its arguments; rows.ts reads what it returns.
--
-- How a claim runs, per type (the types come sorted, so advisory locks are always taken in one
-- order: types, then tenants):
-- - A type with a concurrency, key or rate limit takes the type's advisory lock: its claims are
--   serialised across workers, so the counts they read are exact. (Claims need READ COMMITTED:
--   each count is a new statement, so it sees every claim committed before the lock was granted.)
-- - The rate limit is a sliding-window log (rate_starts): starts older than the window are
--   deleted, the rest counted; when the window is full, the claim reports when it frees.
-- - Candidates are read per tenant (a skip scan finds the tenants with queued jobs, at most 64,
--   from a random point when there are more) and per priority level, locked (FOR UPDATE SKIP
--   LOCKED) as they are read. A type with a concurrency key reads them per key instead.
-- - The plan is one statement with window functions, the same steps as planClaim.
-- The common claim (one type with queued jobs, one tenant, one priority level, no rate limit,
-- no tenant cap) skips all that: two index probes (the first queued (tenant, priority), and
-- whether another pair follows it), then one ordered scan of that queue (the fast path).

-- The starts of rate-limited types, the last window of each: a sliding-window log.
CREATE TABLE {s}.rate_starts (type text COLLATE "C" NOT NULL, at bigint NOT NULL);
CREATE INDEX rate_starts_type ON {s}.rate_starts (type, at);

-- A queued job a claim may take (what planClaim calls a ClaimCandidate): rank is its priority.
CREATE TYPE {s}.claim_candidate AS (id uuid, type text, tenant text, rank smallint, run_at bigint, ckey text);

-- How many candidates to read per tenant or key (core/claim-plan.ts perGroupFetch).
CREATE FUNCTION {s}.per_group_fetch(p_room integer, p_groups integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT CASE WHEN p_groups <= 1 THEN p_room ELSE least(p_room, greatest(8, ceil(2.0 * p_room / p_groups)::integer)) END
$fn$;

-- The tenants (p_keys false) or concurrency keys (true) with queued jobs of a type: a skip scan,
-- one index probe each, at most 64; past 64, a new scan from a random point, wrapping around, so
-- that every one gets its turn.
CREATE FUNCTION {s}.claim_groups(p_type text, p_keys boolean) RETURNS text[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_out text[] := '{}';
  v_at text := '';
  v_next text;
  v_start text := NULL;
  v_wrapped boolean := false;
BEGIN
  LOOP
    IF p_keys THEN
      SELECT j.ckey INTO v_next FROM {s}.jobs j
      WHERE j.state = 'queued' AND j.ckey IS NOT NULL AND j.type = p_type AND j.ckey > v_at ORDER BY j.ckey LIMIT 1;
    ELSE
      SELECT j.tenant INTO v_next FROM {s}.jobs j
      WHERE j.state = 'queued' AND j.type = p_type AND j.tenant > v_at ORDER BY j.tenant LIMIT 1;
    END IF;
    IF v_next IS NULL OR (v_wrapped AND v_next COLLATE "C" > v_start COLLATE "C") THEN
      EXIT WHEN v_start IS NULL OR v_wrapped;
      v_wrapped := true;
      v_at := '';
      CONTINUE;
    END IF;
    v_out := v_out || v_next;
    v_at := v_next;
    IF cardinality(v_out) >= 64 THEN
      EXIT WHEN v_start IS NOT NULL;
      -- 64 and more: take 64 from a random point instead.
      v_start := md5(random()::text);
      v_at := v_start;
      v_out := '{}';
    END IF;
  END LOOP;
  RETURN v_out;
END
$fn$;

-- The worker's cycle. Arguments:
--   p_ended_*      the jobs the worker ended as succeeded and asks to delete (end_succeeded)
--   p_items, p_rounds   its other completions (apply_transitions)
--   p_worker, p_now     who claims, and its clock
--   p_types        the task types it runs, sorted; the next arrays are per type, in that order:
--   p_limits       its concurrency limit (null: none), p_key_limits its per-key limit,
--   p_rate_max, p_rate_per   at most p_rate_max starts per p_rate_per ms
--   p_limit        how many jobs it may claim now (its free slots)
--   p_aging        priority aging: one level of priority is worth p_aging ms of waiting (null: none)
--   p_cap_tenants, p_caps    tenants with a running cap, and their caps; p_cap_others: the cap
--                  of every other tenant (null: none)
-- Rows: first, when there were completions, one row whose `applied` holds every applied ordinal;
-- then one row per claimed job; last, when a rate limit held jobs back, one row with only
-- wake_at, when the window frees. A claimed job's row leaves out what the claim itself set (state
-- running, the worker, started and heartbeat at the claim's time, not stalled) and what only a
-- waiting job has: the reader fills those in (rows.ts claimedRowToJob), and each row is a quarter
-- fewer values to write and to parse. Its wake_at column is the claim's time when a rate limit
-- moved it past the worker's clock (below).
--
-- Measured costs and plan pathologies the statements below avoid:
-- - The claim finds its rows by primary-key probes whatever the planner estimates: the ids are
--   an array the planner cannot size (= ANY(ARRAY(SELECT ...))), and each claimed row's progress
--   is a subquery. Planned for the call at 10,000 queued jobs, joining 500 picked ids to the table
--   was a hash over the whole table (2-3 ms per claim, growing with the table). Not by turning
--   hash joins or sequential scans off around the statement: such settings also hold for the
--   triggers it fires, whose plans are then cached for the session.
-- - Candidates and the fast path are read without sorts and without JIT: each read is one
--   tenant's queue, in index order. Row estimates are often wrong here (a burst not yet
--   analyzed), and one of 1 row made the planner read the tenant's backlog through
--   jobs_tenant_backlog and sort it (20-60 ms per claim at 40,000 queued jobs); and the cost the
--   planner gives a plan it may not sort would pass jit_above_cost (0.5 s to compile).
-- - The fast path's statement is static, planned once per session under those settings:
--   parsing and planning it cost every call about 0.27 ms. Planned on a table of 1,000 jobs, then
--   used at 61,000 and 121,000, it claimed 500 jobs in the same 5.3-5.7 ms as one planned for the
--   call. The claim by id (after planning) is planned for each call (EXECUTE): its plan depends
--   on how many ids it gets.
-- - A claim writes no log entry (claim_logged false; see "Wire formats"), and a job never claimed
--   (lease 0) has no progress to look up (two probes per job, about 0.6 ms per claim of 500).
-- - The claim appends its own change to job_changes, one row per (tenant, type), instead of the
--   update trigger grouping its 1,000 old and new rows (about 0.8 ms of a 6.5 ms claim of 500).
-- - A rate-limited claim's time (v_now) is never before the type's last logged start: a worker
--   reads its clock before it waits for the type's lock, so a claim that read an earlier time can
--   take the lock after one that read a later time and already deleted starts still inside the
--   earlier claim's window; that claim would count too few (seen: 24 starts in one second under a
--   limit of 20 per second, three worker processes). So the log only grows in time, each window
--   is counted whole, and the claimed jobs' started_at is that time.
CREATE FUNCTION {s}.worker_cycle(
  p_ended_ids uuid[], p_ended_leases integer[], p_ended_ords integer[], p_ended_ats bigint[], p_ended_expires bigint[], p_ended_results text[],
  p_items json, p_rounds integer, p_worker text, p_types text[], p_limits integer[], p_limit integer,
  p_now bigint, p_key_limits integer[], p_rate_max integer[], p_rate_per bigint[], p_aging bigint,
  p_cap_tenants text[], p_caps integer[], p_cap_others integer)
RETURNS TABLE (
  applied integer[], id uuid, tenant text, type text, priority smallint, input text, metadata text, result text, error text,
  attempts integer, max_attempts integer, lease integer, cancel_requested boolean, cancel_reason text,
  cancel_requested_at bigint, parent_id text, created_at bigint, finished_at bigint,
  updated_at bigint, run_at bigint, expires_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
  stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text,
  workflow text, children_total integer, progress text, wake_at bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
  v_types integer := coalesce(array_length(p_types, 1), 0);
  -- Priority aging: a candidate's place is run_at + priority * v_step (no aging: a step longer
  -- than any wait, so priority always comes first).
  v_step bigint := coalesce(p_aging, 10000000000000);
  v_room integer;         -- how many jobs of the current type may still be claimed
  v_count integer;
  v_fetch integer;
  v_wake bigint;          -- the earliest time a full rate window frees
  v_at bigint;
  v_groups text[];
  v_group text;           -- a tenant, or a concurrency key
  v_cap integer;
  v_alone boolean;
  v_rank smallint;
  v_cands {s}.claim_candidate[] := '{}';
  -- The types with room, and their room.
  v_open_types text[] := '{}';
  v_open_rooms integer[] := '{}';
  -- The concurrency keys with room: (type, key, room) in three parallel arrays.
  v_key_types text[] := '{}';
  v_key_values text[] := '{}';
  v_key_rooms integer[] := '{}';
  -- The capped tenants among the candidates, and their room.
  v_capped_tenants text[] := '{}';
  v_capped_rooms integer[] := '{}';
  v_tenants text[];
  v_rated text[] := '{}';  -- the rate-limited types claimed from: their starts are logged
  v_ids uuid[];            -- the planned claim, in order
  -- The first pass keeps, per type with queued jobs (its index in p_types), the first queued
  -- (tenant, priority) and the type's room, for the second.
  v_t integer;
  v_heads integer[] := '{}';
  v_head_groups text[] := '{}';
  v_head_ranks smallint[] := '{}';
  v_head_rooms integer[] := '{}';
  v_fast boolean := false;
  v_sort text;
  v_jit text;
  v_now bigint := p_now;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'Longhaul claims need READ COMMITTED isolation, not %', current_setting('transaction_isolation');
  END IF;
  IF p_rounds > 0 OR cardinality(p_ended_ids) > 0 THEN
    -- The completions; every applied ordinal in one row (a row each cost more to return and to
    -- read than the ordinal).
    applied := '{}';
    IF cardinality(p_ended_ids) > 0 THEN
      applied := {s}.end_succeeded(p_ended_ids, p_ended_leases, p_ended_ords, p_ended_ats, p_ended_expires, p_ended_results, p_worker);
    END IF;
    IF p_rounds > 0 THEN
      applied := applied || {s}.apply_transitions(p_items, p_rounds);
    END IF;
    RETURN NEXT;
    applied := NULL;
  END IF;
  IF p_limit <= 0 OR v_types = 0 THEN
    RETURN;
  END IF;
  PERFORM {s}.promote_due(p_now, 1000);
  -- First pass, per type: its limits, then its keyed candidates or its first (tenant, priority).
  <<types>>
  FOR v_i IN 1 .. v_types LOOP
    v_room := p_limit;
    IF p_limits[v_i] IS NOT NULL OR p_key_limits[v_i] IS NOT NULL OR p_rate_max[v_i] IS NOT NULL THEN
      PERFORM pg_advisory_xact_lock(hashtext('{name}:type-limit'), hashtext(p_types[v_i]));
    END IF;
    IF p_limits[v_i] IS NOT NULL THEN
      SELECT count(*) INTO v_count FROM {s}.jobs j WHERE j.state = 'running' AND j.type = p_types[v_i];
      v_room := least(v_room, p_limits[v_i] - v_count);
    END IF;
    IF p_rate_max[v_i] IS NOT NULL AND v_room > 0 THEN
      v_rated := v_rated || p_types[v_i];
      SELECT greatest(v_now, max(r.at)) INTO v_now FROM {s}.rate_starts r WHERE r.type = p_types[v_i];
      DELETE FROM {s}.rate_starts r WHERE r.type = p_types[v_i] AND r.at <= v_now - p_rate_per[v_i];
      SELECT count(*) INTO v_count FROM {s}.rate_starts r WHERE r.type = p_types[v_i];
      IF v_count >= p_rate_max[v_i] THEN
        SELECT r.at + p_rate_per[v_i] INTO v_at FROM {s}.rate_starts r WHERE r.type = p_types[v_i]
        ORDER BY r.at OFFSET v_count - p_rate_max[v_i] LIMIT 1;
        v_wake := least(coalesce(v_wake, v_at), v_at);
      END IF;
      v_room := least(v_room, p_rate_max[v_i] - v_count);
    END IF;
    CONTINUE WHEN v_room <= 0;
    v_open_types := v_open_types || p_types[v_i];
    v_open_rooms := v_open_rooms || v_room;
    IF p_key_limits[v_i] IS NOT NULL THEN
      v_groups := {s}.claim_groups(p_types[v_i], true);
      v_fetch := {s}.per_group_fetch(v_room, cardinality(v_groups));
      FOREACH v_group IN ARRAY v_groups LOOP
        SELECT count(*) INTO v_count FROM {s}.jobs j
        WHERE j.state = 'running' AND j.ckey IS NOT NULL AND j.type = p_types[v_i] AND j.ckey = v_group;
        CONTINUE WHEN v_count >= p_key_limits[v_i];
        v_key_types := v_key_types || p_types[v_i];
        v_key_values := v_key_values || v_group;
        v_key_rooms := v_key_rooms || (p_key_limits[v_i] - v_count);
        v_cands := v_cands || ARRAY(
          SELECT ROW(j.id, j.type, j.tenant, j.priority, j.run_at, j.ckey)::{s}.claim_candidate FROM {s}.jobs j
          WHERE j.state = 'queued' AND j.ckey IS NOT NULL AND j.type = p_types[v_i] AND j.ckey = v_group
          ORDER BY j.priority, j.run_at, j.id
          -- With tenant caps, a key's first jobs may be a capped tenant's: read past them.
          LIMIT CASE WHEN cardinality(p_cap_tenants) > 0 OR p_cap_others IS NOT NULL THEN v_fetch ELSE least(p_key_limits[v_i] - v_count, v_fetch) END
          FOR UPDATE SKIP LOCKED);
      END LOOP;
      CONTINUE;
    END IF;
    -- The first (tenant, priority) queued: kept for the second pass.
    SELECT j.tenant, j.priority INTO v_group, v_rank FROM {s}.jobs j
    WHERE j.state = 'queued' AND j.type = p_types[v_i] ORDER BY j.tenant, j.priority LIMIT 1;
    CONTINUE WHEN NOT FOUND;
    v_heads := v_heads || v_i;
    v_head_groups := v_head_groups || v_group;
    v_head_ranks := v_head_ranks || v_rank;
    v_head_rooms := v_head_rooms || v_room;
  END LOOP;
  -- Second pass, over the types with queued jobs: whether another (tenant, priority) follows
  -- the first; one type alone with one pair (and no keyed candidates) is the fast path. Without
  -- sorts and JIT while reading candidates (see above).
  v_sort := current_setting('enable_sort');
  v_jit := current_setting('jit');
  PERFORM set_config('enable_sort', 'off', true), set_config('jit', 'off', true);
  <<heads>>
  FOR v_h IN 1 .. cardinality(v_heads) LOOP
    v_t := v_heads[v_h];
    v_group := v_head_groups[v_h];
    v_rank := v_head_ranks[v_h];
    v_room := v_head_rooms[v_h];
    -- (ORDER BY keeps the plan on the index: with a bare filter a generic plan may scan the table.)
    PERFORM FROM {s}.jobs j WHERE j.state = 'queued' AND j.type = p_types[v_t] AND (j.tenant, j.priority) > (v_group, v_rank)
    ORDER BY j.tenant, j.priority LIMIT 1;
    v_alone := NOT FOUND;
    v_cap := CASE WHEN v_group = ANY(coalesce(p_cap_tenants, '{}')) THEN p_caps[array_position(p_cap_tenants, v_group)] ELSE p_cap_others END;
    IF v_alone AND cardinality(v_heads) = 1 AND cardinality(v_cands) = 0 AND p_rate_max[v_t] IS NULL AND v_cap IS NULL THEN
      -- One tenant, one priority level: the queue index order is the plan (claimed below).
      v_fast := true;
      EXIT heads;
    END IF;
    -- Candidates per tenant (the first one alone, or a skip scan) and per priority level, locked
    -- as they are read.
    v_groups := CASE WHEN v_alone THEN ARRAY[v_group] ELSE {s}.claim_groups(p_types[v_t], false) END;
    v_fetch := {s}.per_group_fetch(v_room, cardinality(v_groups));
    FOREACH v_group IN ARRAY v_groups LOOP
      FOR v_level IN 0 .. 3 LOOP
        v_cands := v_cands || ARRAY(
          SELECT ROW(j.id, j.type, j.tenant, j.priority, j.run_at, j.ckey)::{s}.claim_candidate FROM {s}.jobs j
          WHERE j.state = 'queued' AND j.type = p_types[v_t] AND j.tenant = v_group AND j.priority = v_level
          ORDER BY j.run_at, j.id
          LIMIT v_fetch
          FOR UPDATE SKIP LOCKED);
      END LOOP;
    END LOOP;
  END LOOP;
  PERFORM set_config('enable_sort', v_sort, true), set_config('jit', v_jit, true);
  IF v_ids IS NULL AND cardinality(v_cands) > 0 THEN
    -- Tenant caps: each capped tenant's lock (in name order), then its running jobs counted.
    SELECT array_agg(DISTINCT c.tenant ORDER BY c.tenant) INTO v_tenants FROM unnest(v_cands) c;
    FOREACH v_group IN ARRAY v_tenants LOOP
      v_cap := CASE WHEN v_group = ANY(coalesce(p_cap_tenants, '{}')) THEN p_caps[array_position(p_cap_tenants, v_group)] ELSE p_cap_others END;
      CONTINUE WHEN v_cap IS NULL;
      PERFORM pg_advisory_xact_lock(hashtext('{name}:tenant-cap'), hashtext(v_group));
      SELECT count(*) INTO v_count FROM {s}.jobs j WHERE j.state = 'running' AND j.tenant = v_group;
      v_capped_tenants := v_capped_tenants || v_group;
      v_capped_rooms := v_capped_rooms || (v_cap - v_count);
    END LOOP;
    -- The plan: planClaim's steps as windows over the candidates in place order. From the
    -- inside out: each candidate's place (aging); its rank within its tenant (rt), cut at the
    -- tenant's cap room; its rank within its key (rk), cut at the key's room; its tenant's load
    -- (running jobs plus its rank: fairness takes the least loaded tenant first); its rank within
    -- its type (ry), cut at the type's room; then by load and place, at most p_limit.
    SELECT array_agg(y.id ORDER BY y.load, y.place, y.id) INTO v_ids FROM (
      SELECT y.id, y.load, y.place FROM (
        SELECT l.*, row_number() OVER (PARTITION BY l.type ORDER BY l.load, l.place, l.id) AS ry FROM (
          SELECT t.*, coalesce(run.n, 0) + row_number() OVER (PARTITION BY t.tenant ORDER BY t.place, t.id) AS load FROM (
            SELECT k.* FROM (
              SELECT k.*, row_number() OVER (PARTITION BY k.type, k.ckey ORDER BY k.place, k.id) AS rk FROM (
                SELECT c.* FROM (
                  SELECT c.*, row_number() OVER (PARTITION BY c.tenant ORDER BY c.place, c.id) AS rt FROM (
                    SELECT c.id, c.type, c.tenant, c.ckey, c.run_at + c.rank * v_step AS place FROM unnest(v_cands) c
                  ) c
                ) c
                LEFT JOIN unnest(v_capped_tenants, v_capped_rooms) AS tr(tenant, room) ON tr.tenant = c.tenant
                WHERE tr.room IS NULL OR c.rt <= tr.room
              ) k
            ) k
            LEFT JOIN unnest(v_key_types, v_key_values, v_key_rooms) AS kr(type, ckey, room) ON kr.type = k.type AND kr.ckey = k.ckey
            WHERE k.ckey IS NULL OR kr.room IS NULL OR k.rk <= kr.room
          ) t
          LEFT JOIN (
            SELECT j.tenant, count(*) AS n FROM {s}.jobs j
            WHERE j.state = 'running' AND j.type = ANY(v_open_types) AND j.tenant = ANY(v_tenants) AND cardinality(v_tenants) > 1
            GROUP BY j.tenant
          ) run ON run.tenant = t.tenant
        ) l
      ) y
      JOIN unnest(v_open_types, v_open_rooms) AS rr(type, room) ON rr.type = y.type
      WHERE y.ry <= rr.room
      ORDER BY y.load, y.place, y.id
      LIMIT p_limit
    ) y;
  END IF;
  IF v_fast THEN
    -- The fast path: the queue's first v_room jobs, claimed in one static statement (see above).
    v_sort := current_setting('enable_sort');
    v_jit := current_setting('jit');
    PERFORM set_config('enable_sort', 'off', true), set_config('jit', 'off', true), set_config('longhaul.self_counted', 'on', true);
    RETURN QUERY
    WITH picked AS (
      SELECT j.id FROM {s}.jobs j
      WHERE j.state = 'queued' AND j.type = p_types[v_t] AND j.tenant = v_group
      ORDER BY j.priority, j.run_at, j.id
      LIMIT v_room
      FOR UPDATE SKIP LOCKED
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'running',
          lease = j.lease + 1,
          attempts = j.attempts + 1,
          worker_id = p_worker,
          started_at = p_now,
          heartbeat_at = p_now,
          stalled = false,
          claim_logged = false,
          updated_at = greatest(p_now, j.updated_at + 1, coalesce(CASE WHEN j.lease > 0 THEN (SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id) END, 0) + 1)
      WHERE j.id = ANY(ARRAY(SELECT picked.id FROM picked))
      RETURNING j.*
    ), counted AS (
      INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, n)
      SELECT m.tenant, m.type, 'queued', 'running', count(*)::integer FROM moved m GROUP BY m.tenant, m.type
    )
    SELECT NULL::integer[], m.id, m.tenant, m.type, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
      m.attempts, m.max_attempts, m.lease, m.cancel_requested, m.cancel_reason,
      m.cancel_requested_at, m.parent_id, m.created_at, m.finished_at,
      m.updated_at, m.run_at, m.expires_at, m.timeout_ms, m.heartbeat_timeout_ms,
      m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key,
      m.workflow::text, m.children_total, CASE WHEN m.lease - 1 > 0 THEN (SELECT p.data::text FROM {s}.progress p WHERE p.job_id = m.id) END, NULL::bigint
    FROM moved m
    ORDER BY m.priority, m.run_at, m.id;
    PERFORM set_config('enable_sort', v_sort, true), set_config('jit', v_jit, true), set_config('longhaul.self_counted', 'off', true);
  END IF;
  IF coalesce(cardinality(v_ids), 0) > 0 THEN
    -- The planned claim, by primary key ($1 the ids, $2 the worker, $3 the claim's time), planned
    -- for each call, and the starts of rate-limited types ($4) logged in the same statement.
    PERFORM set_config('longhaul.self_counted', 'on', true);
    RETURN QUERY EXECUTE $q$
    WITH moved AS (
      UPDATE {s}.jobs j
      SET state = 'running',
          lease = j.lease + 1,
          attempts = j.attempts + 1,
          worker_id = $2,
          started_at = $3,
          heartbeat_at = $3,
          stalled = false,
          claim_logged = false,
          updated_at = greatest($3, j.updated_at + 1, coalesce(CASE WHEN j.lease > 0 THEN (SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id) END, 0) + 1)
      WHERE j.id = ANY(ARRAY(SELECT unnest($1)))
      RETURNING j.*
    ), starts AS (
      INSERT INTO {s}.rate_starts (type, at) SELECT m.type, $3 FROM moved m WHERE m.type = ANY($4)
    ), counted AS (
      INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, n)
      SELECT m.tenant, m.type, 'queued', 'running', count(*)::integer FROM moved m GROUP BY m.tenant, m.type
    )
    SELECT NULL::integer[], m.id, m.tenant, m.type, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
      m.attempts, m.max_attempts, m.lease, m.cancel_requested, m.cancel_reason,
      m.cancel_requested_at, m.parent_id, m.created_at, m.finished_at,
      m.updated_at, m.run_at, m.expires_at, m.timeout_ms, m.heartbeat_timeout_ms,
      m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key,
      m.workflow::text, m.children_total, CASE WHEN m.lease - 1 > 0 THEN (SELECT p.data::text FROM {s}.progress p WHERE p.job_id = m.id) END, $3
    FROM moved m
    ORDER BY array_position($1, m.id)
    $q$ USING v_ids, p_worker, v_now, v_rated;
    PERFORM set_config('longhaul.self_counted', 'off', true);
  END IF;
  IF v_wake IS NOT NULL THEN
    wake_at := v_wake;
    RETURN NEXT;
  END IF;
END
$fn$;
