/**
 * Room in tenants' backlogs during one insert (both stores): each limited tenant's backlog is
 * read once in the insert's transaction (counted up to its limit), then counted on as jobs are
 * inserted; a job that finds no room answers 'tenant-full'. For a whole batch, one refusal
 * refuses every new job of it (the store then inserts none).
 */
import type { InsertResult } from './store.js';

export interface TenantRoom {
  readonly limits: Readonly<Record<string, number>>;
  /** Per tenant read so far: its stored backlog (up to the limit) and the jobs this insert added. */
  readonly counts: Map<string, { stored: number; added: number }>;
}

export function tenantRoom(limits: Readonly<Record<string, number>> | undefined): TenantRoom | undefined {
  return limits === undefined ? undefined : { limits, counts: new Map() };
}

/** The tenant's limit, or undefined when it has none. */
export function limitOf(room: TenantRoom, tenant: string): number | undefined {
  return Object.hasOwn(room.limits, tenant) ? room.limits[tenant] : undefined;
}

/** How many rows to count at most for a limit: past it, the exact number does not matter. */
export function countCap(limit: number): number {
  return Math.max(0, Math.floor(limit));
}

/**
 * Takes room for one job of `tenant`, whose stored backlog `read` gives (called once per tenant
 * and insert), or answers the refusal. Null: room taken (or the tenant has no limit).
 */
export function takeRoom(room: TenantRoom, tenant: string, read: (tenant: string, cap: number) => number): InsertResult | null {
  const limit = limitOf(room, tenant);
  if (limit === undefined) return null;
  let count = room.counts.get(tenant);
  if (!count) {
    count = { stored: read(tenant, countCap(limit)), added: 0 };
    room.counts.set(tenant, count);
  }
  if (count.stored + count.added >= limit) return { kind: 'tenant-full', tenant, backlog: count.stored + count.added, limit };
  count.added++;
  return null;
}

/**
 * The refusal of a whole batch, when one of its jobs found no room: the tenant, its stored
 * backlog before the batch, and its limit. Null when every job found room.
 */
export function batchRefusal(results: ReadonlyArray<InsertResult | null>, room: TenantRoom): Extract<InsertResult, { kind: 'tenant-full' }> | null {
  const refused = results.find((r): r is Extract<InsertResult, { kind: 'tenant-full' }> => r?.kind === 'tenant-full');
  if (!refused) return null;
  return { ...refused, backlog: room.counts.get(refused.tenant)?.stored ?? refused.backlog };
}

/** A refused batch's answers: jobs found again by their key keep their answer, every other job carries the refusal. */
export function refuseBatch(results: ReadonlyArray<InsertResult | null>, refusal: InsertResult): InsertResult[] {
  return results.map((r) => (r === null || r.kind === 'created' || r.kind === 'tenant-full' ? refusal : r));
}
