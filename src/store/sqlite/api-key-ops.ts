/**
 * SqliteStore's part of the API-key contract (ApiKeyStore in ../api-key-store.ts): one statement
 * per operation, each write one IMMEDIATE transaction of the store.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { ApiKeyRecord } from '../../core/api-keys.js';
import type { ApiKeyStore } from '../api-key-store.js';
import { statementCache } from './sql.js';

type Write = <T>(fn: () => T, rows?: number) => T;

interface Row {
  id: string;
  tenant: string;
  admin: number;
  hash: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

function toRecord(r: Row): ApiKeyRecord {
  return {
    id: r.id,
    tenant: r.tenant,
    admin: r.admin === 1,
    hash: r.hash,
    createdAt: r.created_at,
    lastUsedAt: r.last_used_at,
    revokedAt: r.revoked_at,
  };
}

export class SqliteApiKeyOps implements ApiKeyStore {
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async insertApiKey(params: { key: ApiKeyRecord }): Promise<boolean> {
    const k = params.key;
    return this.write(
      () =>
        Number(
          this.stmt('INSERT INTO api_keys (id, tenant, admin, hash, created_at, last_used_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING').run(
            k.id,
            k.tenant,
            k.admin ? 1 : 0,
            k.hash,
            k.createdAt,
            k.lastUsedAt,
            k.revokedAt,
          ).changes,
        ) === 1,
    );
  }

  async getApiKey(params: { id: string }): Promise<ApiKeyRecord | null> {
    const row = this.stmt('SELECT * FROM api_keys WHERE id = ?').get(params.id) as Row | undefined;
    return row ? toRecord(row) : null;
  }

  async listApiKeys(params: { tenant?: string; revoked?: boolean; limit: number }): Promise<ApiKeyRecord[]> {
    const where = [params.revoked ? null : 'revoked_at IS NULL', params.tenant === undefined ? null : 'tenant = ?'].filter((w) => w !== null);
    const args = params.tenant === undefined ? [params.limit] : [params.tenant, params.limit];
    const sql = `SELECT * FROM api_keys${where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY created_at, id LIMIT ?`;
    return (this.stmt(sql).all(...args) as unknown as Row[]).map(toRecord);
  }

  async revokeApiKey(params: { id: string; now: number }): Promise<ApiKeyRecord | null> {
    return this.write(() => {
      this.stmt('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(params.now, params.id);
      const row = this.stmt('SELECT * FROM api_keys WHERE id = ?').get(params.id) as Row | undefined;
      return row ? toRecord(row) : null;
    });
  }

  async touchApiKey(params: { id: string; at: number }): Promise<void> {
    this.write(() => this.stmt('UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)').run(params.at, params.id, params.at));
  }

  async hasApiKeys(): Promise<boolean> {
    return this.stmt('SELECT 1 AS one FROM api_keys LIMIT 1').get() !== undefined;
  }
}
