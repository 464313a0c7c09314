/**
 * SQLite schema, as numbered migrations. The version lives in `longhaul_meta`; migrations
 * run inside one IMMEDIATE transaction, so several processes opening the same file at once
 * apply each migration exactly once.
 */
import { STATS_BATCH_MIGRATION, STATS_MIGRATION, SWEEP_HEALTH_MIGRATION } from './stats-schema.js';

export const MIGRATIONS: readonly string[] = [
  // 1: jobs, progress
  `
  CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    type TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL,
    input TEXT,
    metadata TEXT,
    result TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease INTEGER NOT NULL DEFAULT 0,
    worker_id TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    cancel_reason TEXT,
    cancel_requested_at INTEGER,
    stalled INTEGER NOT NULL DEFAULT 0,
    parent_id TEXT,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    updated_at INTEGER NOT NULL,
    run_at INTEGER NOT NULL,
    expires_at INTEGER,
    heartbeat_at INTEGER,
    timeout_ms INTEGER,
    heartbeat_timeout_ms INTEGER NOT NULL,
    stall_timeout_ms INTEGER,
    result_ttl_ms INTEGER NOT NULL,
    checkpoint TEXT,
    idempotency_key TEXT,
    request_hash TEXT,
    log TEXT NOT NULL
  );
  -- Partial indexes: a job entering or leaving a state touches only the index of that state.
  CREATE INDEX jobs_queued_by_type ON jobs (type, priority, run_at, id) WHERE state = 'queued';
  CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('pending', 'retrying');
  CREATE INDEX jobs_running ON jobs (type) WHERE state = 'running';
  CREATE INDEX jobs_expiring ON jobs (expires_at) WHERE state = 'succeeded';
  CREATE INDEX jobs_tenant ON jobs (tenant, id);
  CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
  CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
  CREATE TABLE job_progress (
    job_id TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    updated_at INTEGER NOT NULL
  ) WITHOUT ROWID;
  `,
  // 2: result files, webhook targets and the webhook delivery log
  `
  CREATE TABLE job_results (
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    size INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    key TEXT NOT NULL,
    downloads INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, name)
  ) WITHOUT ROWID;
  CREATE TABLE job_webhooks (
    job_id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    secret TEXT,
    pending INTEGER NOT NULL DEFAULT 1,
    notified_finished_at INTEGER
  ) WITHOUT ROWID;
  CREATE INDEX job_webhooks_pending ON job_webhooks (job_id) WHERE pending = 1;
  CREATE TABLE webhook_deliveries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
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
  `,
  // 3: workflows: the journal, what a waiting job waits for, children, signals
  `
  ALTER TABLE jobs ADD COLUMN workflow TEXT;
  ALTER TABLE jobs ADD COLUMN wait_kind TEXT;
  ALTER TABLE jobs ADD COLUMN wait_name TEXT;
  ALTER TABLE jobs ADD COLUMN wait_key TEXT;
  ALTER TABLE jobs ADD COLUMN wait_fail_fast INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN children_total INTEGER NOT NULL DEFAULT 0;
  -- Waiting jobs come due like pending and retrying ones (a sleep, a signal's timeout); a wait
  -- with no time limit has run_at = NEVER and never does.
  DROP INDEX jobs_due;
  CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('pending', 'retrying', 'waiting');
  -- A parent's children, in id order (listing, counting).
  CREATE INDEX jobs_children ON jobs (parent_id, id) WHERE parent_id IS NOT NULL;
  -- Open children only: "does this parent still have an open child" is one probe, however many
  -- children it has and however many of them ended.
  CREATE INDEX jobs_open_children ON jobs (parent_id) WHERE parent_id IS NOT NULL AND state IN ('pending', 'queued', 'running', 'retrying', 'waiting');
  -- Children that failed or were cancelled (a failFast parent's backstop check), few by nature.
  CREATE INDEX jobs_failed_children ON jobs (parent_id) WHERE parent_id IS NOT NULL AND state IN ('failed', 'cancelled');
  -- Parents waiting for their children (the sweeper's backstop walks only these).
  CREATE INDEX jobs_waiting_parents ON jobs (id) WHERE state = 'waiting' AND wait_kind = 'children';
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
  `,
  // 4: schedules (cron): one row per (tenant, name); next_run_at is the tick not yet handled
  `
  CREATE TABLE schedules (
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    task TEXT NOT NULL,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    input TEXT,
    catch_up TEXT NOT NULL,
    overlap INTEGER NOT NULL,
    declared INTEGER NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    next_run_at INTEGER,
    last_run_at INTEGER,
    last_job_id TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
  ) WITHOUT ROWID;
  CREATE INDEX schedules_due ON schedules (next_run_at) WHERE paused = 0 AND next_run_at IS NOT NULL;
  `,
  // 5: retention: ended jobs by state and end time (the sweeper's deletion scan), signals by job
  // (deleted with their job). Partial on ended states: claims and transitions between open
  // states never touch it.
  `
  CREATE INDEX jobs_ended ON jobs (state, finished_at) WHERE state IN ('succeeded', 'expired', 'failed', 'cancelled');
  CREATE INDEX job_signals_job ON job_signals (job_id);
  `,
  // 6: limits and fairness (core/claim-plan.ts). The queue index leads with the tenant, so a
  // claim finds the tenants with queued jobs by a skip scan and reads each one's queue;
  // concurrency keys get their own queue and running indexes (partial: jobs without a key
  // never touch them); rate-limited types log their starts of the last window.
  `
  ALTER TABLE jobs ADD COLUMN ckey TEXT;
  DROP INDEX jobs_queued_by_type;
  CREATE INDEX jobs_queued_by_tenant ON jobs (type, tenant, priority, run_at, id) WHERE state = 'queued';
  DROP INDEX jobs_running;
  CREATE INDEX jobs_running ON jobs (type, tenant) WHERE state = 'running';
  CREATE INDEX jobs_queued_by_key ON jobs (type, ckey, priority, run_at, id) WHERE state = 'queued' AND ckey IS NOT NULL;
  CREATE INDEX jobs_running_by_key ON jobs (type, ckey) WHERE state = 'running' AND ckey IS NOT NULL;
  CREATE TABLE rate_starts (type TEXT NOT NULL, at INTEGER NOT NULL);
  CREATE INDEX rate_starts_type ON rate_starts (type, at);
  `,
  // 7: tenant quotas: a tenant's backlog (pending, queued, retrying) counted at submission, up to
  // its maxQueued (the count stops at the limit, so it costs O(limit) whatever the table holds).
  `
  CREATE INDEX jobs_tenant_backlog ON jobs (tenant) WHERE state IN ('pending', 'queued', 'retrying');
  `,
  // 8: dead letters: the attempt history (one row per run that ended without succeeding, keyed by
  // the run's lease; written by transitions.ts in the transition's own transaction), and failed
  // jobs by tenant, type and error code (the dead-letter groups, their pages and bulk filters).
  // error_code is error's code, kept by every transition that writes error: a column, not an
  // expression, so that the index covers the grouped listing (a tenth of its time, measured).
  // Filled here for failed jobs, the only ones read by it.
  `
  ALTER TABLE jobs ADD COLUMN error_code TEXT;
  UPDATE jobs SET error_code = json_extract(error, '$.code') WHERE state = 'failed' AND error IS NOT NULL;
  CREATE TABLE job_attempts (
    job_id TEXT NOT NULL,
    lease INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker_id TEXT,
    started_at INTEGER,
    ended_at INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    error TEXT,
    stack TEXT,
    PRIMARY KEY (job_id, lease)
  ) WITHOUT ROWID;
  CREATE INDEX jobs_dead_letters ON jobs (tenant, type, error_code, finished_at, id) WHERE state = 'failed';
  `,
  // 9: observability: stats kept as jobs change (counts by tenant, type and state; rates; run-time
  // buckets), by triggers (stats-schema.ts); the W3C trace context of a job's submit, continued by
  // its attempts' spans
  `${STATS_MIGRATION}
  ALTER TABLE jobs ADD COLUMN trace_parent TEXT;
  `,
  // 10: the worker's claims and ends count themselves, once per write, instead of through a row
  // trigger per job (stats-batch.ts, stats-schema.ts)
  STATS_BATCH_MIGRATION,
  // 11: what the sweeper found, cluster-wide: running jobs flagged stalled (a partial index) and
  // zombies reaped per minute (a trigger on the attempt rows); stats-schema.ts
  SWEEP_HEALTH_MIGRATION,
];
