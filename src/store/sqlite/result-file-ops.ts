/**
 * SqliteStore's part of the result-file contract (ResultFileStore in ../store.ts): the records
 * of the files a job's handler wrote (the bytes are in blob storage). Every write is one
 * IMMEDIATE transaction of the store, so a write under the job's lease sees the lease as it is
 * until commit.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { LeaseRef, ResultFileRecord } from '../store.js';
import { statementCache } from './sql.js';

/** The store's IMMEDIATE transaction (`rows`: about how many rows it writes, for the checkpointer). */
type Write = <T>(fn: () => T, rows?: number) => T;

export class SqliteResultFileOps {
  /** The store's statement cache (same connection). */
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async recordResult(params: LeaseRef & { file: Omit<ResultFileRecord, 'downloads'>; now: number }): Promise<boolean> {
    const f = params.file;
    return this.write(
      () =>
        this.stmt(
          `INSERT INTO job_results (job_id, name, seq, size, content_type, sha256, key, created_at)
           SELECT j.id, ?, (SELECT coalesce(max(r.seq), 0) + 1 FROM job_results r WHERE r.job_id = j.id), ?, ?, ?, ?, ?
           FROM jobs j WHERE j.id = ? AND j.lease = ? AND j.state = 'running'
           ON CONFLICT (job_id, name) DO UPDATE SET size = excluded.size, content_type = excluded.content_type,
             sha256 = excluded.sha256, key = excluded.key, created_at = excluded.created_at`,
        ).run(f.name, f.size, f.contentType, f.sha256, f.key, params.now, params.id, params.lease).changes === 1,
    );
  }

  async unrecordResult(params: LeaseRef & { name: string }): Promise<boolean> {
    return this.write(() => {
      const held = this.stmt("SELECT 1 FROM jobs WHERE id = ? AND lease = ? AND state = 'running'").get(params.id, params.lease);
      if (!held) return false;
      this.stmt('DELETE FROM job_results WHERE job_id = ? AND name = ?').run(params.id, params.name);
      return true;
    });
  }

  async listResults(params: { ids: readonly string[] }): Promise<Map<string, ResultFileRecord[]>> {
    const out = new Map<string, ResultFileRecord[]>();
    if (params.ids.length === 0) return out;
    const rows = this.stmt(
      `SELECT job_id, name, size, content_type, sha256, key, downloads FROM job_results
       WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY job_id, seq`,
    ).all(JSON.stringify(params.ids)) as { job_id: string; name: string; size: number; content_type: string; sha256: string; key: string; downloads: number }[];
    for (const r of rows) {
      const list = out.get(r.job_id) ?? [];
      list.push({ name: r.name, size: r.size, contentType: r.content_type, sha256: r.sha256, key: r.key, downloads: r.downloads });
      out.set(r.job_id, list);
    }
    return out;
  }

  async deleteResults(params: { id: string }): Promise<void> {
    this.write(() => this.stmt('DELETE FROM job_results WHERE job_id = ?').run(params.id));
  }

  async countDownload(params: { id: string; name: string }): Promise<void> {
    this.write(() => this.stmt('UPDATE job_results SET downloads = downloads + 1 WHERE job_id = ? AND name = ?').run(params.id, params.name));
  }
}
