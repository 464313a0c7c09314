/**
 * SqliteStore's claims: which queued jobs a worker's cycle takes, inside the cycle's IMMEDIATE
 * transaction (one writer at a time, so every count read here is exact across processes).
 *
 * The rules are core/claim-plan.ts's: queue order with priority aging, fairness between
 * tenants, and the limits (type concurrency, rate limit, concurrency keys, tenant caps). This
 * module gathers the candidates and the counts with small index-only statements, asks
 * `planClaim`, and claims the ids it returns in one UPDATE.
 *
 * The common case skips the planner: one type without key or rate limit, one tenant with
 * queued jobs, one priority level among them, no tenant cap. That claim is one UPDATE whose
 * sub-select walks the queue index, as before fairness existed, after three index probes (the
 * first queued (tenant, priority), and whether another level or tenant follows it).
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { type ClaimCandidate, DEFAULT_PRIORITY_AGING_MS, keyOf, PRIORITY_LEVELS, perGroupFetch, planClaim } from '../../core/claim-plan.js';
import type { JobRecord } from '../../core/job.js';
import type { ClaimParams, ClaimType, TenantCaps } from '../store.js';
import { jobJson, jobsFromRows, queueOrder } from './rows.js';
import type { StatsBatch } from './stats-batch.js';
import { arrays, type Compiled, compile, logEntrySql, NEXT_UPDATED_AT } from './sql.js';

/** Tenants (or concurrency keys) one claim looks at per type; more are taken in turn by later claims. */
export const MAX_GROUPS_PER_CLAIM = 64;

interface ClaimArgs {
  worker: string;
  at: number;
  type: string;
  tenant: string;
  ids: string;
}

// The claim counts itself (stats-batch.ts): it marks its rows (stats_seq) for the triggers to
// skip, and clears finished_at, so that a running job's end is always a change of it.
const CLAIM_SET = `state = 'running', lease = lease + 1, attempts = attempts + 1, worker_id = @worker,
  started_at = @at, heartbeat_at = @at, updated_at = ${NEXT_UPDATED_AT}, stalled = 0, finished_at = NULL, stats_seq = stats_seq + 1,
  log = ${logEntrySql("'queued'", "'running'", 'attempts + 1', "'claimed'", '@worker')}`;

const CLAIM_PARAMS = {
  worker: (a: ClaimArgs) => a.worker,
  at: (a: ClaimArgs) => a.at,
  type: (a: ClaimArgs) => a.type,
  tenant: (a: ClaimArgs) => a.tenant,
  ids: (a: ClaimArgs) => a.ids,
};

type CandidateRow = [string, string, number, number, string | null];

export class SqliteClaimOps {
  private readonly byIds: Compiled<ClaimArgs>;
  private readonly fastByLimit = new Map<number, Compiled<ClaimArgs>>();
  private readonly statements = new Map<string, StatementSync>();
  /** Per type (and per type's keys): where the last claim that hit MAX_GROUPS_PER_CLAIM stopped. */
  private readonly cursors = new Map<string, string>();

  constructor(
    private readonly db: DatabaseSync,
    private readonly stats: StatsBatch,
  ) {
    this.byIds = compile(db, `UPDATE jobs SET ${CLAIM_SET} WHERE id IN (SELECT value FROM json_each(@ids)) AND state = 'queued' RETURNING ${jobJson('jobs')}`, CLAIM_PARAMS);
    arrays(this.byIds.stmt);
  }

  private stmt(sql: string): StatementSync {
    let st = this.statements.get(sql);
    if (!st) {
      st = arrays(this.db.prepare(sql));
      this.statements.set(sql, st);
    }
    return st;
  }

