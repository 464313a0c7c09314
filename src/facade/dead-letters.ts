/**
 * Dead letters: a job's attempt history, the failed jobs grouped by task type and error code,
 * the jobs of one group page by page, and bulk operations over a filter of failed jobs: replay
 * (the manual retry of facade/control.ts, its core transition `manualRetry`, applied and announced
 * by transitions/apply.ts) and discard (retention's eraser: the job, its rows and its files).
 *
 * Bulk operations walk the matching jobs oldest failure first, in batches of DEAD_LETTER_BATCH:
 * each batch is one short store transaction, never one for the whole set. Jobs that fail after
 * the operation began are left alone, so a job that fails again at once is not replayed twice.
 */
import type { JobBus } from '../channel/bus.js';
import type { AttemptPage, DeadLetterGroupView, DeadLetterOutcome, JobAttempt } from '../core/api-types.js';
import { InvalidOptionsError, JobNotFoundError } from '../core/errors.js';
import type { JobRecord, JobSnapshot } from '../core/job.js';
import { DEAD_LETTER_BATCH, MAX_DEAD_LETTER_IDS, MAX_LEASE, MAX_PAGE_LIMIT, MAX_TIME_MS } from '../core/limits.js';
import { hasUnstorable } from '../core/storable.js';
import { manualRetry } from '../core/transitions.js';
import type { Eraser } from './erase.js';
import type { DeadLetterCursor, DeadLetterFilter, DeadLetterStore, JobQueueStore, WebhookOutboxStore } from '../store/store.js';
import { applyTransitions } from '../transitions/apply.js';
import { type ReadContext, snapshots, type TenantScope } from './reads.js';

/**
 * Which failed jobs to act on or list. Every field narrows. `tenant` (library API) absent: every
 * tenant's jobs; the HTTP API always sets it to the caller's unless an admin asks otherwise.
 */
export interface DeadLetterSelection extends TenantScope {
  type?: string;
  /** The job's error code (`error.code`); null: only the jobs that failed without one (their group lists `code: null`). */
  code?: string | null;
  /** Failed at or after this time (a Date, an ISO 8601 string or ms since the epoch). */
  failedAfter?: Date | string | number;
  /** Failed before this time. */
  failedBefore?: Date | string | number;
  /** Only these jobs (at most MAX_DEAD_LETTER_IDS). */
  ids?: readonly string[];
}

export interface DeadLetterPageOptions extends DeadLetterSelection {
  limit?: number;
  cursor?: string | null;
}

/** A page of one group's failed jobs, newest failure first. */
export interface DeadLetterJobPage {
  items: JobSnapshot[];
  nextCursor: string | null;
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function pageLimit(limit: number | undefined, fallback: number): number {
  const n = limit ?? fallback;
  if (!Number.isInteger(n) || n < 1 || n > MAX_PAGE_LIMIT) throw new InvalidOptionsError(`limit must be an integer from 1 to ${MAX_PAGE_LIMIT}`, 'limit');
  return n;
}

/** A time option as ms since the epoch. */
function timeOf(value: Date | string | number, field: string): number {
  const ms =
    value instanceof Date ? value.getTime() : typeof value === 'number' ? value : typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : Date.parse(String(value));
  if (!Number.isFinite(ms) || Math.abs(ms) > MAX_TIME_MS) {
    throw new InvalidOptionsError(`${field} must be an ISO 8601 date-time or ms since the epoch (got ${JSON.stringify(String(value).slice(0, 40))})`, field);
  }
  return ms;
}

function optionalString(value: unknown, field: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value === '') throw new InvalidOptionsError(`${field} must be a non-empty string`, field);
  return value;
}

/**
 * The store filter of a selection, checked; null when nothing can match (a string no store holds,
 * which PostgreSQL would refuse in a query).
 */
export function deadLetterFilter(selection: DeadLetterSelection): DeadLetterFilter | null {
  const filter: DeadLetterFilter = {};
  const tenant = optionalString(selection.tenant, 'tenant');
  const type = optionalString(selection.type, 'type');
  const code = selection.code === null ? null : optionalString(selection.code, 'code');
  if (tenant !== undefined) filter.tenant = tenant;
  if (type !== undefined) filter.type = type;
  if (code !== undefined) filter.code = code;
  if (selection.failedAfter !== undefined) filter.failedFrom = timeOf(selection.failedAfter, 'failedAfter');
  if (selection.failedBefore !== undefined) filter.failedBefore = timeOf(selection.failedBefore, 'failedBefore');
  if (filter.failedFrom !== undefined && filter.failedBefore !== undefined && filter.failedFrom >= filter.failedBefore) {
    throw new InvalidOptionsError('failedAfter must be before failedBefore', 'failedAfter');
  }
  if (selection.ids !== undefined) {
    if (!Array.isArray(selection.ids) || selection.ids.some((id) => typeof id !== 'string' || id === '')) throw new InvalidOptionsError('ids must be an array of job ids', 'ids');
    if (selection.ids.length === 0) throw new InvalidOptionsError('ids must name at least one job (leave it out to select by filter)', 'ids');
    if (selection.ids.length > MAX_DEAD_LETTER_IDS) throw new InvalidOptionsError(`ids may name at most ${MAX_DEAD_LETTER_IDS} jobs`, 'ids');
    filter.ids = selection.ids.filter((id) => !hasUnstorable(id));
  }
  if ([filter.tenant, filter.type, filter.code].some((s) => typeof s === 'string' && hasUnstorable(s))) return null;
  return filter;
}

