/**
 * PostgreSQL schema, as numbered migrations. Everything lives in one schema of its own
 * (`longhaul` by default), so Longhaul shares a database with the application that uses it
 * (transactional enqueue needs that) without touching the application's tables.
 *
 * The applied versions are rows of `<schema>.migrations`. `migrate()` runs every pending
 * migration in one transaction under a transaction-level advisory lock, so several processes
 * on several machines may migrate at once: one applies, the others wait and find nothing to do.
 *
 * Released migrations never change; a change of schema or of a function is a new migration.
 * In the SQL below `{s}` is the quoted schema, `{ch}` the wake-up channel (see channelName).
 */
import { CLAIM_MIGRATION, claimFunction, claimPrologue } from './claim-sql.js';
import { WORKFLOW_MIGRATION } from './workflow-sql.js';
import { logAppend, logAppendFixed } from './log-sql.js';
import { applyTransitionsFunction, endSucceededFunction, ITEM_LOG_APPEND } from './transition-sql.js';
import { STATS_BATCH_MIGRATION, STATS_MIGRATION, statsDeleteFunction, statsUpdateFunction, SWEEP_HEALTH_MIGRATION } from './stats-schema.js';

/** A schema name we are willing to interpolate into SQL (it is also the channel name's prefix). */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,39}$/;

/** The LISTEN/NOTIFY channel that says "jobs may be claimable": payloads are always empty. */
export function channelName(schema: string): string {
  return `${schema}_wake`;
}

/** The migration texts with the schema and channel filled in. */
export function renderMigrations(schema: string): string[] {
  if (!SCHEMA_NAME.test(schema)) throw new Error(`invalid PostgreSQL schema name "${schema}": use lower-case letters, digits and _ (at most 40)`);
  return MIGRATIONS.map((sql) => sql.replaceAll('{s}', `"${schema}"`).replaceAll('{ch}', channelName(schema)).replaceAll('{name}', schema));
}

