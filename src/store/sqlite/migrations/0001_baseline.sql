-- Longhaul's SQLite schema: the baseline every database starts from.
--
-- Applied by SqliteStore.migrate (src/store/sqlite/sqlite-store.ts) inside one IMMEDIATE
-- transaction with the other pending files, and recorded in longhaul_migrations. This file is
-- released: it never changes (test/unit/migration-hashes.test.ts holds its SHA-256). A change
-- of schema is a new file, 0002_<what>.sql, beside it.
--
-- Conventions
-- - Times are INTEGER milliseconds since the Unix epoch; durations are INTEGER ms (`_ms`).
-- - Structured values (input, result, error, metadata, the transition log, the workflow
--   journal) are JSON in TEXT columns; the store reads a job row as one JSON array (rows.ts).
-- - Flags are INTEGER 0 or 1.
-- - Job states are the strings of core/states.ts JOB_STATES: 'pending', 'queued', 'running',
--   'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired'.
--   test/unit/sqlite-schema-agreement.test.ts checks every state list below against the
--   TypeScript sets it stands for, and the other literals marked with a TypeScript name.
-- - Most indexes on jobs are partial, on the states that read them: a job entering or leaving
--   a state touches only the indexes of that state, so a claim or an end updates few of them.

---------------------------------------------------------------------------------------------
-- Jobs
---------------------------------------------------------------------------------------------

