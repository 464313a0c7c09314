/**
 * Read models: a job's snapshot (with signed links to its result files), pages of jobs, the
 * transition log, webhook deliveries and stats. Reads only: nothing here writes or announces.
 */
import type { Logger } from 'pino';
import type { JobFiles } from '../blobs/job-files.js';
import type { StoredResultFile } from '../blobs/results.js';
import type { JobStats, JobTransition } from '../core/api-types.js';
import { InvalidOptionsError, JobNotFoundError } from '../core/errors.js';
import { type JobRecord, type JobSnapshot, toSnapshot } from '../core/job.js';
import { isJobState, isTerminal, type JobState } from '../core/states.js';
import { aggregateProgress } from '../core/workflow.js';
import { hasUnstorable } from '../core/storable.js';
import { DURATION_WINDOW_MS, durationPercentiles, RATE_WINDOW_MS } from '../core/stats-window.js';
import type { JobQueueStore, ResultFileStore, SnapshotJson, WebhookOutboxStore, WorkflowStore } from '../store/store.js';

export type { JobStats } from '../core/api-types.js';

export interface TenantScope {
  tenant?: string;
}

/** The longest text `list({ text })` (`GET /v1/jobs?q=`) searches for. */
export const MAX_LIST_TEXT = 200;

export interface ListOptions extends TenantScope {
  status?: JobState | JobState[];
  type?: string;
  /** Only the children of this job (ctx.spawn), oldest first. */
  parentId?: string;
  /** Only jobs whose id or metadata (as JSON text) contains this text; letters A to Z without case. At most 200 characters. */
  text?: string;
  limit?: number;
  cursor?: string | null;
}

/** One entry of a job's transition log, as `transitions()` returns it (the API's shape). */
export type PublicTransition = JobTransition;

/** One webhook delivery attempt, as `GET /v1/jobs/{id}/webhooks` lists it. */
export interface WebhookDelivery {
  deliveryId: string;
  event: string;
  attempt: number;
  at: string;
  url: string;
  status: number | null;
  ok: boolean;
  error: string | null;
  durationMs: number;
  response: string | null;
}

export interface ReadContext {
  /** Jobs, the result files their snapshots link to, and parents' children counts. */
  readonly store: JobQueueStore & ResultFileStore & Pick<WorkflowStore, 'countChildren'>;
  /** Warned at when result files exist but cannot be linked. */
  readonly logger: Logger;
  /** Blob storage (opened on first use), for signing result file links. */
  files(): Promise<JobFiles>;
}

export async function getJob(ctx: ReadContext, id: string, scope: TenantScope): Promise<JobSnapshot | null> {
  const job = await ctx.store.getJob({ id, ...scope });
  return job ? ((await snapshots(ctx, [job]))[0] as JobSnapshot) : null;
}

/**
 * A job's last saved checkpoint (`ctx.checkpoint.save`): `{version, data, corrupt}`, null when
 * it has none; throws JobNotFoundError for an unknown job (or another tenant's).
 */
export async function checkpoint(store: JobQueueStore, id: string, scope: TenantScope): Promise<{ version: number; data: unknown; corrupt: boolean } | null> {
  const job = await store.getJob({ id, ...scope });
  if (!job) throw new JobNotFoundError(id);
  const c = job.checkpoint;
  return c ? { version: c.version, data: c.data, corrupt: c.corrupt === true } : null;
}

/**
 * A job's snapshot as JSON text, with the fields a status route needs besides, or null (not
 * found). `json` parses to what `getJob` returns: the store builds it in one read where it can
 * (SQLite); otherwise it is serialised from `getJob`. Not async on purpose: status polls are the
 * hottest read, and each async layer costs a promise round.
 */
export function snapshotJson(ctx: ReadContext, id: string, scope: TenantScope): Promise<(SnapshotJson & { json: string }) | null> {
  const { store } = ctx;
  if (!store.getSnapshotJson) return snapshotJsonFromGet(ctx, id, scope);
  return store
    .getSnapshotJson(scope.tenant === undefined ? { id } : { id, tenant: scope.tenant })
    .then((fast) => (fast === null ? null : fast.json !== null ? (fast as SnapshotJson & { json: string }) : snapshotJsonFromGet(ctx, id, scope)));
}

