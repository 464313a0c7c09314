/**
 * What the worker's claim function returns per claimed job (claim-sql.ts claimFunction): its
 * result columns, and the select of the claimed rows, per migration. rows.ts reads them.
 */
import { progressProbe } from './self-count-sql.js';

/**
 * Columns the claim returns per job (and per applied transition, with only `applied` set; from
 * version 15, one row with every applied ordinal in `applied`).
 */
export const returns = (version: number) =>
  version >= 18
    ? `RETURNS TABLE (
    applied integer[], id uuid, tenant text, type text, priority smallint, input text, metadata text, result text, error text,
    attempts integer, max_attempts integer, lease integer, cancel_requested boolean, cancel_reason text,
    cancel_requested_at bigint, parent_id text, created_at bigint, finished_at bigint,
    updated_at bigint, run_at bigint, expires_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
    stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text,
    workflow text, children_total integer, progress text, wake_at bigint)`
    : `RETURNS TABLE (
    applied ${version >= 15 ? 'integer[]' : 'integer'}, id uuid, tenant text, type text, state text, priority smallint, input text, metadata text, result text, error text,
    attempts integer, max_attempts integer, lease integer, worker_id text, cancel_requested boolean, cancel_reason text,
    cancel_requested_at bigint, stalled boolean, parent_id text, created_at bigint, started_at bigint, finished_at bigint,
    updated_at bigint, run_at bigint, expires_at bigint, heartbeat_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
    stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text,
    workflow text, wait_kind text, wait_name text, wait_fail_fast boolean, children_total integer, progress text, wake_at bigint)`;

/**
 * The claimed rows (`moved`) as the function returns them, with their progress and, in the last
 * column (`wake_at`, which only the wake row uses otherwise), `at`: from version 19, the claim's
 * time when the claim by id may have moved it past the worker's clock (claim-rate-sql.ts;
 * readers of version 18 ignore that column on a job's row). From version 18
 * without what the claim itself set (state running, the worker, started and heartbeat at the
 * claim's time, not stalled) or what only a waiting job has (its wait): the reader fills those in
 * (rows.ts claimedRowToJob), and each row is a quarter fewer values to write and to parse.
 */
export const claimedRows = (version: number, at = 'NULL::bigint') =>
  version >= 18
    ? `      SELECT NULL::integer[], m.id, m.tenant, m.type, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
        m.attempts, m.max_attempts, m.lease, m.cancel_requested, m.cancel_reason,
        m.cancel_requested_at, m.parent_id, m.created_at, m.finished_at,
        m.updated_at, m.run_at, m.expires_at, m.timeout_ms, m.heartbeat_timeout_ms,
        m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key,
        m.workflow::text, m.children_total, ${progressProbe(version, 'm', 'data::text', 'm.lease - 1')}, ${at}
      FROM moved m
`
    : `      SELECT NULL::${version >= 15 ? 'integer[]' : 'integer'}, m.id, m.tenant, m.type, m.state, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
        m.attempts, m.max_attempts, m.lease, m.worker_id, m.cancel_requested, m.cancel_reason,
        m.cancel_requested_at, m.stalled, m.parent_id, m.created_at, m.started_at, m.finished_at,
        m.updated_at, m.run_at, m.expires_at, m.heartbeat_at, m.timeout_ms, m.heartbeat_timeout_ms,
        m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key,
        m.workflow::text, m.wait_kind, m.wait_name, m.wait_fail_fast, m.children_total, ${
          version >= 16 ? '(SELECT p.data::text FROM {s}.progress p WHERE p.job_id = m.id)' : 'p.data::text'
        }, NULL::bigint
      FROM moved m${version >= 16 ? '' : ' LEFT JOIN {s}.progress p ON p.job_id = m.id'}
`;
