/**
 * `apply_transitions(items, rounds)`: the store's one writer of job state changes (the worker's
 * claim_cycle and worker_cycle call it too). Each item is a compare-and-swap decided by core/transitions.ts;
 * see migration 8 in schema.ts for what it writes. Migration 10 replaced it with the same rules,
 * cheaper for retention 0: whether any job owns results, webhooks or children is asked once per
 * call instead of once per deleted job, and a round whose items all deleted their job skips the
 * UPDATE (a second parse of the items and a probe per deleted id). Migration 14: a deleted job's
 * progress and signal rows are looked for only when those tables hold any, and its attempt rows only
 * when it ran under an earlier lease (1.6 µs per deleted job, a third of the delete, when none is).
 */
import { logAppend, withPendingClaim } from './log-sql.js';
import { deleteCountedCte, selfCounted } from './self-count-sql.js';

/** The log entry of item `i` applied to row `j` (the attempt after a reset or a refund). */
export const ITEM_LOG_APPEND = logAppend(
  'i.f',
  'i.t',
  'i.at',
  'i.why',
  'CASE WHEN i.m & 32 <> 0 THEN 0 WHEN i.m & 64 <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END',
  'i.w',
);

/**
 * Retention 0's checks, asked once per call before deleting ended jobs: whether any job owns rows
 * the eraser must handle (when none does, the common case, the DELETE skips its per-job probes),
 * and from migration 14 whether any has progress or signal rows.
 */
function ownerChecks(v14: boolean): string {
  return `      -- Whether any job owns rows the eraser must handle, asked once per call: when none does
      -- (the common case), the DELETE below skips its per-job probes.
      v_owners := EXISTS (SELECT 1 FROM {s}.job_results) OR EXISTS (SELECT 1 FROM {s}.job_webhooks) OR EXISTS (SELECT 1 FROM {s}.webhook_deliveries);
      -- (Not EXISTS, which drops the ORDER BY and may scan the table: this stays on jobs_children.)
      v_parents := (SELECT c.parent_id FROM {s}.jobs c WHERE c.parent_id IS NOT NULL ORDER BY c.parent_id LIMIT 1) IS NOT NULL;${v14 ? `
      -- The same for progress and signals: a deleted job's rows there are looked for only when some job has any.
      v_progress := EXISTS (SELECT 1 FROM {s}.progress);
      v_signals := EXISTS (SELECT 1 FROM {s}.job_signals);` : ''}`;
}

/**
 * The delete of ended jobs (retention 0) and of their rows, as CTEs following a CTE `item` with
 * columns o (ordinal), id, f (from), l (lease or null) and q (cancel flag or null): `gone` holds
 * the deleted jobs (id, o, and from migration 14 their lease), when each still was in state f
 * under lease l and owned nothing the eraser must handle (result files, a webhook target or
 * deliveries, a parent, children).
 */
function goneChain(version: number, selfCount = false): string {
  const v10 = version >= 10;
  const v14 = version >= 14;
  return `        ), gone AS (
          DELETE FROM {s}.jobs j USING item i
          WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
            AND j.parent_id IS NULL${v10 ? `
            AND (NOT v_owners OR (NOT EXISTS (SELECT 1 FROM {s}.job_results r WHERE r.job_id = j.id)
              AND NOT EXISTS (SELECT 1 FROM {s}.job_webhooks w WHERE w.job_id = j.id)
              AND NOT EXISTS (SELECT 1 FROM {s}.webhook_deliveries dl WHERE dl.job_id = j.id)))
            AND (NOT v_parents OR NOT EXISTS (SELECT 1 FROM {s}.jobs c WHERE c.parent_id = j.id::text))` : `
            AND NOT EXISTS (SELECT 1 FROM {s}.job_results r WHERE r.job_id = j.id)
            AND NOT EXISTS (SELECT 1 FROM {s}.job_webhooks w WHERE w.job_id = j.id)
            AND NOT EXISTS (SELECT 1 FROM {s}.webhook_deliveries dl WHERE dl.job_id = j.id)
            AND NOT EXISTS (SELECT 1 FROM {s}.jobs c WHERE c.parent_id = j.id::text)`}
          RETURNING j.id, i.o${v14 ? ', j.lease' : ''}${selfCount ? ', j.tenant, j.type, j.state' : ''}
${selfCount ? deleteCountedCte : ''}        ), gone_progress AS (
          DELETE FROM {s}.progress p USING gone WHERE ${v14 ? 'v_progress AND ' : ''}p.job_id = gone.id
        ), gone_signals AS (
          DELETE FROM {s}.job_signals g USING gone WHERE ${v14 ? 'v_signals AND ' : ''}g.job_id = gone.id
        ), gone_attempts AS (${v14 ? `
          -- Attempt rows are those of runs that ended before this one, each under its own lease:
          -- a job ending its first lease has none.` : ''}
          DELETE FROM {s}.job_attempts a USING gone WHERE ${v14 ? 'gone.lease > 1 AND ' : ''}a.job_id = gone.id
        )
`;
}

