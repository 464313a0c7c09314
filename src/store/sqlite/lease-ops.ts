/**
 * SqliteStore's lease-holder writes and reads (of the JobQueueStore in ../store.ts): heartbeats,
 * the cheap lease-and-cancel poll, progress and checkpoints. Each write is one IMMEDIATE
 * transaction of the store and applies only while the caller's lease is the job's current one
 * (state running).
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { Checkpoint } from '../../core/job.js';
import type { Progress } from '../../core/progress.js';
import type { HeartbeatResult, LeaseRef } from '../store.js';
import { logEntrySql, NEXT_UPDATED_AT, statementCache } from './sql.js';

/** The store's IMMEDIATE transaction (`rows`: about how many rows it writes, for the checkpointer). */
type Write = <T>(fn: () => T, rows?: number) => T;

export class SqliteLeaseOps {
  /** The store's statement cache (same connection). */
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async heartbeat(params: { items: LeaseRef[]; now: number }): Promise<HeartbeatResult[]> {
    if (params.items.length === 0) return [];
    return this.write(() => {
      const now = params.now;
      return params.items.map((ref) => {
        const row = this.stmt(
          "UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND lease = ? AND state = 'running' RETURNING cancel_requested, cancel_reason",
        ).get(now, ref.id, ref.lease) as { cancel_requested: number; cancel_reason: string | null } | undefined;
        return row
          ? { id: ref.id, ok: true, cancelRequested: row.cancel_requested === 1, cancelReason: row.cancel_reason }
          : { id: ref.id, ok: false, cancelRequested: false, cancelReason: null };
      });
    }, params.items.length);
  }

  async leaseStatus(params: { items: LeaseRef[] }): Promise<HeartbeatResult[]> {
    if (params.items.length === 0) return [];
    const rows = this.stmt(`SELECT id, lease, state, cancel_requested, cancel_reason FROM jobs WHERE id IN (SELECT value FROM json_each(?))`).all(
      JSON.stringify(params.items.map((i) => i.id)),
    ) as { id: string; lease: number; state: string; cancel_requested: number; cancel_reason: string | null }[];
    const byId = new Map(rows.map((r) => [r.id, r]));
    return params.items.map((ref) => {
      const r = byId.get(ref.id);
      const ok = r !== undefined && r.state === 'running' && r.lease === ref.lease;
      return { id: ref.id, ok, cancelRequested: ok && r.cancel_requested === 1, cancelReason: ok ? r.cancel_reason : null };
    });
  }

  async saveProgress(params: LeaseRef & { progress: Progress; now: number }): Promise<boolean> {
    return this.write(() => {
      const held = this.stmt("SELECT stalled FROM jobs WHERE id = ? AND lease = ? AND state = 'running'").get(params.id, params.lease) as
        | { stalled: number }
        | undefined;
      if (!held) return false;
      this.stmt(
        `INSERT INTO job_progress (job_id, data, updated_at) VALUES (?, ?, ?)
         ON CONFLICT(job_id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
      ).run(params.id, JSON.stringify(params.progress), params.now);
      if (held.stalled === 1) {
        this.stmt(
          `UPDATE jobs SET stalled = 0, updated_at = ${NEXT_UPDATED_AT}, log = ${logEntrySql("'running'", "'running'", 'attempts', "'progress resumed'", 'worker_id')} WHERE id = @id`,
        ).run({ id: params.id, at: params.now });
      }
      return true;
    });
  }

  async saveCheckpoint(params: LeaseRef & { checkpoint: Checkpoint; now: number }): Promise<boolean> {
    return this.write(
      () =>
        this.stmt("UPDATE jobs SET checkpoint = ? WHERE id = ? AND lease = ? AND state = 'running'").run(
          JSON.stringify({ version: params.checkpoint.version, data: params.checkpoint.data }),
          params.id,
          params.lease,
        ).changes === 1,
    );
  }
}
