/**
 * PostgresStore's part of the API-key contract (ApiKeyStore in ../api-key-store.ts): one
 * statement per operation.
 */
import type pg from 'pg';
import type { ApiKeyRecord } from '../../core/api-keys.js';
import type { ApiKeyStore } from '../api-key-store.js';

/** bigint columns arrive as strings from pg. */
function num(v: unknown): number | null {
  return v === null || v === undefined ? null : Number(v);
}

function toRecord(r: Record<string, unknown>): ApiKeyRecord {
  return {
    id: r.id as string,
    tenant: r.tenant as string,
    admin: r.admin === true,
    hash: r.hash as string,
    createdAt: num(r.created_at) ?? 0,
    lastUsedAt: num(r.last_used_at),
    revokedAt: num(r.revoked_at),
  };
}

export class PgApiKeyOps implements ApiKeyStore {
  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
  ) {}

  async insertApiKey(params: { key: ApiKeyRecord }): Promise<boolean> {
    const k = params.key;
    const r = await this.pool.query(
      `INSERT INTO ${this.s}.api_keys (id, tenant, admin, hash, created_at, last_used_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
      [k.id, k.tenant, k.admin, k.hash, k.createdAt, k.lastUsedAt, k.revokedAt],
    );
    return r.rowCount === 1;
  }

  async getApiKey(params: { id: string }): Promise<ApiKeyRecord | null> {
    const r = await this.pool.query(`SELECT * FROM ${this.s}.api_keys WHERE id = $1`, [params.id]);
    return r.rows[0] ? toRecord(r.rows[0] as Record<string, unknown>) : null;
  }

  async listApiKeys(params: { tenant?: string; revoked?: boolean; limit: number }): Promise<ApiKeyRecord[]> {
    const r = await this.pool.query(
      `SELECT * FROM ${this.s}.api_keys WHERE ($1 OR revoked_at IS NULL) AND ($2::text IS NULL OR tenant = $2) ORDER BY created_at, id LIMIT $3`,
      [params.revoked === true, params.tenant ?? null, params.limit],
    );
    return r.rows.map((row) => toRecord(row as Record<string, unknown>));
  }

  async revokeApiKey(params: { id: string; now: number }): Promise<ApiKeyRecord | null> {
    // The UPDATE sets the time once; the SELECT of the same statement reads the row either way.
    const r = await this.pool.query(
      `WITH revoked AS (UPDATE ${this.s}.api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING *)
       SELECT * FROM revoked UNION ALL SELECT * FROM ${this.s}.api_keys WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM revoked)`,
      [params.id, params.now],
    );
    return r.rows[0] ? toRecord(r.rows[0] as Record<string, unknown>) : null;
  }

  async touchApiKey(params: { id: string; at: number }): Promise<void> {
    await this.pool.query(`UPDATE ${this.s}.api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)`, [params.id, params.at]);
  }

  async hasApiKeys(): Promise<boolean> {
    const r = await this.pool.query(`SELECT EXISTS (SELECT 1 FROM ${this.s}.api_keys) AS any`);
    return (r.rows[0] as { any: boolean }).any;
  }
}
