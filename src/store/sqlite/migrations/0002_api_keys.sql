-- Version 2: API keys kept in the database (`longhaul keys create|list|revoke`), beside the
-- keys of LONGHAUL_API_KEYS. Applied after 0001_baseline.sql; released, so it never changes
-- (test/unit/migration-hashes.test.ts holds its SHA-256).
--
-- A key is `lh_<id>_<secret>` (core/api-keys.ts): the server finds the row by id, then compares
-- the SHA-256 of the key presented with `hash` in constant time. The key itself is never
-- stored: it is printed once, when it is made. A revoked key keeps its row (revoked_at set), so
-- a listing still shows it and its id is never made again. last_used_at is written at most once
-- a minute per key and process (src/facade/api-keys.ts). Read and written by
-- src/store/sqlite/api-key-ops.ts.

CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,                     -- the key's public part: 12 characters of a-z and 2-7
  tenant TEXT NOT NULL,
  admin INTEGER NOT NULL DEFAULT 0,        -- 1: acts as a tenant of LONGHAUL_ADMIN_TENANTS
  hash TEXT NOT NULL,                      -- SHA-256 of the whole key, lower-case hex
  created_at INTEGER NOT NULL,
  last_used_at INTEGER,
  revoked_at INTEGER
) WITHOUT ROWID;
