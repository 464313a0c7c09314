/**
 * API keys kept in the database (`longhaul keys create|list|revoke`), beside those of
 * LONGHAUL_API_KEYS: made, listed and revoked here, and checked for the HTTP server (`verify`).
 * The format and the hash are core/api-keys.ts's; the rows are the store's ApiKeyStore part.
 *
 * A server checks a key on every request, so lookups are cached per key id for `cacheMs`
 * (LONGHAUL_API_KEY_CACHE_MS, default 5 s): a key revoked anywhere (another server, the CLI) is
 * refused by every server within that time, and by the process that revoked it at once. A
 * cached key needs no read; a key seen for the first time, or again after the time, costs one
 * read by id (concurrent requests with the same key share it). The cache is a plain TTL, not
 * invalidated through the event relay: it works the same on SQLite (no relay) and PostgreSQL,
 * and a relay message lost in an outage cannot leave a revoked key valid.
 *
 * Last use is written at most once a minute per key and process, never as part of a request
 * (a failed write is logged and forgotten).
 */
import type { Logger } from 'pino';
import { type ApiKeyRecord, apiKeyId, apiKeyMatches, apiKeyPrefix, generateApiKey, isApiKeyId } from '../core/api-keys.js';
import { TENANT_NAME } from '../core/tenant-name.js';
import { InvalidOptionsError, LonghaulError } from '../core/errors.js';
import type { ApiKeyStore } from '../store/api-key-store.js';

/** How often at most a process writes a key's last use. */
export const TOUCH_INTERVAL_MS = 60_000;
/** Key ids a process keeps cached at most (the oldest lookups go first). */
const MAX_CACHED = 10_000;
/** The most keys a listing returns. */
export const MAX_KEYS_LISTED = 10_000;

/** A key as `keys list` shows it: never its hash. */
export interface ApiKeyView {
  id: string;
  tenant: string;
  admin: boolean;
  /** The start of the key (`lh_<id>_`), to recognise a key one holds. */
  prefix: string;
  createdAt: number;
  lastUsedAt: number | null;
  revokedAt: number | null;
}

/** Who a valid database key makes the caller. */
export interface ApiKeyCaller {
  tenant: string;
  admin: boolean;
}

export interface ApiKeysContext {
  readonly store: ApiKeyStore;
  readonly logger: Logger;
  /** How long a lookup is trusted (0: every request reads the key). */
  readonly cacheMs: number;
  readonly clock?: () => number;
}

interface Cached {
  record: ApiKeyRecord | null;
  at: number;
}

function view(r: ApiKeyRecord): ApiKeyView {
  return { id: r.id, tenant: r.tenant, admin: r.admin, prefix: apiKeyPrefix(r.id), createdAt: r.createdAt, lastUsedAt: r.lastUsedAt, revokedAt: r.revokedAt };
}

export class ApiKeys {
  private readonly cache = new Map<string, Cached>();
  private readonly loading = new Map<string, Promise<ApiKeyRecord | null>>();
  /** When this process last wrote each key's last use. */
  private readonly touched = new Map<string, number>();
  private readonly now: () => number;

  constructor(private readonly ctx: ApiKeysContext) {
    this.now = ctx.clock ?? Date.now;
  }

  /** Makes a key for a tenant; the key is in the answer only (the database keeps its hash). */
  async create(params: { tenant: string; admin?: boolean }): Promise<{ key: string; view: ApiKeyView }> {
    if (typeof params.tenant !== 'string' || !TENANT_NAME.test(params.tenant)) {
      throw new InvalidOptionsError(`tenant must be 1–64 letters, digits, . _ - (got "${String(params.tenant).slice(0, 80)}")`, 'tenant');
    }
    // 60 random bits: a taken id is all but impossible, and is simply drawn again.
    for (let i = 0; i < 5; i++) {
      const made = generateApiKey();
      const record: ApiKeyRecord = { id: made.id, tenant: params.tenant, admin: params.admin === true, hash: made.hash, createdAt: this.now(), lastUsedAt: null, revokedAt: null };
      if (await this.ctx.store.insertApiKey({ key: record })) return { key: made.key, view: view(record) };
    }
    throw new Error('could not draw a free API key id');
  }

  /** Oldest first; revoked keys too with `revoked: true`. */
  async list(params: { tenant?: string; revoked?: boolean } = {}): Promise<ApiKeyView[]> {
    const rows = await this.ctx.store.listApiKeys({ ...(params.tenant !== undefined ? { tenant: params.tenant } : {}), revoked: params.revoked === true, limit: MAX_KEYS_LISTED });
    return rows.map(view);
  }

  /** Revokes a key by id (again: no change). Every server refuses it within `cacheMs`, this process at once. */
  async revoke(id: string): Promise<ApiKeyView> {
    const record = isApiKeyId(id) ? await this.ctx.store.revokeApiKey({ id, now: this.now() }) : null;
    this.cache.delete(id);
    if (!record) throw new LonghaulError(`API key ${id.slice(0, 40)} not found`, 'NOT_FOUND', 404);
    return view(record);
  }

  /** Whether the database holds keys (revoked ones too): a server then requires keys. */
  inUse(): Promise<boolean> {
    return this.ctx.store.hasApiKeys();
  }

  /**
   * The caller of a presented key when it is a valid database key, else null. Synchronous while
   * the key's lookup is cached, a promise when it must be read (rejected when the store fails:
   * a key is never taken as valid without a lookup younger than `cacheMs`).
   */
  verify(presented: string): ApiKeyCaller | null | Promise<ApiKeyCaller | null> {
    const id = apiKeyId(presented);
    if (id === null) return null;
    const hit = this.cache.get(id);
    if (hit && this.now() - hit.at < this.ctx.cacheMs) return this.check(hit.record, presented);
    return this.load(id).then((record) => this.check(record, presented));
  }

  private check(record: ApiKeyRecord | null, presented: string): ApiKeyCaller | null {
    if (record === null || record.revokedAt !== null || !apiKeyMatches(record, presented)) return null;
    this.touch(record);
    return { tenant: record.tenant, admin: record.admin };
  }

  private load(id: string): Promise<ApiKeyRecord | null> {
    const pending = this.loading.get(id);
    if (pending) return pending;
    const read = this.ctx.store.getApiKey({ id }).then(
      (record) => {
        this.loading.delete(id);
        this.cache.delete(id); // re-inserted last: the map's order is the age of the lookups
        this.cache.set(id, { record, at: this.now() });
        if (this.cache.size > MAX_CACHED) this.cache.delete(this.cache.keys().next().value as string);
        return record;
      },
      (err: unknown) => {
        this.loading.delete(id);
        throw err;
      },
    );
    this.loading.set(id, read);
    return read;
  }

  /** Writes the key's last use when neither this process nor the row says it was written in the last minute. */
  private touch(record: ApiKeyRecord): void {
    const now = this.now();
    const last = Math.max(this.touched.get(record.id) ?? Number.NEGATIVE_INFINITY, record.lastUsedAt ?? Number.NEGATIVE_INFINITY);
    if (now - last < TOUCH_INTERVAL_MS) return;
    if (this.touched.size >= MAX_CACHED) this.touched.clear();
    this.touched.set(record.id, now);
    this.ctx.store.touchApiKey({ id: record.id, at: now }).catch((err: unknown) => {
      this.ctx.logger.warn({ err, keyId: record.id }, "could not write an API key's last use");
    });
  }
}