  /** Inside the caller's write transaction: up to `params.limit` queued jobs, claimed in the order they should start. */
  claim(params: ClaimParams): { jobs: JobRecord[]; wakeAt: number | undefined } {
    const now = params.now;
    // The claim's time for rate-limited types: never before a start their log holds (rateRoom).
    let at = now;
    const limit = Math.floor(params.limit);
    const agingMs = params.agingMs === undefined ? DEFAULT_PRIORITY_AGING_MS : params.agingMs;
    const caps = params.tenantCaps;
    let wakeAt: number | undefined;
    const typeRoom = new Map<string, number>();
    const keyRoom = new Map<string, number>();
    const candidates: ClaimCandidate[] = [];
    const heads: { t: ClaimParams['types'][number]; room: number; tenant: string; priority: number }[] = [];
    for (const t of params.types) {
      let room = this.typeRoom(t, limit);
      if (t.rateLimit && room > 0) {
        const rate = this.rateRoom(t.type, t.rateLimit, at);
        at = rate.at;
        if (rate.room <= 0 && rate.wakeAt !== undefined) wakeAt = Math.min(wakeAt ?? rate.wakeAt, rate.wakeAt);
        room = Math.min(room, rate.room);
      }
      if (room <= 0) continue;
      typeRoom.set(t.type, room);
      if (t.keyConcurrency !== undefined) {
        this.keyedCandidates(t.type, t.keyConcurrency, room, caps !== undefined, keyRoom, candidates);
        continue;
      }
      // The first (tenant, priority) queued: kept for the second pass.
      const head = this.stmt("SELECT tenant, priority FROM jobs WHERE state = 'queued' AND type = ? ORDER BY tenant, priority LIMIT 1").get(t.type) as unknown as
        | [string, number]
        | undefined;
      if (head !== undefined) heads.push({ t, room, tenant: head[0], priority: head[1] });
    }
    // Second pass, over the types with queued jobs: whether another (tenant, priority) follows the
    // first. One type alone with one pair (and no keyed candidates) is the fast path, however many
    // types the worker registered.
    for (const { t, room, tenant, priority } of heads) {
      // Two probes, not a row-value comparison: SQLite walks every entry equal to (tenant, priority) for that.
      const alone =
        this.stmt("SELECT 1 FROM jobs WHERE state = 'queued' AND type = ? AND tenant = ? AND priority > ? ORDER BY priority LIMIT 1").get(t.type, tenant, priority) === undefined &&
        this.stmt("SELECT 1 FROM jobs WHERE state = 'queued' AND type = ? AND tenant > ? ORDER BY tenant LIMIT 1").get(t.type, tenant) === undefined;
      if (alone && heads.length === 1 && candidates.length === 0 && !t.rateLimit && capOf(caps, tenant) === undefined) {
        return { jobs: this.counted(this.fast(params.workerId, now, t.type, tenant, room)), wakeAt };
      }
      const tenants = alone ? [tenant] : this.groups('tenant', t.type);
      const fetch = perGroupFetch(room, tenants.length);
      for (const g of tenants) this.tenantCandidates(t.type, g, fetch, candidates);
    }
    if (candidates.length === 0) return { jobs: [], wakeAt };
    const tenants = [...new Set(candidates.map((c) => c.tenant))];
    const tenantRunning = new Map<string, number>();
    if (tenants.length > 1) for (const tenant of tenants) tenantRunning.set(tenant, this.runningOfTenant(tenant, params.types));
    const tenantRoom = new Map<string, number>();
    for (const tenant of tenants) {
      const cap = capOf(caps, tenant);
      if (cap !== undefined) tenantRoom.set(tenant, cap - (this.stmt("SELECT count(*) FROM jobs WHERE state = 'running' AND tenant = ?").get(tenant) as unknown as [number])[0]);
    }
    const ids = planClaim({ candidates, limit, agingMs, typeRoom, tenantRunning, tenantRoom, keyRoom });
    if (ids.length === 0) return { jobs: [], wakeAt };
    const jobs = jobsFromRows(this.byIds.stmt.all(...this.byIds.args({ worker: params.workerId, at, type: '', tenant: '', ids: JSON.stringify(ids) })));
    const order = new Map(ids.map((id, i) => [id, i]));
    jobs.sort((a, b) => (order.get(a.id) as number) - (order.get(b.id) as number));
    this.recordStarts(params.types, jobs, at);
    return { jobs: this.counted(jobs), wakeAt };
  }

