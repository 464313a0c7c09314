/**
 * Per-tenant quotas, pure: how many jobs a tenant may have waiting (pending, queued, retrying:
 * the backlog, as for the global `maxQueued`) and running. The submission refuses a job over
 * `maxQueued` with 429 TENANT_QUOTA_EXCEEDED; the claim keeps `maxRunning`. `"*"` is the quota
 * of every tenant not listed (docs/configuration.md).
 *
 * What a tenant keeps on the server besides jobs (uploads, schedules) is always bounded:
 * `maxUploads`, `maxUploadBytes` and `maxSchedules` come from the tenant's entry, else the `"*"`
 * entry, else RESOURCE_DEFAULTS (docs/security.md says why those values).
 */
import { parseJson } from './json-text.js';

export interface TenantQuota {
  /** Jobs of the tenant pending, queued or retrying at once; a submission past it is refused (429). */
  maxQueued?: number;
  /** Jobs of the tenant running at once, across all workers. */
  maxRunning?: number;
  /** Uploads the tenant keeps at once (not yet expired), across all servers. Default RESOURCE_DEFAULTS. */
  maxUploads?: number;
  /** Bytes of those uploads together; an upload that would go past it is refused. Default RESOURCE_DEFAULTS. */
  maxUploadBytes?: number;
  /** Schedules the tenant has; creating one more is refused. Default RESOURCE_DEFAULTS. */
  maxSchedules?: number;
}

/** The limits on what a tenant keeps that apply when neither its entry nor `"*"` sets one. */
export const RESOURCE_DEFAULTS = Object.freeze({
  /** Uploads live 24 h by default: a thousand a day is far beyond a client feeding jobs by hand or by script. */
  maxUploads: 1000,
  /** 10 GiB: ten uploads of the default 1 GiB maximum, so one tenant cannot fill the disk it shares with the database. */
  maxUploadBytes: 10 * 1024 ** 3,
  /** As many as one list shows (MAX_SCHEDULES_LISTED); at the 1-minute minimum interval, at most ~17 runs a second. */
  maxSchedules: 1000,
});

export type ResourceQuota = { -readonly [K in keyof typeof RESOURCE_DEFAULTS]: number };

/** The upload and schedule limits of a tenant: its own entry's, else `"*"`'s, else the defaults, field by field. */
export function resourceQuotaFor(quotas: TenantQuotas, tenant: string): ResourceQuota {
  const own = Object.hasOwn(quotas, tenant) ? (quotas[tenant] as TenantQuota) : {};
  const all = Object.hasOwn(quotas, DEFAULT_TENANT) ? (quotas[DEFAULT_TENANT] as TenantQuota) : {};
  return {
    maxUploads: own.maxUploads ?? all.maxUploads ?? RESOURCE_DEFAULTS.maxUploads,
    maxUploadBytes: own.maxUploadBytes ?? all.maxUploadBytes ?? RESOURCE_DEFAULTS.maxUploadBytes,
    maxSchedules: own.maxSchedules ?? all.maxSchedules ?? RESOURCE_DEFAULTS.maxSchedules,
  };
}

/** Quotas by tenant name; the key `"*"` is the default for tenants not listed. */
export type TenantQuotas = Readonly<Record<string, TenantQuota>>;

/** The key of the default quota. */
export const DEFAULT_TENANT = '*';

const FIELDS = ['maxQueued', 'maxRunning', 'maxUploads', 'maxUploadBytes', 'maxSchedules'] as const;

/** The quota a tenant has: its own entry, else the `"*"` entry, else none (every field absent). */
export function quotaFor(quotas: TenantQuotas, tenant: string): TenantQuota {
  return Object.hasOwn(quotas, tenant) ? (quotas[tenant] as TenantQuota) : Object.hasOwn(quotas, DEFAULT_TENANT) ? (quotas[DEFAULT_TENANT] as TenantQuota) : {};
}

/**
 * Checks quotas as written (an object, or its JSON text in an environment variable); `where`
 * names the setting in messages. Each limit is an integer ≥ 0 (0 refuses every job); unknown
 * fields are refused, so that a misspelt limit is not silently ignored.
 */
export function parseTenantQuotas(input: unknown, where = 'tenantQuotas'): Record<string, TenantQuota> {
  if (input === undefined || input === null) return {};
  if (typeof input !== 'object' || Array.isArray(input)) {
    throw new Error(`${where} must be an object such as { "acme": { "maxQueued": 1000 }, "*": { "maxQueued": 100 } }`);
  }
  const out: Record<string, TenantQuota> = {};
  for (const [tenant, quota] of Object.entries(input)) {
    if (tenant === '') throw new Error(`${where} has an empty tenant name (use "*" for the default)`);
    const at = `${where}["${tenant}"]`;
    if (quota === null || typeof quota !== 'object' || Array.isArray(quota)) throw new Error(`${at} must be an object such as { "maxQueued": 1000 }`);
    const parsed: TenantQuota = {};
    for (const [field, value] of Object.entries(quota)) {
      if (!(FIELDS as readonly string[]).includes(field)) throw new Error(`${at}.${field} is not a quota (use ${FIELDS.join(', ')})`);
      if (value === undefined) continue;
      if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
        throw new Error(`${at}.${field} must be an integer ≥ 0 (got ${JSON.stringify(value)})`);
      }
      parsed[field as (typeof FIELDS)[number]] = value;
    }
    out[tenant] = parsed;
  }
  return out;
}

/** The quotas in `LONGHAUL_TENANT_QUOTAS` (JSON text, the same shape as the option); unset or empty: none. */
export function tenantQuotasFromEnv(env: Record<string, string | undefined>): Record<string, TenantQuota> {
  const name = 'LONGHAUL_TENANT_QUOTAS';
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return {};
  let value: unknown;
  try {
    value = parseJson(raw);
  } catch (err) {
    throw new Error(`${name} must be JSON such as {"acme":{"maxQueued":1000},"*":{"maxQueued":100}} (${(err as Error).message})`);
  }
  return parseTenantQuotas(value, name);
}

/**
 * The `maxRunning` caps as a claim takes them (ClaimParams.tenantCaps): per listed tenant, and
 * `others` from `"*"`. Undefined when no tenant has one, so claims skip the caps entirely.
 */
export function runningCaps(quotas: TenantQuotas): { byTenant: Record<string, number | null>; others?: number } | undefined {
  const byTenant: Record<string, number | null> = {};
  let others: number | undefined;
  for (const [tenant, quota] of Object.entries(quotas)) {
    if (tenant === DEFAULT_TENANT) others = quota.maxRunning;
    else if (quota.maxRunning !== undefined) byTenant[tenant] = quota.maxRunning;
  }
  // A tenant listed without maxRunning has none, even when "*" has one: claims look a tenant up
  // in byTenant first, so it is listed there with null (no cap).
  if (others !== undefined) for (const [tenant, quota] of Object.entries(quotas)) if (tenant !== DEFAULT_TENANT && quota.maxRunning === undefined) byTenant[tenant] = null;
  if (others === undefined && Object.keys(byTenant).length === 0) return undefined;
  return others === undefined ? { byTenant } : { byTenant, others };
}
