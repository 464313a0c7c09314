/**
 * A claim's rules as the arguments of PostgreSQL's worker_cycle (migrations/0001_baseline.sql): the task
 * types with their limits, and the tenant caps, as parallel arrays.
 */
import type { ClaimParams, TenantCaps } from '../store.js';

/** The stricter of two optional limits. */
function stricter(a: number | null, b: number | null): number | null {
  return a === null ? b : b === null ? a : Math.min(a, b);
}

/** Claim types deduplicated and sorted (advisory locks are taken in this order), with their limits as parallel arrays. */
export function claimTypes(types: ClaimParams['types']): {
  names: string[];
  limits: (number | null)[];
  keyLimits: (number | null)[];
  rateMax: (number | null)[];
  ratePer: (number | null)[];
} {
  const byName = new Map<string, { limit: number | null; key: number | null; rate: { max: number; perMs: number } | null }>();
  const positive = (n: number | undefined) => (n !== undefined && n > 0 ? Math.floor(n) : null);
  for (const t of types) {
    const prior = byName.get(t.type);
    const rate = t.rateLimit ? { max: Math.floor(t.rateLimit.max), perMs: Math.floor(t.rateLimit.perMs) } : null;
    // Listed twice: the stricter limits win.
    byName.set(t.type, {
      limit: stricter(prior?.limit ?? null, positive(t.concurrency)),
      key: stricter(prior?.key ?? null, positive(t.keyConcurrency)),
      rate: prior?.rate && (!rate || prior.rate.max / prior.rate.perMs < rate.max / rate.perMs) ? prior.rate : rate,
    });
  }
  const names = [...byName.keys()].sort();
  const of = (n: string) => byName.get(n) as { limit: number | null; key: number | null; rate: { max: number; perMs: number } | null };
  return {
    names,
    limits: names.map((n) => of(n).limit),
    keyLimits: names.map((n) => of(n).key),
    rateMax: names.map((n) => of(n).rate?.max ?? null),
    ratePer: names.map((n) => of(n).rate?.perMs ?? null),
  };
}

/** Tenant caps as the claim function takes them: names and caps in parallel, and the cap of the others. */
export function capArrays(caps: TenantCaps | undefined): [string[], (number | null)[], number | null] {
  if (!caps) return [[], [], null];
  const names = Object.keys(caps.byTenant).sort();
  const cap = (n: number | null | undefined) => (n === null || n === undefined ? null : Math.floor(n));
  return [names, names.map((n) => cap(caps.byTenant[n])), cap(caps.others)];
}