// ---- attempts -------------------------------------------------------------------------------------

function parseAttemptCursor(cursor: string): number {
  if (!/^\d{1,10}$/.test(cursor) || Number(cursor) > MAX_LEASE) throw new InvalidOptionsError('cursor is invalid: pass the nextCursor of an earlier page, unchanged', 'cursor');
  return Number(cursor);
}

/** The attempt the job row itself describes: the one running now, or the one that succeeded; null for others. */
function currentAttempt(job: JobRecord): (JobAttempt & { lease: number }) | null {
  if (job.state !== 'running' && job.state !== 'succeeded' && job.state !== 'expired') return null;
  if (job.lease === 0 || job.attempts === 0) return null;
  const running = job.state === 'running';
  return {
    lease: job.lease,
    attempt: job.attempts,
    workerId: job.workerId,
    startedAt: iso(job.startedAt),
    endedAt: running ? null : iso(job.finishedAt),
    outcome: running ? 'running' : 'succeeded',
    reason: running ? null : 'completed',
    error: null,
    stack: null,
  };
}

/**
 * A job's attempts, oldest first, `limit` (default 100) a page: those recorded as they ended
 * without succeeding, then the one running now or the one that succeeded (read from the job).
 */
export async function listAttempts(
  store: Pick<JobQueueStore, 'getJob'> & Pick<DeadLetterStore, 'listAttempts'>,
  id: string,
  scope: TenantScope,
  options: { limit?: number; cursor?: string | null } = {},
): Promise<AttemptPage> {
  const limit = pageLimit(options.limit, 100);
  const after = options.cursor ? parseAttemptCursor(options.cursor) : -1;
  const tenant = scope.tenant === undefined ? {} : { tenant: scope.tenant };
  if (hasUnstorable(id)) throw new JobNotFoundError(id);
  // The job first: an attempt that ends between the two reads is then in the recorded rows (the
  // job's view of it, as running, is dropped for the row of the same lease), never in neither.
  const job = await store.getJob({ id, ...tenant });
  if (job === null) throw new JobNotFoundError(id);
  const recorded = await store.listAttempts({ id, ...tenant, afterLease: after, limit: limit + 1 });
  if (recorded === null) throw new JobNotFoundError(id);
  const items: Array<JobAttempt & { lease: number }> = recorded.map((a) => ({
    lease: a.lease,
    attempt: a.attempt,
    workerId: a.workerId,
    startedAt: iso(a.startedAt),
    endedAt: iso(a.endedAt),
    outcome: a.outcome,
    reason: a.reason,
    error: a.error === null ? null : { message: a.error.message, code: a.error.code, retryable: a.error.retryable },
    stack: a.stack,
  }));
  const current = currentAttempt(job);
  if (current && current.lease > after && !items.some((a) => a.lease === current.lease)) items.push(current);
  const page = items.slice(0, limit);
  const last = page[page.length - 1];
  return { items: page.map(({ lease: _lease, ...a }) => a), nextCursor: items.length > limit && last ? String(last.lease) : null };
}

// ---- groups and pages -------------------------------------------------------------------------------

/** Failed jobs grouped by task type and error code (and tenant, for every tenant's), newest failure first, at most `limit` (default 100) groups. */
export async function deadLetterGroups(store: Pick<DeadLetterStore, 'deadLetterGroups'>, selection: DeadLetterSelection & { limit?: number }): Promise<DeadLetterGroupView[]> {
  const limit = pageLimit(selection.limit, 100);
  const filter = deadLetterFilter(selection);
  if (filter === null) return [];
  const groups = await store.deadLetterGroups({ filter, limit });
  return groups.map((g) => ({
    type: g.type,
    code: g.code,
    count: g.count,
    lastFailedAt: new Date(g.lastFailedAt).toISOString(),
    ...(selection.tenant === undefined ? { tenant: g.tenant } : {}),
  }));
}

