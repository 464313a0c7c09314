/**
 * API keys and tenants. `LONGHAUL_API_KEYS="tenantA:key1,tenantB:key2"`; keys are compared
 * in constant time (hashes of equal length, timingSafeEqual), and every key is checked so the
 * time taken does not reveal which key matched.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
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

export function parseApiKeys(spec: string | undefined): ApiKey[] {
  if (!spec || spec.trim() === '') return [];
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const i = entry.indexOf(':');
      if (i <= 0 || i === entry.length - 1) throw new Error(`LONGHAUL_API_KEYS entries must be tenant:key (got "${entry.slice(0, 40)}")`);
      const key = entry.slice(i + 1);
      if (key.length < 8) throw new Error(`API key for tenant "${entry.slice(0, i)}" is too short (at least 8 characters)`);
      return { tenant: entry.slice(0, i), digest: digest(key) };
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