CREATE TABLE jobs (
  id TEXT PRIMARY KEY,                     -- UUIDv7: ids sort by creation time
  tenant TEXT NOT NULL,
  type TEXT NOT NULL,                      -- the task type
  state TEXT NOT NULL,                     -- core/states.ts JOB_STATES
  priority INTEGER NOT NULL,
  input TEXT,
  metadata TEXT,
  result TEXT,
  error TEXT,                              -- {message, code, retryable, ...} of the last failure
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  -- The fencing token: raised by every claim. A write by a worker names the lease it holds and
  -- does nothing once the job was claimed again (a reaped worker cannot overwrite its successor).
  lease INTEGER NOT NULL DEFAULT 0,
  worker_id TEXT,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  cancel_reason TEXT,
  cancel_requested_at INTEGER,
  stalled INTEGER NOT NULL DEFAULT 0,      -- running with no progress for stall_timeout_ms
  parent_id TEXT,                          -- the workflow parent that spawned this job
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,                     -- NULL while the job is open (a claim clears it)
  updated_at INTEGER NOT NULL,             -- also the version of a status poll (snapshot-json.ts)
  -- When the job is next due: pending and retrying jobs are promoted to queued at run_at, a
  -- waiting job wakes at it (a sleep, a signal's timeout). A wait with no time limit has
  -- run_at = core/workflow.ts NEVER (8640000000000000) and never comes due.
  run_at INTEGER NOT NULL,
  expires_at INTEGER,                      -- a succeeded job's result is expired after this
  heartbeat_at INTEGER,
  timeout_ms INTEGER,
  heartbeat_timeout_ms INTEGER NOT NULL,
  stall_timeout_ms INTEGER,
  result_ttl_ms INTEGER NOT NULL,
  checkpoint TEXT,
  idempotency_key TEXT,
  request_hash TEXT,                       -- of the submission an idempotency key was first used with
  log TEXT NOT NULL,                       -- the transition log, a JSON array
  -- Workflows (core/workflow.ts): the journal, and what a waiting job waits for.
  workflow TEXT,
  wait_kind TEXT,                          -- 'children', 'sleep' or 'signal' (core/workflow.ts WaitCondition kind)
  wait_name TEXT,                          -- the signal's name
  wait_key TEXT,                           -- the wait's key: marks the signal it consumed (job_signals.consumed_by)
  wait_fail_fast INTEGER NOT NULL DEFAULT 0,
  children_total INTEGER NOT NULL DEFAULT 0,
  ckey TEXT,                               -- the concurrency key (core/claim-plan.ts)
  -- The code of `error`, kept by every transition that writes error: a column, not an
  -- expression, so that jobs_dead_letters covers the grouped dead-letter listing (a tenth of
  -- its time, measured).
  error_code TEXT,
  trace_parent TEXT,                       -- the W3C trace context of the submit, continued by the attempts' spans
  -- Bumped by the writes that count their own stats (the worker's claims and ends, see
  -- "Stats" below and stats-batch.ts); the update triggers skip rows whose stats_seq changed.
  stats_seq INTEGER NOT NULL DEFAULT 0
);

-- Basics: results to expire, a tenant's jobs in id order, ended jobs by end time, idempotency.
CREATE INDEX jobs_expiring ON jobs (expires_at) WHERE state = 'succeeded';
CREATE INDEX jobs_tenant ON jobs (tenant, id);
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Jobs that come due at run_at: pending and retrying ones are promoted to queued, waiting ones
-- wake. The statements that promote them (sqlite-store.ts promoteDue, promote) name the same
-- three states, so that they read this index.
CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('pending', 'retrying', 'waiting');

-- Workflows. A parent's children in id order (listing, counting).
CREATE INDEX jobs_children ON jobs (parent_id, id) WHERE parent_id IS NOT NULL;
-- Open children only (core/states.ts JOB_STATES not in TERMINAL_STATES): "does this parent
-- still have an open child" is one probe, however many children it has and however many ended.
CREATE INDEX jobs_open_children ON jobs (parent_id) WHERE parent_id IS NOT NULL AND state IN ('pending', 'queued', 'running', 'retrying', 'waiting');
-- Children that failed or were cancelled (a failFast parent's backstop check), few by nature.
CREATE INDEX jobs_failed_children ON jobs (parent_id) WHERE parent_id IS NOT NULL AND state IN ('failed', 'cancelled');
-- Parents waiting for their children: the sweeper's backstop walks only these.
CREATE INDEX jobs_waiting_parents ON jobs (id) WHERE state = 'waiting' AND wait_kind = 'children';

-- Retention: ended jobs (core/states.ts TERMINAL_STATES) by state and end time, the sweeper's
-- deletion scan. Partial on ended states: claims and transitions between open states never
-- touch it.
CREATE INDEX jobs_ended ON jobs (state, finished_at) WHERE state IN ('succeeded', 'expired', 'failed', 'cancelled');

-- The claim (claim-ops.ts, core/claim-plan.ts). The queue leads with the type, then the tenant:
-- a claim finds the tenants with queued jobs of a type by a skip scan and reads each one's
-- queue in (priority, run_at, id) order. Running jobs per (type, tenant) give the limits' room.
CREATE INDEX jobs_queued_by_tenant ON jobs (type, tenant, priority, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_running ON jobs (type, tenant) WHERE state = 'running';
-- Concurrency keys get their own queue and running indexes, partial: jobs without a key never
-- touch them.
CREATE INDEX jobs_queued_by_key ON jobs (type, ckey, priority, run_at, id) WHERE state = 'queued' AND ckey IS NOT NULL;
CREATE INDEX jobs_running_by_key ON jobs (type, ckey) WHERE state = 'running' AND ckey IS NOT NULL;

-- Tenant quotas: a tenant's backlog (core/states.ts BACKLOG_STATES) is counted at submission up
-- to its maxQueued; the count stops at the limit, so it costs O(limit) whatever the table holds.
CREATE INDEX jobs_tenant_backlog ON jobs (tenant) WHERE state IN ('pending', 'queued', 'retrying');

-- Dead letters: failed jobs by tenant, type and error code (the groups, their pages, the bulk
-- filters).
CREATE INDEX jobs_dead_letters ON jobs (tenant, type, error_code, finished_at, id) WHERE state = 'failed';

-- What the sweeper found (Store.sweepHealth): running jobs flagged stalled, an index as small
-- as their number.
CREATE INDEX jobs_stalled ON jobs (tenant) WHERE state = 'running' AND stalled = 1;

-- A running job's last progress report.
CREATE TABLE job_progress (
  job_id TEXT PRIMARY KEY,
  data TEXT NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;

---------------------------------------------------------------------------------------------
-- Result files and webhooks
---------------------------------------------------------------------------------------------

-- The files a job wrote (ctx.results); the bytes are in the blob store under `key`.
CREATE TABLE job_results (
  job_id TEXT NOT NULL,
  name TEXT NOT NULL,
  seq INTEGER NOT NULL,                    -- the order the files were written in
  size INTEGER NOT NULL,
  content_type TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  key TEXT NOT NULL,
  downloads INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (job_id, name)
) WITHOUT ROWID;

-- A job's webhook target. `pending` is set while an end of the job is still to be announced;
-- notified_finished_at is the end last announced, so a job that ends again (after a manual
-- retry) is announced again.
CREATE TABLE job_webhooks (
  job_id TEXT PRIMARY KEY,
  url TEXT NOT NULL,
  secret TEXT,
  pending INTEGER NOT NULL DEFAULT 1,
  notified_finished_at INTEGER
) WITHOUT ROWID;
CREATE INDEX job_webhooks_pending ON job_webhooks (job_id) WHERE pending = 1;

-- The delivery log: one row per HTTP attempt.
CREATE TABLE webhook_deliveries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  delivery_id TEXT NOT NULL,               -- one message id for every attempt of one delivery
  event_type TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  at INTEGER NOT NULL,
  url TEXT NOT NULL,
  status INTEGER,
  ok INTEGER NOT NULL,
  error TEXT,
  duration_ms INTEGER NOT NULL,
  response_snippet TEXT
);
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id, seq);

---------------------------------------------------------------------------------------------
-- Signals (workflows)
---------------------------------------------------------------------------------------------

-- Signals sent to a job, kept until a wait consumes them (a signal sent before its wait waits
-- for it). consumed_by is the key of the wait that took it (jobs.wait_key).
CREATE TABLE job_signals (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  name TEXT NOT NULL,
  payload TEXT,
  sent_at INTEGER NOT NULL,
  consumed_by TEXT
);
-- The oldest unconsumed signal of (job, name), and the signal a wait consumed.
CREATE INDEX job_signals_unconsumed ON job_signals (job_id, name, seq) WHERE consumed_by IS NULL;
CREATE INDEX job_signals_consumed ON job_signals (job_id, consumed_by) WHERE consumed_by IS NOT NULL;
-- A job's signals, deleted with the job.
CREATE INDEX job_signals_job ON job_signals (job_id);

---------------------------------------------------------------------------------------------
-- Schedules (cron)
---------------------------------------------------------------------------------------------

-- One row per (tenant, name). next_run_at is the tick not yet handled: a tick pass submits the
-- job of each due schedule and moves next_run_at on in the same transaction, so several
-- instances ticking at once submit one job per tick.
CREATE TABLE schedules (
  tenant TEXT NOT NULL,
  name TEXT NOT NULL,
  task TEXT NOT NULL,
  cron TEXT NOT NULL,
  timezone TEXT NOT NULL,
  input TEXT,
  catch_up TEXT NOT NULL,                  -- 'skip' or 'runOnce' (core/schedule.ts CatchUp)
  overlap INTEGER NOT NULL,
  declared INTEGER NOT NULL,               -- declared in code (upserted at open) rather than created by the API
  paused INTEGER NOT NULL DEFAULT 0,
  next_run_at INTEGER,
  last_run_at INTEGER,
  last_job_id TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE paused = 0 AND next_run_at IS NOT NULL;

---------------------------------------------------------------------------------------------
-- Rate limits
---------------------------------------------------------------------------------------------

-- The starts of rate-limited task types in their last window (claim-ops.ts rateRoom); older
-- rows are deleted as the window moves on.
CREATE TABLE rate_starts (type TEXT NOT NULL, at INTEGER NOT NULL);
CREATE INDEX rate_starts_type ON rate_starts (type, at);

---------------------------------------------------------------------------------------------
-- Attempt history (dead letters)
---------------------------------------------------------------------------------------------

-- One row per run that ended without succeeding, keyed by the run's lease, written by
-- transitions.ts in the transition's own transaction.
CREATE TABLE job_attempts (
  job_id TEXT NOT NULL,
  lease INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  worker_id TEXT,
  started_at INTEGER,
  ended_at INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  reason TEXT NOT NULL,                    -- the transition's reason (core/transitions.ts)
  error TEXT,
  stack TEXT,
  PRIMARY KEY (job_id, lease)
) WITHOUT ROWID;

---------------------------------------------------------------------------------------------
-- Stats: what /v1/stats and /metrics read, without counting the jobs table
---------------------------------------------------------------------------------------------
--
-- Kept in the same transaction as every write of jobs (insert, state change, end, delete), so
-- they stay exact across retention, purges and crashes; stats-ops.ts reads them.
-- - job_counts: jobs per (tenant, type, state). A state change moves one unit between rows.
-- - job_rates: jobs submitted and ended per second (of created_at / finished_at).
-- - job_durations: run times (started_at to finished_at of jobs that ended succeeded, failed or
--   expired) per minute of their end, in log-scaled buckets (core/stats-window.ts).
-- SQLite has one writer at a time, so the counter rows cannot be contended. Rate and duration
-- rows older than the stats window (core/stats-window.ts STATS_WINDOW_MS) are deleted by
-- compactStats (the sweeper). Rates and run times are keyed by tenant first: /v1/stats reads one
-- tenant's window.
--
-- Who counts: the worker's own writes (a claim, the end of a running job) count themselves,
-- grouped, at the end of their transaction (stats-batch.ts), where row triggers cost one to
-- three statements per job on the hot path. Such a write marks the rows it changes
-- (stats_seq = stats_seq + 1) and the update triggers below skip marked rows. Every other write,
-- by Longhaul or anything else, leaves stats_seq as it is and is counted by the triggers.
--
-- The duration bucket of a run time, here and in core/stats-window.ts durationBucket:
--   CAST(8 * log2(max(ms, 0) + 1) AS INTEGER)
-- where 8 is core/stats-window.ts BUCKETS_PER_OCTAVE (consecutive bounds differ by 2^(1/8),
-- about 9 %; negative times count as 0). log2 is one of SQLite's math functions (3.35+).

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

-- A new job: one more in its state, one more submitted in its second.
CREATE TRIGGER jobs_stats_insert AFTER INSERT ON jobs BEGIN
  INSERT INTO job_counts (tenant, type, state, n) VALUES (NEW.tenant, NEW.type, NEW.state, 1)
    ON CONFLICT (tenant, type, state) DO UPDATE SET n = n + 1;
  INSERT INTO job_rates (second, tenant, type, submitted, finished) VALUES (NEW.created_at / 1000, NEW.tenant, NEW.type, 1, 0)
    ON CONFLICT (tenant, second, type) DO UPDATE SET submitted = submitted + 1;
END;

-- A job inserted already ended (written by anything but Longhaul's submit, which inserts open
-- jobs): its end and run time, as jobs_stats_ended below. The states with a run time are
-- stats-batch.ts TIMED_ENDS.
CREATE TRIGGER jobs_stats_insert_ended AFTER INSERT ON jobs WHEN NEW.finished_at IS NOT NULL BEGIN
  INSERT INTO job_rates (second, tenant, type, submitted, finished) VALUES (NEW.finished_at / 1000, NEW.tenant, NEW.type, 0, 1)
    ON CONFLICT (tenant, second, type) DO UPDATE SET finished = finished + 1;
  INSERT INTO job_durations (minute, tenant, type, bucket, n)
    SELECT NEW.finished_at / 60000, NEW.tenant, NEW.type, CAST(8 * log2(max(NEW.finished_at - NEW.started_at, 0) + 1) AS INTEGER), 1
    WHERE NEW.started_at IS NOT NULL AND NEW.state IN ('succeeded', 'failed', 'expired')
    ON CONFLICT (tenant, minute, type, bucket) DO UPDATE SET n = n + 1;
END;

-- A deleted job (retention, purge) leaves its state's count. Its rates and run time stay: they
-- count what happened in the window.
CREATE TRIGGER jobs_stats_delete AFTER DELETE ON jobs BEGIN
  UPDATE job_counts SET n = n - 1 WHERE tenant = OLD.tenant AND type = OLD.type AND state = OLD.state;
END;

-- A state change moves one unit, in one statement (a multi-row upsert: one statement less per
-- transition than an UPDATE and an upsert).
CREATE TRIGGER jobs_stats_state AFTER UPDATE OF state ON jobs WHEN OLD.state IS NOT NEW.state AND NEW.stats_seq IS OLD.stats_seq BEGIN
  INSERT INTO job_counts (tenant, type, state, n) VALUES (OLD.tenant, OLD.type, OLD.state, -1), (NEW.tenant, NEW.type, NEW.state, 1)
    ON CONFLICT (tenant, type, state) DO UPDATE SET n = n + excluded.n;
END;

-- An end: finished_at set where it was not (a claim clears it, so every end of a run counts).
CREATE TRIGGER jobs_stats_ended AFTER UPDATE OF finished_at ON jobs
  WHEN NEW.finished_at IS NOT NULL AND OLD.finished_at IS NOT NEW.finished_at AND NEW.stats_seq IS OLD.stats_seq BEGIN
  INSERT INTO job_rates (second, tenant, type, submitted, finished) VALUES (NEW.finished_at / 1000, NEW.tenant, NEW.type, 0, 1)
    ON CONFLICT (tenant, second, type) DO UPDATE SET finished = finished + 1;
  INSERT INTO job_durations (minute, tenant, type, bucket, n)
    SELECT NEW.finished_at / 60000, NEW.tenant, NEW.type, CAST(8 * log2(max(NEW.finished_at - NEW.started_at, 0) + 1) AS INTEGER), 1
    WHERE NEW.started_at IS NOT NULL AND NEW.state IN ('succeeded', 'failed', 'expired')
    ON CONFLICT (tenant, minute, type, bucket) DO UPDATE SET n = n + 1;
END;

-- Zombies reaped per (tenant, minute), cluster-wide (Store.sweepHealth): counted as the attempt
-- a reap ends is recorded (same transaction; a later deletion of the job does not uncount it),
-- and dropped with the other stats older than the window by compactStats.
CREATE TABLE job_reaps (
  tenant TEXT NOT NULL,
  minute INTEGER NOT NULL,
  n INTEGER NOT NULL,
  PRIMARY KEY (tenant, minute)
) WITHOUT ROWID;
CREATE INDEX job_reaps_minute ON job_reaps (minute);

-- The reasons are core/transitions.ts ZOMBIE_REASONS: the transitions that hand on a running job
-- whose worker stopped heartbeating (reapLostWorker, and forceCancel of one whose cancel was
-- requested). Changing one of them in TypeScript needs a new migration that replaces this trigger.
CREATE TRIGGER job_attempts_reaped AFTER INSERT ON job_attempts
  WHEN NEW.reason IN ('heartbeat lost; requeued', 'heartbeat lost; attempts exhausted', 'cancelled (heartbeat lost)', 'timeout (heartbeat lost)') BEGIN
  INSERT INTO job_reaps (tenant, minute, n) SELECT tenant, NEW.ended_at / 60000, 1 FROM jobs WHERE id = NEW.job_id
    ON CONFLICT (tenant, minute) DO UPDATE SET n = n + 1;
END;
