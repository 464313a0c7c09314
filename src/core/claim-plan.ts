/**
 * Which queued jobs a claim takes, and in what order: the rules every store applies (SQLite
 * through `planClaim` below, PostgreSQL in the same terms inside its claim function), so that
 * both answer the same. No I/O: the store gathers the candidates and the counts, inside the
 * transaction that claims, and passes them here.
 *
 * - Queue order with priority aging: a job's place is `runAt + rank × agingMs` (rank 0 for
 *   critical to 3 for low). A job that has waited `agingMs` longer than another one level above
 *   it goes first; with aging off, priority is strict and `runAt` orders within a level.
 * - Fairness between tenants: the claim shares what it takes so that tenants' running jobs
 *   even out. Each tenant's k-th candidate counts as `running + k` for that tenant, and the
 *   lowest count goes first (ties in queue order): a tenant with one queued job and nothing
 *   running is served before the next job of a tenant with a burst of 100,000.
 * - Limits: each job taken uses one place of its type's room (the task's `concurrency`, its rate
 *   limit), of its tenant's room (`maxRunning`), and of its concurrency key's room. A candidate
 *   whose limits are full is passed over, and the claim goes on with the next.
 */

/** Priority levels, critical (0) to low (3), as stored. */
export const PRIORITY_LEVELS = 4;

/**
 * The place of a strict priority level when aging is off: wider than any epoch-ms time (year
 * 2286 is 1e13 ms), so that the level decides first. 3e13 + a time stays well inside 2^53.
 */
export const STRICT_LEVEL_MS = 1e13;

/** Default aging: a job gains one priority level per 5 minutes it waits (docs/configuration.md). */
export const DEFAULT_PRIORITY_AGING_MS = 300_000;

/** A job's place in its queue (smaller first). `agingMs` null: strict priority. */
export function queuePlace(rank: number, runAt: number, agingMs: number | null): number {
  return runAt + rank * (agingMs ?? STRICT_LEVEL_MS);
}

/** A queued job a claim may take. */
export interface ClaimCandidate {
  id: string;
  type: string;
  tenant: string;
  /** Priority rank, 0 (critical) to 3 (low). */
  rank: number;
  runAt: number;
  /** The job's concurrency key, or null. */
  key: string | null;
}

export interface ClaimPlanInput {
  candidates: readonly ClaimCandidate[];
  /** Jobs the claim may take in all. */
  limit: number;
  agingMs: number | null;
  /** Places left per type (absent: `limit`). */
  typeRoom: ReadonlyMap<string, number>;
  /** Jobs each tenant has running now, among the claim's types (absent: 0). */
  tenantRunning: ReadonlyMap<string, number>;
  /** Places left per tenant under its `maxRunning` (absent: no cap). */
  tenantRoom: ReadonlyMap<string, number>;
  /** Places left per concurrency key, keyed by `keyOf(type, key)` (absent: no cap). */
  keyRoom: ReadonlyMap<string, number>;
}

/** The map key of a (type, concurrency key) pair. */
export function keyOf(type: string, key: string): string {
  return `${type}\u0000${key}`;
}

/**
 * How many candidates a claim reads per tenant (or key) when `groups` have queued jobs: all it
 * may take when there is one, else twice an even share (at least 8). A tenant with a longer
 * queue than that is served the rest by the next claim, which the worker makes at once when
 * this one returned jobs.
 */
export function perGroupFetch(room: number, groups: number): number {
  if (groups <= 1) return room;
  return Math.min(room, Math.max(8, Math.ceil((2 * room) / groups)));
}

interface Ranked {
  c: ClaimCandidate;
  place: number;
  load: number;
}

function byPlace(a: Ranked, b: Ranked): number {
  return a.place - b.place || (a.c.id < b.c.id ? -1 : a.c.id > b.c.id ? 1 : 0);
}

/** Keeps, in each group (in place order), the first `room(group)` items. */
function firstPerGroup(items: Ranked[], group: (r: Ranked) => string | null, room: (g: string) => number | undefined): Ranked[] {
  const seen = new Map<string, number>();
  return items.filter((r) => {
    const g = group(r);
    if (g === null) return true;
    const cap = room(g);
    if (cap === undefined) return true;
    const n = (seen.get(g) ?? 0) + 1;
    seen.set(g, n);
    return n <= cap;
  });
}

/**
 * The ids to claim, in the order their jobs should start. In steps, each one a window over the
 * candidates in queue-place order (PostgreSQL's claim function computes the same with window
 * functions):
 * 1. per tenant, the first `tenantRoom` candidates stay;
 * 2. per concurrency key, the first `keyRoom` stay;
 * 3. the k-th remaining candidate of a tenant gets the load `running + k`;
 * 4. in (load, place, id) order, per type the first `typeRoom` stay, and the first `limit` are taken.
 */
export function planClaim(input: ClaimPlanInput): string[] {
  const limit = Math.max(0, Math.floor(input.limit));
  if (limit === 0 || input.candidates.length === 0) return [];
  let items: Ranked[] = input.candidates.map((c) => ({ c, place: queuePlace(c.rank, c.runAt, input.agingMs), load: 0 }));
  items.sort(byPlace);
  // Tenants first: a capped tenant's jobs must not hold a key's places that another tenant's could take.
  items = firstPerGroup(items, (r) => r.c.tenant, (g) => input.tenantRoom.get(g));
  items = firstPerGroup(items, (r) => (r.c.key === null ? null : keyOf(r.c.type, r.c.key)), (g) => input.keyRoom.get(g));
  const taken = new Map<string, number>();
  for (const r of items) {
    const k = (taken.get(r.c.tenant) ?? 0) + 1;
    taken.set(r.c.tenant, k);
    r.load = (input.tenantRunning.get(r.c.tenant) ?? 0) + k;
  }
  items.sort((a, b) => a.load - b.load || byPlace(a, b));
  items = firstPerGroup(items, (r) => r.c.type, (g) => input.typeRoom.get(g) ?? limit);
  return items.slice(0, limit).map((r) => r.c.id);
}
