/**
 * Who a presented API key makes the caller: the keys of LONGHAUL_API_KEYS first (auth.ts, every
 * one compared in constant time), then the keys kept in the database (`longhaul keys create`,
 * facade/api-keys.ts: by id, a cached lookup, a constant-time hash comparison). An environment
 * key is an admin when its tenant is in LONGHAUL_ADMIN_TENANTS; a database key when it was made
 * with `--admin`. Synchronous for environment keys and cached database keys; a promise when a
 * database key must be read (rejected when the database does not answer: the request then gets
 * the store's 503, never a pass).
 */
import type { ApiKeyCaller } from '../facade/api-keys.js';
import { type ApiKey, tenantForKey } from './auth.js';

/** The database keys' check (Longhaul's `apiKeys`). */
export interface DatabaseKeys {
  verify(presented: string): ApiKeyCaller | null | Promise<ApiKeyCaller | null>;
}

export class KeyCheck {
  constructor(
    private readonly envKeys: readonly ApiKey[],
    private readonly adminTenants: ReadonlySet<string>,
    /** Null: database keys are not checked (a server built with `databaseKeys: false`). */
    private readonly database: DatabaseKeys | null,
  ) {}

  /** Whether any key can pass: without, the server runs keyless. */
  get enabled(): boolean {
    return this.envKeys.length > 0 || this.database !== null;
  }

  resolve(presented: string): ApiKeyCaller | null | Promise<ApiKeyCaller | null> {
    const tenant = tenantForKey(this.envKeys, presented);
    if (tenant !== null) return { tenant, admin: this.adminTenants.has(tenant) };
    return this.database?.verify(presented) ?? null;
  }
}