async function snapshotJsonFromGet(ctx: ReadContext, id: string, scope: TenantScope): Promise<(SnapshotJson & { json: string }) | null> {
  const snap = await getJob(ctx, id, scope);
  if (!snap) return null;
  const expiresAt = snap.expiresAt === null ? null : Date.parse(snap.expiresAt);
  return { state: snap.status, runAt: Date.parse(snap.runAt), expiresAt, json: JSON.stringify(snap) };
}

/**
 * The snapshot with its children counted, for a job that has children (`childrenTotal`, from
 * its record); the snapshot as it is otherwise. The counts are read when the snapshot is: they
 * are not part of the job's record.
 */
export async function withChildren(store: Pick<WorkflowStore, 'countChildren'>, snap: JobSnapshot, childrenTotal: number): Promise<JobSnapshot> {
  if (childrenTotal <= 0) return snap;
  const byState = await store.countChildren({ id: snap.id });
  let total = 0;
  for (const n of Object.values(byState)) total += n;
  snap.children = { total, byState };
  // A parent waiting for its children shows their progress: the share of them that ended (live
  // streams add the percent of running ones, see workflow/parents.ts).
  if (snap.status === 'waiting' && snap.waitingFor?.kind === 'children' && total > 0) {
    let ended = 0;
    for (const [state, n] of Object.entries(byState)) if (isTerminal(state as JobState)) ended += n;
    snap.progress = aggregateProgress(total, ended, [], Date.parse(snap.updatedAt));
  }
  return snap;
}

/** Snapshots with their children counted (parents) and their result files' signed URLs. */
export async function snapshots(ctx: ReadContext, jobs: JobRecord[]): Promise<JobSnapshot[]> {
  const snaps = jobs.map((j) => toSnapshot(j));
  const counting: Promise<JobSnapshot>[] = [];
  jobs.forEach((j, i) => {
    if (j.childrenTotal > 0) counting.push(withChildren(ctx.store, snaps[i] as JobSnapshot, j.childrenTotal));
  });
  if (counting.length > 0) await Promise.all(counting);
  // Files exist only once an attempt ran; an expired job's are gone.
  const ids = jobs.filter((j) => j.attempts > 0 && j.state !== 'expired').map((j) => j.id);
  if (ids.length === 0) return snaps;
  const files = await ctx.store.listResults({ ids });
  if (files.size === 0) return snaps;
  let jf: JobFiles;
  let signer: Awaited<ReturnType<JobFiles['signer']>>;
  try {
    jf = await ctx.files();
    signer = await jf.signer();
  } catch (err) {
    ctx.logger.warn({ err }, 'result files cannot be linked: blob storage or URL signing is not configured');
    return snaps;
  }
  const now = Date.now();
  return snaps.map((s) => {
    const f = files.get(s.id);
    return f ? jf.decorate(s, f, signer, now) : s;
  });
}

/** The job, or a JobNotFoundError (also for another tenant's job: its existence is not revealed). */
export async function mustGetJob(store: Pick<JobQueueStore, 'getJob'>, id: string, scope: TenantScope): Promise<JobRecord> {
  const job = await store.getJob({ id, ...scope });
  if (!job) throw new JobNotFoundError(id);
  return job;
}

/** The state and recorded files of a job (result routes); `tenant` null means any tenant. */
export async function resultFiles(
  store: JobQueueStore & ResultFileStore,
  id: string,
  tenant: string | null,
): Promise<{ state: JobState; files: StoredResultFile[]; expiresAt: number | null } | null> {
  const job = await store.getJob({ id, ...(tenant === null ? {} : { tenant }) });
  if (!job) return null;
  const files = job.state === 'expired' ? [] : ((await store.listResults({ ids: [id] })).get(id) ?? []);
  return { state: job.state, files, expiresAt: job.expiresAt };
}