  /** The claimed jobs' move from queued to running, for the stats (see CLAIM_SET). */
  private counted(jobs: JobRecord[]): JobRecord[] {
    for (const job of jobs) this.stats.moved(job.tenant, job.type, 'queued', 'running');
    return jobs;
  }

  /** The common claim: one UPDATE over one tenant's queue of one type, in (priority, run_at, id) order. */
  private fast(worker: string, at: number, type: string, tenant: string, limit: number): JobRecord[] {
    let c = this.fastByLimit.get(limit);
    if (!c) {
      c = compile(
        this.db,
        `UPDATE jobs SET ${CLAIM_SET}
         WHERE id IN (SELECT id FROM jobs WHERE state = 'queued' AND type = @type AND tenant = @tenant ORDER BY priority, run_at, id LIMIT ${limit})
         RETURNING ${jobJson('jobs')}`,
        CLAIM_PARAMS,
      );
      arrays(c.stmt);
      this.fastByLimit.set(limit, c);
    }
    const jobs = jobsFromRows(c.stmt.all(...c.args({ worker, at, type, tenant, ids: '' })));
    // RETURNING yields rows in no promised order.
    if (jobs.length > 1) jobs.sort(queueOrder);
    return jobs;
  }

  /** How many jobs of `t` one claim may take: the claim's limit, less the running ones under the task's `concurrency`. */
  private typeRoom(t: ClaimType, limit: number): number {
    if (t.concurrency === undefined || t.concurrency <= 0) return limit;
    const running = (this.stmt("SELECT count(*) FROM jobs WHERE state = 'running' AND type = ?").get(t.type) as unknown as [number])[0];
    return Math.min(limit, t.concurrency - running);
  }

  /**
   * The tenants (or concurrency keys) with queued jobs of a type, by a skip scan of the queue
   * index: one probe each, at most MAX_GROUPS_PER_CLAIM, starting where the last capped scan stopped.
   */
  private groups(kind: 'tenant' | 'key', type: string): string[] {
    const next =
      kind === 'tenant'
        ? this.stmt("SELECT tenant FROM jobs WHERE state = 'queued' AND type = ? AND tenant > ? ORDER BY tenant LIMIT 1")
        : this.stmt("SELECT ckey FROM jobs WHERE state = 'queued' AND ckey IS NOT NULL AND type = ? AND ckey > ? ORDER BY ckey LIMIT 1");
    const cursorKey = `${kind}\u0000${type}`;
    const start = this.cursors.get(cursorKey) ?? '';
    const out: string[] = [];
    let at = start;
    let wrapped = start === '';
    for (;;) {
      const row = next.get(type, at) as unknown as [string] | undefined;
      if (row === undefined || (wrapped && start !== '' && row[0] > start)) {
        if (wrapped) break;
        wrapped = true;
        at = '';
        continue;
      }
      if (wrapped && start !== '' && row[0] === start) {
        out.push(row[0]);
        break;
      }
      out.push(row[0]);
      at = row[0];
      if (out.length >= MAX_GROUPS_PER_CLAIM) {
        this.cursors.set(cursorKey, row[0]);
        return out;
      }
    }
    this.cursors.delete(cursorKey);
    return out;
  }

  /** A tenant's first `fetch` queued jobs of a type at each priority level (the planner merges them with aging). */
  private tenantCandidates(type: string, tenant: string, fetch: number, out: ClaimCandidate[]): void {
    const st = this.stmt(
      `SELECT id, tenant, priority, run_at, ckey FROM jobs WHERE state = 'queued' AND type = ? AND tenant = ? AND priority = ? ORDER BY run_at, id LIMIT ${fetch}`,
    );
    for (let level = 0; level < PRIORITY_LEVELS; level++) {
      for (const r of st.all(type, tenant, level) as unknown as CandidateRow[]) out.push(candidate(type, r));
    }
  }

