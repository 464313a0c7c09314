/**
 * API keys and tenants. `LONGHAUL_API_KEYS="tenantA:key1,tenantB:key2"`; keys are compared
 * in constant time (hashes of equal length, timingSafeEqual), and every key is checked so the
 * time taken does not reveal which key matched.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { tenantNameProblem } from '../core/tenant-name.js';
import type { StreamGrant } from './stream-token.js';

/** Who made a request: its tenant, and the stream token's grant when it came with one. */
export interface Caller {
  tenant: string;
  grant: StreamGrant | null;
  /** An admin key (LONGHAUL_ADMIN_TENANTS, or a database key made with --admin); every caller of a keyless server. */
  admin: boolean;
}

/** Every request when no API keys are configured. */
export const DEFAULT_CALLER: Caller = Object.freeze({ tenant: 'default', grant: null, admin: true });

export interface ApiKey {
  tenant: string;
  digest: Buffer;
}

/** The shortest API key accepted: a key is a password a client presents on every request. */
export const MIN_API_KEY_LENGTH = 16;

/**
 * `tenant:key,tenant:key` as API keys. Refused (with the entry named, never the key): an entry
 * without both parts, a tenant name `longhaul keys create` would refuse (core/tenant-name.ts:
 * `*` and the internal tenant among them), a key under 16 characters.
 */
export function parseApiKeys(spec: string | undefined): ApiKey[] {
  if (!spec || spec.trim() === '') return [];
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const i = entry.indexOf(':');
      if (i <= 0 || i === entry.length - 1) throw new Error(`LONGHAUL_API_KEYS entries must be tenant:key (got "${entry.slice(0, 40)}")`);
      const tenant = entry.slice(0, i);
      const nameProblem = tenantNameProblem(tenant);
      if (nameProblem) throw new Error(`LONGHAUL_API_KEYS: ${nameProblem}`);
      const key = entry.slice(i + 1);
      if (key.length < MIN_API_KEY_LENGTH) throw new Error(`LONGHAUL_API_KEYS: the key of tenant "${tenant}" is too short (at least ${MIN_API_KEY_LENGTH} characters)`);
      return { tenant, digest: digest(key) };
    });
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

/** The tenant of a presented key, or null. */
export function tenantForKey(keys: readonly ApiKey[], presented: string): string | null {
  const d = digest(presented);
  let found: string | null = null;
  for (const k of keys) if (timingSafeEqual(k.digest, d) && found === null) found = k.tenant;
  return found;
}

export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m ? (m[1] as string) : null;
}

export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