/** The webhook delivery log of a job (oldest first). */
export async function webhookDeliveries(store: JobQueueStore & WebhookOutboxStore, id: string, scope: TenantScope): Promise<WebhookDelivery[]> {
  await mustGetJob(store, id, scope);
  const entries = await store.listWebhookDeliveries({ jobId: id, limit: 1000 });
  return entries.map((e) => ({
    deliveryId: e.deliveryId,
    event: e.eventType,
    attempt: e.attempt,
    at: new Date(e.at).toISOString(),
    url: e.url,
    status: e.status,
    ok: e.ok,
    error: e.error,
    durationMs: e.durationMs,
    response: e.responseSnippet,
  }));
}

export async function listJobs(ctx: ReadContext, options: ListOptions): Promise<{ items: JobSnapshot[]; nextCursor: string | null }> {
  const states = options.status === undefined ? undefined : Array.isArray(options.status) ? options.status : [options.status];
  for (const s of states ?? []) if (!isJobState(s)) throw new InvalidOptionsError(`unknown status "${String(s)}"`, 'status');
  const limit = options.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new InvalidOptionsError('limit must be an integer from 1 to 1000', 'limit');
  if (options.parentId !== undefined && (typeof options.parentId !== 'string' || options.parentId === '')) {
    throw new InvalidOptionsError('parentId must be a non-empty string', 'parentId');
  }
  if (options.text !== undefined && (typeof options.text !== 'string' || options.text.length > MAX_LIST_TEXT)) {
    throw new InvalidOptionsError(`text must be a string of at most ${MAX_LIST_TEXT} characters`, 'text');
  }
  // No job has a type, tenant, parent or metadata that no store can hold (PostgreSQL would refuse the query).
  if ([options.type, options.tenant, options.parentId, options.text].some((f) => typeof f === 'string' && hasUnstorable(f))) return { items: [], nextCursor: null };
  let page: Awaited<ReturnType<JobQueueStore['listJobs']>>;
  try {
    page = await ctx.store.listJobs({
      limit,
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
      ...(states === undefined ? {} : { states }),
      ...(options.type === undefined ? {} : { type: options.type }),
      ...(options.parentId === undefined ? {} : { parentId: options.parentId }),
      ...(options.text ? { text: options.text } : {}),
      cursor: options.cursor ?? null,
    });
  } catch (err) {
    if ((err as Error).message === 'invalid cursor') throw new InvalidOptionsError('cursor is invalid: pass the nextCursor of an earlier page, unchanged', 'cursor');
    throw err;
  }
  return { items: await snapshots(ctx, page.items), nextCursor: page.nextCursor };
}

export async function transitions(store: JobQueueStore, id: string, scope: TenantScope): Promise<PublicTransition[]> {
  const log = await store.getTransitions({ id, ...scope });
  if (!log) throw new JobNotFoundError(id);
  return log.map((e) => ({ ...e, at: new Date(e.at).toISOString() }));
}

/**
 * Counts by state, submission/completion rates over the last minute, run-time percentiles per
 * type over 15 minutes, stalled jobs now and zombies reaped over 15 minutes: all from the counters and buckets the store keeps as jobs change
 * (core/stats-window.ts), so the cost does not grow with the number of jobs.
 */
export async function stats(store: JobQueueStore, scope: TenantScope): Promise<JobStats> {
  const now = Date.now();
  const [counts, activity, sweeper] = await Promise.all([
    store.countByState(scope),
    store.activity({ ...scope, since: now - RATE_WINDOW_MS, durationsSince: now - DURATION_WINDOW_MS }),
    store.sweepHealth({ ...scope, reapedSince: now - DURATION_WINDOW_MS }),
  ]);
  return {
    counts,
    rates: { submittedPerMinute: activity.submitted, finishedPerMinute: activity.finished },
    durations: durationPercentiles(activity.durations),
    sweeper,
  };
}
