/**
 * PostgresStore's part of the result-file contract (ResultFileStore in ../store.ts): the records
 * of the files a job's handler wrote (the bytes are in blob storage). Writes under the job's
 * lease lock the job row FOR SHARE, so a transition that takes the lease away waits for them, or
 * they see its result and write nothing.
 */
import type pg from 'pg';
import { isUuid } from '../../core/ids.js';
import type { LeaseRef, ResultFileRecord } from '../store.js';

/** The store's rows in array mode, by a named (prepared) statement. */
type Rows = (name: string, text: string, values: unknown[]) => Promise<unknown[][]>;

export class PgResultFileOps {
  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
    private readonly rows: Rows,
  ) {}

  async recordResult(params: LeaseRef & { file: Omit<ResultFileRecord, 'downloads'>; now: number }): Promise<boolean> {
    if (!isUuid(params.id)) return false;
    const f = params.file;
    const s = this.s;
    // The job row is locked FOR SHARE: a transition taking the lease away waits, or this sees it.
    const res = await this.pool.query(
      `WITH held AS (SELECT j.id FROM ${s}.jobs j WHERE j.id = $1 AND j.lease = $2 AND j.state = 'running' FOR SHARE)
       INSERT INTO ${s}.job_results (job_id, name, seq, size, content_type, sha256, key, created_at)
       SELECT held.id, $3, (SELECT coalesce(max(r.seq), 0) + 1 FROM ${s}.job_results r WHERE r.job_id = held.id), $4, $5, $6, $7, $8 FROM held
       ON CONFLICT (job_id, name) DO UPDATE SET size = excluded.size, content_type = excluded.content_type,
         sha256 = excluded.sha256, key = excluded.key, created_at = excluded.created_at`,
      [params.id, params.lease, f.name, f.size, f.contentType, f.sha256, f.key, params.now],
    );
    return res.rowCount === 1;
  }

  async unrecordResult(params: LeaseRef & { name: string }): Promise<boolean> {
    if (!isUuid(params.id)) return false;
    const s = this.s;
    const res = await this.pool.query(
      `WITH held AS (SELECT j.id FROM ${s}.jobs j WHERE j.id = $1 AND j.lease = $2 AND j.state = 'running' FOR SHARE),
       gone AS (DELETE FROM ${s}.job_results r USING held WHERE r.job_id = held.id AND r.name = $3)
       SELECT count(*)::integer FROM held`,
      [params.id, params.lease, params.name],
    );
    return Number(res.rows[0]?.count ?? 0) === 1;
  }

  async listResults(params: { ids: readonly string[] }): Promise<Map<string, ResultFileRecord[]>> {
    const out = new Map<string, ResultFileRecord[]>();
    const ids = params.ids.filter(isUuid);
    if (ids.length === 0) return out;
    const rows = await this.rows(
      'list_results',
      `SELECT job_id::text, name, size, content_type, sha256, key, downloads FROM ${this.s}.job_results
       WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, seq`,
      [ids],
    );
    for (const r of rows) {
      const jobId = r[0] as string;
      const list = out.get(jobId) ?? [];
      list.push({ name: r[1] as string, size: Number(r[2]), contentType: r[3] as string, sha256: r[4] as string, key: r[5] as string, downloads: Number(r[6]) });
      out.set(jobId, list);
    }
    return out;
  }

  async deleteResults(params: { id: string }): Promise<void> {
    if (!isUuid(params.id)) return;
    await this.pool.query(`DELETE FROM ${this.s}.job_results WHERE job_id = $1`, [params.id]);
  }

  async countDownload(params: { id: string; name: string }): Promise<void> {
    if (!isUuid(params.id)) return;
    await this.pool.query(`UPDATE ${this.s}.job_results SET downloads = downloads + 1 WHERE job_id = $1 AND name = $2`, [params.id, params.name]);
  }
}
