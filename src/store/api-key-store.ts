/**
 * The API-key part of the storage contract (see store.ts): keys kept in the database
 * (core/api-keys.ts), hashed. Guarantees:
 * - `insertApiKey` never replaces: an id already taken (even by a revoked key) answers false.
 * - `revokeApiKey` is final: a revoked key stays revoked (a second revoke keeps the first time)
 *   and keeps its row, so its id is never made again.
 * - `touchApiKey` only moves lastUsedAt forward, and writes nothing when it would not move.
 */
import type { ApiKeyRecord } from '../core/api-keys.js';

export interface ApiKeyStore {
  /** False when the id is taken. */
  insertApiKey(params: { key: ApiKeyRecord }): Promise<boolean>;
  getApiKey(params: { id: string }): Promise<ApiKeyRecord | null>;
  /** Oldest first (then by id); one tenant's when `tenant` is given; revoked keys only with `revoked: true`. */
  listApiKeys(params: { tenant?: string; revoked?: boolean; limit: number }): Promise<ApiKeyRecord[]>;
  /** Sets revokedAt (once); the record after, or null when no key has that id. */
  revokeApiKey(params: { id: string; now: number }): Promise<ApiKeyRecord | null>;
  /** Sets lastUsedAt to `at` when it is null or older. */
  touchApiKey(params: { id: string; at: number }): Promise<void>;
  /** Whether any key was ever made, revoked ones included: a server then requires keys. */
  hasApiKeys(): Promise<boolean>;
}
