/**
 * Who the signed-in caller is (`GET /v1/whoami`): its tenant, and whether it is an admin, who
 * may look at other tenants' jobs (the Jobs page's tenant filter). Read once per key; null on a
 * server without the route (older) or when it cannot be read: no tenant filter then.
 */
import { api, currentKey, onAuthChange } from './api';

export interface Caller {
  tenant: string;
  admin: boolean;
  /** Tenants to suggest (for an admin: those of the configured API keys). */
  tenants: string[];
}

let cached: { key: string | null; value: Promise<Caller | null> } | null = null;
onAuthChange(() => {
  cached = null;
});

export function whoami(): Promise<Caller | null> {
  const key = currentKey();
  if (cached && cached.key === key) return cached.value;
  const value: Promise<Caller | null> = api<Caller>('/v1/whoami').catch(() => {
    // Not kept: a later read may succeed (a sign-in, a restarted server).
    if (cached?.value === value) cached = null;
    return null;
  });
  cached = { key, value };
  return value;
}