function encodeJobCursor(c: DeadLetterCursor): string {
  return Buffer.from(`${c.finishedAt}.${c.id}`, 'utf8').toString('base64url');
}

function decodeJobCursor(cursor: string): DeadLetterCursor {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const m = /^(-?\d{1,16})\.([0-9a-f-]{36})$/.exec(text);
  if (!m) throw new InvalidOptionsError('cursor is invalid: pass the nextCursor of an earlier page, unchanged', 'cursor');
  return { finishedAt: Number(m[1]), id: m[2] as string };
}

/** The failed jobs of a selection (one group: its type and code), newest failure first, `limit` (default 50) a page. */
export async function deadLetterJobs(ctx: ReadContext & { store: DeadLetterStore }, options: DeadLetterPageOptions): Promise<DeadLetterJobPage> {
  const limit = pageLimit(options.limit, 50);
  const cursor = options.cursor ? decodeJobCursor(options.cursor) : null;
  const filter = deadLetterFilter(options);
  if (filter === null) return { items: [], nextCursor: null };
  const jobs = await ctx.store.failedJobs({ filter, limit: limit + 1, order: 'desc', cursor });
  const page = jobs.slice(0, limit);
  const last = page[page.length - 1];
  return {
    items: await snapshots(ctx, page),
    nextCursor: jobs.length > limit && last ? encodeJobCursor({ finishedAt: last.finishedAt ?? 0, id: last.id }) : null,
  };
}

// ---- bulk operations ----------------------------------------------------------------------------------

/** The failed jobs of `filter`, batch after batch, oldest failure first; `act` returns how many it acted on. */
async function eachBatch(store: Pick<DeadLetterStore, 'failedJobs'>, filter: DeadLetterFilter, act: (jobs: JobRecord[]) => Promise<number>): Promise<number> {
  // Jobs failing from now on are not part of this operation.
  const bound = Date.now() + 1;
  const walk: DeadLetterFilter = { ...filter, failedBefore: Math.min(filter.failedBefore ?? bound, bound) };
  let cursor: DeadLetterCursor | null = null;
  let count = 0;
  for (;;) {
    const jobs = await store.failedJobs({ filter: walk, limit: DEAD_LETTER_BATCH, order: 'asc', cursor });
    if (jobs.length === 0) break;
    count += await act(jobs);
    const last = jobs[jobs.length - 1] as JobRecord;
    if (jobs.length < DEAD_LETTER_BATCH || last.finishedAt === null) break;
    cursor = { finishedAt: last.finishedAt, id: last.id };
    // Other writers get the database between batches.
    await new Promise((resolve) => setImmediate(resolve));
  }
  return count;
}

export interface DeadLetterContext {
  readonly store: JobQueueStore & WebhookOutboxStore & DeadLetterStore;
  readonly bus: JobBus;
  readonly eraser: Eraser;
}

/**
 * Replays the selected failed jobs: each gets the manual retry of `Longhaul.retry` (a fresh
 * attempt budget, its checkpoint kept, its webhook re-armed). Resolves to how many were queued
 * again (a job that left `failed` meanwhile is not counted).
 */
export async function retryDeadLetters(ctx: DeadLetterContext, selection: DeadLetterSelection): Promise<DeadLetterOutcome> {
  const filter = deadLetterFilter(selection);
  if (filter === null) return { count: 0 };
  const count = await eachBatch(ctx.store, filter, async (jobs) => {
    // Before the transitions, as a single retry does: the next end of each job sends an event again.
    await ctx.store.rearmWebhooks({ jobIds: jobs.map((j) => j.id) });
    const now = Date.now();
    const applied = await applyTransitions(
      ctx.store,
      ctx.bus,
      jobs.map((job) => ({ job, write: manualRetry(job, now) })),
    );
    return applied.filter(Boolean).length;
  });
  return { count };
}

/**
 * Discards the selected failed jobs: each is deleted with its rows (attempts, transitions,
 * progress, webhook target and deliveries, signals) and its result files, as retention does. A
 * failed parent whose children are still kept stays (its children go first). Resolves to how many
 * jobs were deleted.
 */
export async function discardDeadLetters(ctx: DeadLetterContext, selection: DeadLetterSelection): Promise<DeadLetterOutcome> {
  const filter = deadLetterFilter(selection);
  if (filter === null) return { count: 0 };
  const count = await eachBatch(ctx.store, filter, async (jobs) => {
    const erased = await ctx.eraser.eraseJobs(
      jobs.map((j) => j.id),
      ['failed'],
    );
    return erased.jobs;
  });
  return { count };
}
