/**
 * PostgreSQL migration 3: workflows: the journal, what a waiting job waits for, children,
 * signals. promote_due also queues due waiting jobs; complete_and_claim returns the new columns
 * (its return type changes, so it is dropped and created again; its body is otherwise
 * migration 1's). Released: it never changes (schema.ts).
 */
import { claimPrologue } from './claim-sql.js';
import { logAppend, logAppendFixed } from './log-sql.js';

export const WORKFLOW_MIGRATION = `
  ALTER TABLE {s}.jobs
    ADD COLUMN workflow json,
    ADD COLUMN wait_kind text,
    ADD COLUMN wait_name text,
    ADD COLUMN wait_key text,
    ADD COLUMN wait_fail_fast boolean NOT NULL DEFAULT false,
    ADD COLUMN children_total integer NOT NULL DEFAULT 0;
  -- Waiting jobs come due like pending and retrying ones (a sleep, a signal's timeout); a wait
  -- with no time limit has run_at = NEVER and never does.
  DROP INDEX {s}.jobs_due;
  CREATE INDEX jobs_due ON {s}.jobs (run_at) WHERE state IN ('pending', 'retrying', 'waiting');
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

  CREATE OR REPLACE FUNCTION {s}.promote_due(p_now bigint, p_limit integer) RETURNS integer
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
          log = ${logAppend('due.state', "'queued'", 'p_now', "CASE due.state WHEN 'waiting' THEN 'wait over' ELSE 'due' END", 'j.attempts', 'NULL::text')}
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

  DROP FUNCTION {s}.complete_and_claim(json, integer, text, text[], integer[], integer, bigint);
  CREATE FUNCTION {s}.complete_and_claim(p_items json, p_rounds integer, p_worker text, p_types text[], p_limits integer[], p_limit integer, p_now bigint)
  RETURNS TABLE (
    applied integer, id uuid, tenant text, type text, state text, priority smallint, input text, metadata text, result text, error text,
    attempts integer, max_attempts integer, lease integer, worker_id text, cancel_requested boolean, cancel_reason text,
    cancel_requested_at bigint, stalled boolean, parent_id text, created_at bigint, started_at bigint, finished_at bigint,
    updated_at bigint, run_at bigint, expires_at bigint, heartbeat_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
    stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text,
    workflow text, wait_kind text, wait_name text, wait_fail_fast boolean, children_total integer, progress text)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  #variable_conflict use_column
  DECLARE
    v_done integer[];
    v_rooms integer[] := '{}';
    v_running integer;
    v_types integer := coalesce(array_length(p_types, 1), 0);
    v_ids uuid[];
  BEGIN
${claimPrologue(false)}    FOR v_i IN 1 .. v_types LOOP
      IF p_limits[v_i] IS NULL THEN
        v_rooms := v_rooms || p_limit;
      ELSE
        PERFORM pg_advisory_xact_lock(hashtext('{name}:type-limit'), hashtext(p_types[v_i]));
        SELECT count(*) INTO v_running FROM {s}.jobs j WHERE j.state = 'running' AND j.type = p_types[v_i];
        v_rooms := v_rooms || greatest(0, least(p_limit, p_limits[v_i] - v_running));
      END IF;
    END LOOP;
    -- The candidates first (locked: they stay queued until this transaction ends), then the
    -- claim by primary key, planned for each call (EXECUTE): this function's generic plans are
    -- made once per connection, and an UPDATE joined to the candidates kept the plan made when
    -- the table was nearly empty, one that scans every queued job per claim once there are
    -- 100,000 (a worker started before a big spawn or enqueue: seconds per claim).
    SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id) INTO v_ids FROM (
      SELECT c.id, c.priority, c.run_at FROM unnest(p_types, v_rooms) AS t(type, room)
      CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM {s}.jobs j
        WHERE j.state = 'queued' AND j.type = t.type
        ORDER BY j.priority, j.run_at, j.id
        LIMIT t.room
        FOR UPDATE SKIP LOCKED
      ) c
      ORDER BY c.priority, c.run_at, c.id
      LIMIT p_limit
    ) c;
    IF v_ids IS NULL THEN
      RETURN;
    END IF;
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
          log = ${logAppendFixed('queued', 'running', '$3', 'claimed', 'j.attempts + 1', '$2')},
          updated_at = greatest($3, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1)
      WHERE j.id = ANY($1)
      RETURNING j.*
    )
    SELECT NULL::integer, m.id, m.tenant, m.type, m.state, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
      m.attempts, m.max_attempts, m.lease, m.worker_id, m.cancel_requested, m.cancel_reason,
      m.cancel_requested_at, m.stalled, m.parent_id, m.created_at, m.started_at, m.finished_at,
      m.updated_at, m.run_at, m.expires_at, m.heartbeat_at, m.timeout_ms, m.heartbeat_timeout_ms,
      m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key,
      m.workflow::text, m.wait_kind, m.wait_name, m.wait_fail_fast, m.children_total, p.data::text
    FROM moved m LEFT JOIN {s}.progress p ON p.job_id = m.id
    ORDER BY m.priority, m.run_at, m.id
    $q$ USING v_ids, p_worker, p_now;
  END
  $fn$;
  `;