  /** For a type with a per-key limit: each queued key's first jobs, as many as its room allows (more under tenant caps). */
  private keyedCandidates(type: string, limit: number, room: number, capped: boolean, keyRoom: Map<string, number>, out: ClaimCandidate[]): void {
    const running = this.stmt("SELECT count(*) FROM jobs WHERE state = 'running' AND ckey IS NOT NULL AND type = ? AND ckey = ?");
    const keys = this.groups('key', type);
    const fetch = perGroupFetch(room, keys.length);
    for (const key of keys) {
      const free = limit - (running.get(type, key) as unknown as [number])[0];
      if (free <= 0) continue;
      keyRoom.set(keyOf(type, key), free);
      // With tenant caps, a key's first jobs may be a capped tenant's: read past them.
      const take = capped ? fetch : Math.min(free, fetch);
      const st = this.stmt(
        `SELECT id, tenant, priority, run_at, ckey FROM jobs WHERE state = 'queued' AND ckey IS NOT NULL AND type = ? AND ckey = ? ORDER BY priority, run_at, id LIMIT ${take}`,
      );
      for (const r of st.all(type, key) as unknown as CandidateRow[]) out.push(candidate(type, r));
    }
  }

  /** A tenant's running jobs among the claim's types (its load, for fairness). */
  private runningOfTenant(tenant: string, types: ReadonlyArray<ClaimType>): number {
    const st = this.stmt("SELECT count(*) FROM jobs WHERE state = 'running' AND type = ? AND tenant = ?");
    let n = 0;
    for (const t of types) n += (st.get(t.type, tenant) as unknown as [number])[0];
    return n;
  }

  /**
   * A sliding-window log: the starts of the last `perMs` are kept (older ones deleted here), so
   * the room is `max` less their count, and when it is full, a place frees when the oldest
   * start that matters leaves the window.
   *
   * The window ends at `at`, the latest of the claim's time and the type's last logged start: a
   * clock that went back (or a claim whose time was read before it waited, as PostgreSQL's can,
   * postgres/claim-rate-sql.ts) must not count a window whose older starts a later one deleted.
   * The claim then starts its jobs at `at`.
   */
  private rateRoom(type: string, rate: { max: number; perMs: number }, now: number): { room: number; wakeAt: number | undefined; at: number } {
    const last = (this.stmt('SELECT max(at) FROM rate_starts WHERE type = ?').get(type) as unknown as [number | null])[0];
    const at = last === null ? now : Math.max(now, last);
    this.stmt('DELETE FROM rate_starts WHERE type = ? AND at <= ?').run(type, at - rate.perMs);
    const used = (this.stmt('SELECT count(*) FROM rate_starts WHERE type = ?').get(type) as unknown as [number])[0];
    const room = rate.max - used;
    if (room > 0) return { room, wakeAt: undefined, at };
    const row = this.stmt('SELECT at FROM rate_starts WHERE type = ? ORDER BY at LIMIT 1 OFFSET ?').get(type, used - rate.max) as unknown as [number] | undefined;
    return { room: 0, wakeAt: row === undefined ? at + 1 : row[0] + rate.perMs, at };
  }

  private recordStarts(types: ReadonlyArray<ClaimType>, jobs: readonly JobRecord[], at: number): void {
    if (!types.some((t) => t.rateLimit)) return;
    const insert = this.stmt('INSERT INTO rate_starts (type, at) VALUES (?, ?)');
    const limited = new Set(types.filter((t) => t.rateLimit).map((t) => t.type));
    for (const j of jobs) if (limited.has(j.type)) insert.run(j.type, at);
  }
}

function candidate(type: string, r: CandidateRow): ClaimCandidate {
  return { id: r[0], type, tenant: r[1], rank: r[2], runAt: r[3], key: r[4] };
}

function capOf(caps: TenantCaps | undefined, tenant: string): number | undefined {
  if (!caps) return undefined;
  return Object.hasOwn(caps.byTenant, tenant) ? (caps.byTenant[tenant] ?? undefined) : caps.others;
}