export function applyTransitionsFunction(version: 8 | 10 | 14 | 16): string {
  const v10 = version >= 10;
  const v14 = version >= 14;
  const v16 = version >= 16;
  return `  CREATE OR REPLACE FUNCTION {s}.apply_transitions(p_items json, p_rounds integer) RETURNS integer[]
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_applied integer[] := '{}';
    v_part integer[];
    v_wake boolean;
    v_any_wake boolean := false;
    v_deletes boolean;${v10 ? `
    v_items integer;
    v_owners boolean;
    v_parents boolean;` : ''}${v14 ? `
    v_progress boolean;
    v_signals boolean;` : ''}
  BEGIN
    -- A text search, cheaper than parsing: most calls carry no d (a false positive, such as a
    -- result holding "d":true, only costs the DELETE below finding nothing).
    v_deletes := strpos(p_items::text, '"d":true') > 0;${v10 ? `
    IF v_deletes THEN
${ownerChecks(v14)}
    END IF;` : ''}
    FOR v_round IN 1 .. p_rounds LOOP
      IF v_deletes THEN
        -- Items with d (retention 0) end their job by deleting it, with the same compare-and-swap,
        -- when it owns nothing the eraser must handle (result files, a webhook target or
        -- deliveries, a parent, children); their ordinals come back negative. The others, and
        -- those whose job owns such rows, are applied by the UPDATE below (a deleted row no longer
        -- matches it).
        WITH ${v10 ? `round AS MATERIALIZED (
          SELECT * FROM json_to_recordset(p_items) AS x(o integer, r integer, id uuid, f text, t text, l integer, q boolean, d boolean)
          WHERE x.r = v_round
        ), item AS (
          SELECT * FROM round x WHERE x.d AND x.t IN ('succeeded', 'failed', 'cancelled')` : `item AS (
          SELECT * FROM json_to_recordset(p_items) AS x(o integer, r integer, id uuid, f text, t text, l integer, q boolean, d boolean)
          WHERE x.r = v_round AND x.d AND x.t IN ('succeeded', 'failed', 'cancelled')`}
${goneChain(version)}        SELECT array_agg(-gone.o)${v10 ? ', (SELECT count(*) FROM round)' : ''} INTO v_part${v10 ? ', v_items' : ''} FROM gone;
        v_applied := v_applied || coalesce(v_part, '{}');${v10 ? `
        -- Every item of the round deleted its job: nothing is left for the UPDATE (which would parse
        -- the items again and probe each deleted id).
        CONTINUE WHEN coalesce(cardinality(v_part), 0) = v_items;` : ''}
      END IF;
      WITH item AS (
        SELECT * FROM json_to_recordset(p_items) AS x(
          o integer, r integer, id uuid, f text, t text, l integer, q boolean, why text, w text, at bigint, m integer,
          run_at bigint, result json, error json, finished_at bigint, expires_at bigint, cancel_reason text, stalled boolean, stack text)
        WHERE x.r = v_round
      ), moved AS (
        UPDATE {s}.jobs j
        SET state = i.t,
            log = ${v16 ? withPendingClaim(ITEM_LOG_APPEND) : ITEM_LOG_APPEND},${v16 ? `
            claim_logged = true,` : ''}
            updated_at = greatest(i.at, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
            run_at = CASE WHEN i.m & 1 <> 0 THEN i.run_at ELSE j.run_at END,
            result = CASE WHEN i.m & 2 <> 0 THEN i.result ELSE j.result END,
            error = CASE WHEN i.m & 4 <> 0 THEN i.error ELSE j.error END,
            error_code = CASE WHEN i.m & 4 <> 0 THEN i.error->>'code' ELSE j.error_code END,
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
        RETURNING j.id, j.state AS to_state, j.run_at, i.o, i.at, i.f, i.m, i.why, i.error, i.stack, j.lease, j.attempts, j.worker_id, j.started_at
      ), dropped AS (
        DELETE FROM {s}.progress p USING moved WHERE p.job_id = moved.id AND moved.to_state = 'expired'
      ), attempted AS (
        -- An attempt that ended without succeeding (core/transitions.ts endsRecordedAttempt): the
        -- refunded attempt of a hand-back or a wait keeps its number.
        INSERT INTO {s}.job_attempts (job_id, lease, attempt, worker_id, started_at, ended_at, outcome, reason, error, stack)
        SELECT moved.id, moved.lease, moved.attempts + CASE WHEN moved.m & 64 <> 0 THEN 1 ELSE 0 END, moved.worker_id, moved.started_at,
          moved.at, moved.to_state, moved.why, CASE WHEN moved.m & 4 <> 0 THEN moved.error END, moved.stack
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
`;
}

/**
 * Migration 18: the jobs a worker ended as succeeded and asks to delete (retention 0, the write
 * `succeed` builds with `deleteOnEnd`), as parallel arrays instead of JSON items: ids, leases,
 * ordinals, end times, expiry times and results as JSON text. Parsing them costs the server less
 * than the JSON (validated on input, then read again by json_to_recordset), and encoding them
 * costs the worker less. Each job is deleted as apply_transitions deletes one (the same
 * compare-and-swap and the same checks, `goneChain`); those it may not delete (they own rows the
 * eraser must handle) or whose lease moved on go through apply_transitions as the JSON items the
 * worker would have sent, so they are kept as succeeded, or refused. Deleted ordinals come back
 * negated, like apply_transitions's.
 */
export function endSucceededFunction(version: 18 | 20 = 18): string {
  // Version 20: the delete appends its own change to job_changes (self-count-sql.ts).
  const v20 = version >= 20;
  return `  CREATE ${v20 ? 'OR REPLACE ' : ''}FUNCTION {s}.end_succeeded(p_ids uuid[], p_leases integer[], p_ords integer[], p_ats bigint[], p_expires bigint[], p_results text[], p_worker text)
  RETURNS integer[]
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_done integer[];
    v_rest json;
    v_owners boolean;
    v_parents boolean;
    v_progress boolean;
    v_signals boolean;
  BEGIN
${ownerChecks(true)}
    -- (The ids come sorted: rows are locked in the same order as apply_transitions locks them.)
${v20 ? `    PERFORM ${selfCounted(true)};
` : ''}    WITH item AS (
      SELECT x.o, x.id, 'running'::text AS f, x.l, NULL::boolean AS q FROM unnest(p_ords, p_ids, p_leases) AS x(o, id, l)
${goneChain(18, v20)}    SELECT array_agg(-gone.o) INTO v_done FROM gone;
${v20 ? `    PERFORM ${selfCounted(false)};
` : ''}    IF coalesce(cardinality(v_done), 0) < cardinality(p_ids) THEN
      -- The others, as the worker's JSON items (core/transitions.ts succeed; mask 154: result,
      -- finished_at, expires_at, clear checkpoint): kept as succeeded, or refused.
      SELECT json_agg(json_build_object('o', x.o, 'r', 1, 'id', x.id, 'f', 'running', 't', 'succeeded', 'l', x.l, 'why', 'completed',
          'w', p_worker, 'at', x.at, 'm', 154, 'result', x.result::json, 'finished_at', x.at, 'expires_at', x.expires) ORDER BY x.id)
        INTO v_rest
        FROM unnest(p_ords, p_ids, p_leases, p_ats, p_expires, p_results) AS x(o, id, l, at, expires, result)
        WHERE -x.o <> ALL (coalesce(v_done, '{}'));
      v_done := coalesce(v_done, '{}') || {s}.apply_transitions(v_rest, 1);
    END IF;
    RETURN coalesce(v_done, '{}');
  END
  $fn$;
`;
}