export const MIGRATIONS: readonly string[] = [
  // 1: jobs, their transition log, progress; the claim and transition functions.
  `
  CREATE TABLE {s}.jobs (
    id uuid PRIMARY KEY,
    tenant text COLLATE "C" NOT NULL,
    type text COLLATE "C" NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'queued', 'running', 'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired')),
    priority smallint NOT NULL,
    input json,
    metadata json,
    result json,
    error json,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
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
    updated_at bigint NOT NULL,
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
    -- The transition log, oldest first: entries [from, to, at, reason, attempt, workerId] as
    -- JSON arrays separated by commas, so that a transition appends its entry to the row it
    -- updates anyway (no row and no index entry of its own); '[' || log || ']' is a JSON array.
    log text NOT NULL
  ) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
  -- Partial indexes: a job entering a state adds an entry only to the index of that state.
  CREATE INDEX jobs_queued ON {s}.jobs (type, priority, run_at, id) WHERE state = 'queued';
  CREATE INDEX jobs_due ON {s}.jobs (run_at) WHERE state IN ('pending', 'retrying');
  CREATE INDEX jobs_running ON {s}.jobs (type) WHERE state = 'running';
  CREATE INDEX jobs_expiring ON {s}.jobs (expires_at) WHERE state = 'succeeded';
  CREATE INDEX jobs_tenant ON {s}.jobs (tenant, id);
  CREATE INDEX jobs_finished ON {s}.jobs (finished_at) WHERE finished_at IS NOT NULL;
  CREATE UNIQUE INDEX jobs_idempotency ON {s}.jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;

  -- Progress is rewritten a few times a second per running job: keeping it out of the jobs row
  -- keeps those writes from making new versions of job rows. UNLOGGED: no WAL; a crash of the
  -- server empties it (jobs, their state and results are unaffected).
  CREATE UNLOGGED TABLE {s}.progress (
    job_id uuid PRIMARY KEY,
    data json NOT NULL,
    updated_at bigint NOT NULL
  );

  -- Moves due pending/retrying jobs to queued (earliest first, skipping rows another
  -- transaction holds) and wakes idle workers when it moved any.
  CREATE FUNCTION {s}.promote_due(p_now bigint, p_limit integer) RETURNS integer
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_count integer;
  BEGIN
    WITH due AS (
      SELECT j.id, j.state FROM {s}.jobs j
      WHERE j.state IN ('pending', 'retrying') AND j.run_at <= p_now
      ORDER BY j.run_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'queued',
          updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
          log = ${logAppend('due.state', "'queued'", 'p_now', "'due'", 'j.attempts', 'NULL::text')}
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

  -- Compare-and-swap transitions. p_items is a JSON array of
  --   {o: ordinal, r: round, id, f: from, t: to, l: lease?, q: cancel flag?, why, w: worker,
  --    at, m: bit mask of patch fields, run_at, result, error, finished_at, expires_at,
  --    cancel_reason, stalled}
  -- Items of one round have distinct ids; a job named twice in a batch has its second item in
  -- the next round, so items apply in order. Returns the ordinals that applied.
  -- Mask bits: 1 run_at, 2 result, 4 error, 8 finished_at, 16 expires_at, 32 reset attempts,
  -- 64 refund attempt, 128 clear checkpoint, 256 request cancel, 512 clear cancel, 1024 stalled.
  CREATE FUNCTION {s}.apply_transitions(p_items json, p_rounds integer) RETURNS integer[]
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_applied integer[] := '{}';
    v_part integer[];
    v_wake boolean;
    v_any_wake boolean := false;
  BEGIN
    FOR v_round IN 1 .. p_rounds LOOP
      WITH item AS (
        SELECT * FROM json_to_recordset(p_items) AS x(
          o integer, r integer, id uuid, f text, t text, l integer, q boolean, why text, w text, at bigint, m integer,
          run_at bigint, result json, error json, finished_at bigint, expires_at bigint, cancel_reason text, stalled boolean)
        WHERE x.r = v_round
      ), moved AS (
        UPDATE {s}.jobs j
        SET state = i.t,
            log = ${ITEM_LOG_APPEND},
            updated_at = greatest(i.at, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
            run_at = CASE WHEN i.m & 1 <> 0 THEN i.run_at ELSE j.run_at END,
            result = CASE WHEN i.m & 2 <> 0 THEN i.result ELSE j.result END,
            error = CASE WHEN i.m & 4 <> 0 THEN i.error ELSE j.error END,
            finished_at = CASE WHEN i.m & 8 <> 0 THEN i.finished_at ELSE j.finished_at END,
            expires_at = CASE WHEN i.m & 16 <> 0 THEN i.expires_at ELSE j.expires_at END,
            attempts = CASE WHEN i.m & 32 <> 0 THEN 0 WHEN i.m & 64 <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
            checkpoint = CASE WHEN i.m & 128 <> 0 THEN NULL ELSE j.checkpoint END,
            cancel_requested = CASE WHEN i.m & 256 <> 0 THEN true WHEN i.m & 512 <> 0 THEN false ELSE j.cancel_requested END,
            cancel_reason = CASE WHEN i.m & 256 <> 0 THEN i.cancel_reason WHEN i.m & 512 <> 0 THEN NULL ELSE j.cancel_reason END,
            cancel_requested_at = CASE WHEN i.m & 256 <> 0 THEN i.at WHEN i.m & 512 <> 0 THEN NULL ELSE j.cancel_requested_at END,
            stalled = CASE WHEN i.m & 1024 <> 0 THEN i.stalled ELSE j.stalled END
        FROM item i
        WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
        RETURNING j.id, j.state AS to_state, j.run_at, i.o, i.at
      ), dropped AS (
        DELETE FROM {s}.progress p USING moved WHERE p.job_id = moved.id AND moved.to_state = 'expired'
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

  -- A worker's cycle in one call (one round trip, one transaction): apply its completions, then
  -- promote due jobs and claim up to p_limit queued jobs of p_types in queue order.
  --
  -- Per-type concurrency: for each limited type (p_limits[i] not null) the claim takes a
  -- transaction-level advisory lock on that type, then counts its running jobs in a new
  -- statement (so the count sees every claim committed before the lock was granted), and
  -- claims at most the room left. Claims of one limited type are therefore serialised across
  -- all workers, exactly; unlimited types take no lock and only skip each other's rows (SKIP
  -- LOCKED). p_types must be sorted, so that locks are always taken in the same order.
  --
  -- Rows: first one row per applied completion (only \`applied\`, its ordinal, is set), then one
  -- row per claimed job (\`applied\` is null).
  CREATE FUNCTION {s}.complete_and_claim(p_items json, p_rounds integer, p_worker text, p_types text[], p_limits integer[], p_limit integer, p_now bigint)
  RETURNS TABLE (
    applied integer, id uuid, tenant text, type text, state text, priority smallint, input text, metadata text, result text, error text,
    attempts integer, max_attempts integer, lease integer, worker_id text, cancel_requested boolean, cancel_reason text,
    cancel_requested_at bigint, stalled boolean, parent_id text, created_at bigint, started_at bigint, finished_at bigint,
    updated_at bigint, run_at bigint, expires_at bigint, heartbeat_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
    stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text, progress text)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  #variable_conflict use_column
  DECLARE
    v_done integer[];
    v_rooms integer[] := '{}';
    v_running integer;
    v_types integer := coalesce(array_length(p_types, 1), 0);
  BEGIN
    -- Under a stricter default isolation every statement here would share one snapshot: the
    -- running counts could miss claims committed while we waited for a type's lock.
${claimPrologue(false)}    FOR v_i IN 1 .. v_types LOOP
      IF p_limits[v_i] IS NULL THEN
        v_rooms := v_rooms || p_limit;
      ELSE
        PERFORM pg_advisory_xact_lock(hashtext('{name}:type-limit'), hashtext(p_types[v_i]));
        SELECT count(*) INTO v_running FROM {s}.jobs j WHERE j.state = 'running' AND j.type = p_types[v_i];
        v_rooms := v_rooms || greatest(0, least(p_limit, p_limits[v_i] - v_running));
      END IF;
    END LOOP;
    RETURN QUERY
    WITH cand AS (
      SELECT c.id FROM unnest(p_types, v_rooms) AS t(type, room)
      CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM {s}.jobs j
        WHERE j.state = 'queued' AND j.type = t.type
        ORDER BY j.priority, j.run_at, j.id
        LIMIT t.room
        FOR UPDATE SKIP LOCKED
      ) c
      ORDER BY c.priority, c.run_at, c.id
      LIMIT p_limit
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'running',
          lease = j.lease + 1,
          attempts = j.attempts + 1,
          worker_id = p_worker,
          started_at = p_now,
          heartbeat_at = p_now,
          stalled = false,
          log = ${logAppendFixed('queued', 'running', 'p_now', 'claimed', 'j.attempts + 1', 'p_worker')},
          updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1)
      FROM cand
      WHERE j.id = cand.id AND j.state = 'queued'
      RETURNING j.*
    )
    SELECT NULL::integer, m.id, m.tenant, m.type, m.state, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
      m.attempts, m.max_attempts, m.lease, m.worker_id, m.cancel_requested, m.cancel_reason,
      m.cancel_requested_at, m.stalled, m.parent_id, m.created_at, m.started_at, m.finished_at,
      m.updated_at, m.run_at, m.expires_at, m.heartbeat_at, m.timeout_ms, m.heartbeat_timeout_ms,
      m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key, p.data::text
    FROM moved m LEFT JOIN {s}.progress p ON p.job_id = m.id
    ORDER BY m.priority, m.run_at, m.id;
  END
  $fn$;
  `,
  // 2: result files, webhook targets and the webhook delivery log
  `
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
  CREATE TABLE {s}.job_webhooks (
    job_id uuid PRIMARY KEY,
    url text NOT NULL,
    secret text,
    pending boolean NOT NULL DEFAULT true,
    notified_finished_at bigint
  );
  CREATE INDEX job_webhooks_pending ON {s}.job_webhooks (job_id) WHERE pending;
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
  `,
  // 3: workflows: the journal, what a waiting job waits for, children, signals. promote_due
  // also queues due waiting jobs; complete_and_claim returns the new columns (its return type
  // changes, so it is dropped and created again; its body is otherwise migration 1's).
  WORKFLOW_MIGRATION,
  // 4: schedules (cron): one row per (tenant, name); next_run_at is the tick not yet handled.
  // input is JSON text, read back with the project's lossless reader like every other value.
  `
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
  `,
  // 5: retention: ended jobs by state and end time (the sweeper's deletion scan), signals by job
  // (deleted with their job). Partial on ended states: claims and transitions between open
  // states never touch it.
  `
  CREATE INDEX jobs_ended ON {s}.jobs (state, finished_at) WHERE state IN ('succeeded', 'expired', 'failed', 'cancelled');
  CREATE INDEX job_signals_job ON {s}.job_signals (job_id);
  `,
  // 6: limits and fairness: the claim applies core/claim-plan.ts's rules (see claim-sql.ts).
  CLAIM_MIGRATION,
  // 7: tenant quotas: a tenant's backlog (pending, queued, retrying) counted at submission, up to
  // its maxQueued (the count stops at the limit, so it costs O(limit) whatever the table holds).
  `
  CREATE INDEX jobs_tenant_backlog ON {s}.jobs (tenant) WHERE state IN ('pending', 'queued', 'retrying');
  `,
  // 8: retention 0 and dead letters, both in apply_transitions (and so in the worker's
  // complete_and_claim, which calls it). Retention 0: an item carrying d deletes its job, with the
  // same compare-and-swap, when the job owns nothing the eraser must handle; deleted items answer
  // their ordinal negated. Dead letters: the attempt history (one row per run that ended without
  // succeeding, keyed by the run's lease), written in the transition's own statement with the
  // item's stack and error_code; and failed jobs by tenant, type and error code (the dead-letter
  // groups, their pages and bulk filters).
  // error_code is error's code, kept by apply_transitions: a column, not an expression, so that
  // the grouped listing is an index-only scan. Filled here for failed jobs, the only ones read by it.
  `
  ALTER TABLE {s}.jobs ADD COLUMN error_code text COLLATE "C";
  UPDATE {s}.jobs SET error_code = error->>'code' WHERE state = 'failed' AND error IS NOT NULL;
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
  CREATE INDEX jobs_dead_letters ON {s}.jobs (tenant, type, error_code, finished_at, id) WHERE state = 'failed';

${applyTransitionsFunction(8)}  `,
  // 9: observability: stats kept as jobs change (counts by tenant, type and state; rates; run-time
  // buckets), by triggers that append to a change log the sweeper folds (stats-schema.ts); the W3C
  // trace context of a job's submit, continued by its attempts' spans
  `${STATS_MIGRATION}
  ALTER TABLE {s}.jobs ADD COLUMN trace_parent text;
  `,
  // 10: the worker's hot path made cheaper, same rules: the claim's fast path whatever the number of
  // types registered (claim-sql.ts), retention 0's deletes without per-job probes when nothing owns
  // rows (transition-sql.ts), and the stats change log written once per statement (stats-schema.ts).
  `${claimFunction(10)}
  ${applyTransitionsFunction(10)}
  ${STATS_BATCH_MIGRATION}
  `,
  // 11: what the sweeper found, cluster-wide: running jobs flagged stalled (a partial index) and
  // zombies reaped per minute (a trigger on the attempt rows); stats-schema.ts
  SWEEP_HEALTH_MIGRATION,
  // 12: the claim's fast path planned for each call, like the claim by id (claim-sql.ts FAST_CLAIM)
  claimFunction(12),
  // 13: a tenant's jobs by id without its running ones: a claim (queued -> running) then writes
  // no entry in it, one index entry fewer per claimed job (its job is found by jobs_running while
  // it runs; listings by tenant read both, see postgres-store.ts listJobs). Built under a new name,
  // then swapped: a write to jobs waits for the build (as for every index a migration creates).
  `
  CREATE INDEX jobs_tenant_idle ON {s}.jobs (tenant, id) WHERE state <> 'running';
  DROP INDEX {s}.jobs_tenant;
  ALTER INDEX {s}.jobs_tenant_idle RENAME TO jobs_tenant;
  `,
  // 14: retention 0's delete looks for a job's progress, signal and attempt rows only where it can
  // have some (transition-sql.ts)
  applyTransitionsFunction(14),
  // 15: the worker's cycle as claim_cycle, complete_and_claim's rules with every applied ordinal
  // returned in one row (claim-sql.ts); complete_and_claim stays for the processes of the previous
  // version until they are restarted
  claimFunction(15),
  // 16: a claim writes no log entry; the job's next change writes it, or none when the job is deleted
  // on its end (log-sql.ts pendingClaim; claim-sql.ts, transition-sql.ts). jobs_running holds only
  // running jobs under two or three keys, rewritten at every claim: its duplicates are not merged
  // (deduplication cost a claim about 0.9 µs per job and saves nothing in an index this small).
  `
  ALTER TABLE {s}.jobs ADD COLUMN claim_logged boolean NOT NULL DEFAULT true;
  ALTER INDEX {s}.jobs_running SET (deduplicate_items = off);
  ${claimFunction(16)}
  ${applyTransitionsFunction(16)}
  `,
  // 17: the claim's fast path planned once per session instead of at every call (claim-sql.ts
  // fastClaim): the same rules and the same result, 0.27 ms less per claim
  claimFunction(17),
  // 18: the worker's cycle as worker_cycle: the jobs it ended as succeeded and asks to delete
  // (retention 0) come as arrays instead of JSON (transition-sql.ts end_succeeded); claim_cycle
  // stays for the processes of the previous version until they are restarted
  `${endSucceededFunction()}
  ${claimFunction(18)}
  `,
  // 19: a rate-limited claim's time is never before the type's last logged start, so a claim that
  // read its clock before another but took the type's lock after it counts its window whole
  // (claim-rate-sql.ts); worker_cycle is replaced in place
  claimFunction(19),
  // 20: the claim and end_succeeded append their own change to job_changes and the statistics
  // triggers skip them; a job never claimed (lease 0) has no progress to look up
  // (self-count-sql.ts); worker_cycle and end_succeeded are replaced in place
  `${statsUpdateFunction(true)}
  ${statsDeleteFunction(true)}
  ${endSucceededFunction(20)}
  ${claimFunction(20)}
  `,
];
