/**
 * What a tenant name may be, wherever one is configured: `longhaul keys create --tenant` and the
 * tenants of `LONGHAUL_API_KEYS` follow the same rule. Letters, digits, `.`, `_` and `-` only:
 * so `*` (which quotas and an admin's `tenant=` parameter read as "every tenant") and the
 * internal tenant (`longhaul:internal`, webhooks/service.ts) can never be a key's tenant.
 */
export const TENANT_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** Why `name` cannot be a tenant's name, or null when it can. */
export function tenantNameProblem(name: string): string | null {
  if (TENANT_NAME.test(name)) return null;
  return `tenant name "${name.slice(0, 70)}" is not allowed: 1–64 letters, digits, . _ - (so never "*" or the internal tenant)`;
}
