/**
 * PostgresStore's lease-holder writes and reads (of the JobQueueStore in ../store.ts): heartbeats,
 * the cheap lease-and-cancel poll, progress and checkpoints. Each is one statement, and writes
 * only while the caller's lease is the job's current one (state running).
 */
import type pg from 'pg';
import { compareIds, isUuid } from '../../core/ids.js';
import type { Checkpoint } from '../../core/job.js';
import type { Progress } from '../../core/progress.js';
import type { HeartbeatResult, LeaseRef } from '../store.js';
import { logAppend, withPendingClaim } from './log-sql.js';

/** The store's rows in array mode, by a named (prepared) statement. */
type Rows = (name: string, text: string, values: unknown[]) => Promise<unknown[][]>;

function leaseKey(id: string, lease: number): string {
  return `${id}#${lease}`;
}

/** Statement texts, built once with the schema filled in. */
function statements(s: string) {
  return {
    heartbeat: `UPDATE ${s}.jobs j SET heartbeat_at = $3
        FROM unnest($1::uuid[], $2::integer[]) AS i(id, lease)
        WHERE j.id = i.id AND j.lease = i.lease AND j.state = 'running'
        RETURNING j.id::text, j.lease, j.cancel_requested, j.cancel_reason`,
    leaseStatus: `SELECT j.id::text, j.lease, j.state, j.cancel_requested, j.cancel_reason FROM ${s}.jobs j WHERE j.id = ANY($1::uuid[])`,
    // The job row is locked FOR SHARE: a transition that takes the lease away waits for this
    // statement, or this statement sees its result and writes nothing.
    progress: `
        WITH held AS (
          SELECT j.id, j.stalled FROM ${s}.jobs j WHERE j.id = $1 AND j.lease = $2 AND j.state = 'running' FOR SHARE
        ), saved AS (
          INSERT INTO ${s}.progress (job_id, data, updated_at) SELECT held.id, $3::json, $4 FROM held
          ON CONFLICT (job_id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at
          RETURNING job_id
        ), unstalled AS (
          UPDATE ${s}.jobs j SET stalled = false, updated_at = greatest($4::bigint + 1, j.updated_at + 1),
            log = ${withPendingClaim(logAppend("'running'", "'running'", '$4::bigint', "'progress resumed'", 'j.attempts', 'j.worker_id'))}, claim_logged = true
          FROM held WHERE j.id = held.id AND held.stalled
        )
        SELECT count(*)::integer FROM saved`,
    checkpoint: `UPDATE ${s}.jobs SET checkpoint = $3::json WHERE id = $1 AND lease = $2 AND state = 'running'`,
  };
}

export class PgLeaseOps {
  private readonly sql: ReturnType<typeof statements>;

  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    s: string,
    private readonly rows: Rows,
  ) {
    this.sql = statements(s);
  }

  async heartbeat(params: { items: LeaseRef[]; now: number }): Promise<HeartbeatResult[]> {
    if (params.items.length === 0) return [];
    const refs = [...new Map(params.items.filter((i) => isUuid(i.id)).map((i) => [leaseKey(i.id, i.lease), i])).values()].sort((a, b) => compareIds(a.id, b.id));
    const held = new Map<string, { cancelRequested: boolean; cancelReason: string | null }>();
    if (refs.length > 0) {
      const rows = await this.rows('heartbeat', this.sql.heartbeat, [refs.map((r) => r.id), refs.map((r) => r.lease), params.now]);
      for (const r of rows) held.set(leaseKey(r[0] as string, Number(r[1])), { cancelRequested: r[2] === true, cancelReason: (r[3] as string | null) ?? null });
    }
    return params.items.map((ref) => {
      const h = held.get(leaseKey(ref.id, ref.lease));
      return h ? { id: ref.id, ok: true, ...h } : { id: ref.id, ok: false, cancelRequested: false, cancelReason: null };
    });
  }

  async leaseStatus(params: { items: LeaseRef[] }): Promise<HeartbeatResult[]> {
    if (params.items.length === 0) return [];
    const ids = [...new Set(params.items.map((i) => i.id).filter(isUuid))];
    const byId = new Map<string, unknown[]>();
    if (ids.length > 0) for (const r of await this.rows('lease_status', this.sql.leaseStatus, [ids])) byId.set(r[0] as string, r);
    return params.items.map((ref) => {
      const r = byId.get(ref.id);
      const ok = r !== undefined && r[2] === 'running' && Number(r[1]) === ref.lease;
      return { id: ref.id, ok, cancelRequested: ok && r[3] === true, cancelReason: ok ? ((r[4] as string | null) ?? null) : null };
    });
  }

  async saveProgress(params: LeaseRef & { progress: Progress; now: number }): Promise<boolean> {
    if (!isUuid(params.id)) return false;
    const [row] = await this.rows('progress', this.sql.progress, [params.id, params.lease, JSON.stringify(params.progress), params.now]);
    return Number(row?.[0] ?? 0) === 1;
  }

  async saveCheckpoint(params: LeaseRef & { checkpoint: Checkpoint; now: number }): Promise<boolean> {
    if (!isUuid(params.id)) return false;
    const res = await this.pool.query({
      name: 'lh_checkpoint',
      text: this.sql.checkpoint,
      values: [params.id, params.lease, JSON.stringify({ version: params.checkpoint.version, data: params.checkpoint.data })],
    });
    return res.rowCount === 1;
  }
}
