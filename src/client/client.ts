/**
 * The typed client of the Longhaul HTTP API (docs/api.md), for Node and browsers.
 *
 * It only needs a WHATWG `fetch` (the global one unless another is passed): no Node-only
 * modules, so it bundles for the browser as is. Live progress comes over SSE read with fetch
 * (not `EventSource`, so the API key travels in the `Authorization` header, and the stream can
 * resume, fall back to polling and be aborted under our control).
 */
import type {
  AttemptPage,
  DeadLetterGroupView,
  DeadLetterOutcome,
  JobStats,
  JobTransition,
  ScheduleInput,
  SchedulePatch,
  ScheduleView,
  SnapshotPage,
  StreamToken,
  TaskTypeView,
} from '../core/api-types.js';
import { type AttemptListOptions, attemptQuery, type DeadLetterListOptions, type DeadLetterRequest, deadLetterBody, deadLetterQuery } from './dead-letter-requests.js';
import type { JobSnapshot } from '../core/job.js';
import { isTerminal } from '../core/states.js';
import { LonghaulApiError, LonghaulTimeoutError, parseRetryAfter } from './errors.js';
import { linkedController, sleep } from './abort.js';
import { type BatchJob, type BatchOptions, type BatchResult, idempotencyHeaders, type SignalResult, submitBody } from './requests.js';
import { readSse, type SseItem, SseParser } from './sse.js';
import { parseJson } from '../core/json-text.js';
import type {
  FetchLike,
  GetResult,
  ListFilters,
  LonghaulClientOptions,
  PollingOptions,
  PurgeRequest,
  PurgeResponse,
  RequestOptions,
  StreamOptions,
  StreamTokenRequest,
  StreamTuning,
  SubmitOptions,
  SubmitResult,
  WaitOptions,
} from './options.js';

const DEFAULT_POLLING: Required<PollingOptions> = { initialMs: 1000, maxMs: 10_000, minMs: 50 };
const DEFAULT_STREAM: Required<StreamTuning> = { retryMs: 2000, fallbackDrops: 3, fallbackWindowMs: 30_000 };
/** Answers to a reconnect that mean "try again later" rather than "stop". */
const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);
/** SSE event names that carry a job snapshot (`message` for servers that name none). */
const SNAPSHOT_EVENTS: ReadonlySet<string> = new Set(['status', 'progress', 'message']);

/**
 * What makes two snapshots "the same" for deduplication. Field-wise rather than the JSON text,
 * because a `GET` answer and an SSE frame of the same state may order their keys differently.
 */
export function snapshotKey(job: JobSnapshot): string {
  const p = job.progress;
  return [job.status, job.updatedAt, p?.updatedAt, p?.percent, job.attempts, job.cancelRequested, job.stalled].join('|');
}

function parseSnapshot(data: string): JobSnapshot | null {
  try {
    const v: unknown = parseJson(data);
    if (v && typeof v === 'object' && typeof (v as JobSnapshot).id === 'string' && typeof (v as JobSnapshot).status === 'string') return v as JobSnapshot;
  } catch {
    // Not a snapshot: ignored.
  }
  return null;
}

const enc = encodeURIComponent;

export class LonghaulClient {
  readonly baseUrl: string;
  private readonly fetchFn: FetchLike;
  private readonly baseHeaders: Headers;
  private readonly polling: Required<PollingOptions>;
  private readonly tuning: Required<StreamTuning>;

  constructor(options: LonghaulClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    // Wrapped rather than stored: a bare `fetch` called as a method throws "Illegal invocation"
    // in browsers, and a late polyfill of the global still gets picked up.
    const custom = options.fetch;
    this.fetchFn = custom ? (input, init) => custom(input, init) : (input, init) => globalThis.fetch(input, init);
    this.baseHeaders = new Headers(options.headers);
    if (!this.baseHeaders.has('accept')) this.baseHeaders.set('accept', 'application/json');
    if (options.apiKey) this.baseHeaders.set('authorization', `Bearer ${options.apiKey}`);
    this.polling = { ...DEFAULT_POLLING, ...options.polling };
    this.tuning = { ...DEFAULT_STREAM, ...options.stream };
  }

  // ---- plain requests ------------------------------------------------------------------------

  /** Submits a job; resolves to its snapshot (`202`, or `200` for an idempotent replay). */
  async submit(type: string, input?: unknown, options: SubmitOptions = {}): Promise<JobSnapshot> {
    return (await this.submitDetailed(type, input, options)).job;
  }

  /** Like `submit()`, with what the headers said: replayed or not, `Retry-After`, `Location`. */
  async submitDetailed(type: string, input?: unknown, options: SubmitOptions = {}): Promise<SubmitResult> {
    const body = submitBody(type, input, options);
    const headers = idempotencyHeaders(options.idempotencyKey);
    const res = await this.request('POST', '/v1/jobs', { body, headers, signal: options.signal });
    const job = parseJson(await res.text()) as JobSnapshot;
    return {
      job,
      replayed: res.headers.get('idempotent-replayed') === 'true' || res.status === 200,
      retryAfterMs: parseRetryAfter(res.headers.get('retry-after')),
      location: res.headers.get('location'),
    };
  }

  /**
   * Submits jobs as one batch: all are created or none (a refused job fails the whole batch with
   * a `LonghaulApiError` naming it, `jobs[i]`). At most 1,000 jobs per batch.
   */
  async submitBatch(jobs: readonly BatchJob[], options: BatchOptions = {}): Promise<BatchResult> {
    const body = { jobs: jobs.map((j) => submitBody(j.type, j.input, j.options ?? {})) };
    const headers = idempotencyHeaders(options.idempotencyKey);
    const res = await this.request('POST', '/v1/batches', { body, headers, signal: options.signal });
    const page = parseJson(await res.text()) as { jobs: JobSnapshot[] };
    return { jobs: page.jobs, replayed: res.headers.get('idempotent-replayed') === 'true' || res.status === 200 };
  }

  /** Sends the signal `name` with a JSON payload (none: null) to a job; `resumed` when it woke the job. */
  async signal(id: string, name: string, payload?: unknown, options: RequestOptions = {}): Promise<SignalResult> {
    const res = await this.request('POST', `/v1/jobs/${enc(id)}/signals/${enc(name)}`, { body: payload ?? null, signal: options.signal });
    return parseJson(await res.text()) as SignalResult;
  }

  /** The job's current snapshot. */
  async get(id: string, options: RequestOptions = {}): Promise<JobSnapshot> {
    return (await this.getDetailed(id, options)).job;
  }

  /** The snapshot plus the server's `Retry-After` hint (present while the job is not terminal). */
  async getDetailed(id: string, options: RequestOptions = {}): Promise<GetResult> {
    const res = await this.request('GET', `/v1/jobs/${enc(id)}`, { signal: options.signal });
    const job = parseJson(await res.text()) as JobSnapshot;
    return { job, retryAfterMs: parseRetryAfter(res.headers.get('retry-after')) };
  }

  /** One page of jobs, newest first. */
  async list(filters: ListFilters = {}): Promise<SnapshotPage> {
    const query = new URLSearchParams();
    if (filters.status !== undefined) query.set('status', Array.isArray(filters.status) ? filters.status.join(',') : filters.status);
    if (filters.type !== undefined) query.set('type', filters.type);
    if (filters.parentId !== undefined) query.set('parentId', filters.parentId);
    if (filters.q !== undefined) query.set('q', filters.q);
    if (filters.limit !== undefined) query.set('limit', String(filters.limit));
    if (filters.cursor !== undefined) query.set('cursor', filters.cursor);
    if (filters.tenant !== undefined) query.set('tenant', filters.tenant);
    const res = await this.request('GET', '/v1/jobs', { query, signal: filters.signal });
    const page = parseJson(await res.text()) as { items: JobSnapshot[]; nextCursor?: string | null };
    return { items: page.items, nextCursor: page.nextCursor ?? null };
  }

  /** Every matching job, newest first, following `nextCursor` page after page (`limit` is the page size). */
  async *listAll(filters: Omit<ListFilters, 'cursor'> & { cursor?: string } = {}): AsyncGenerator<JobSnapshot, void, undefined> {
    let cursor = filters.cursor;
    for (;;) {
      const page = await this.list({ ...filters, cursor });
      yield* page.items;
      if (!page.nextCursor || page.nextCursor === cursor) return;
      cursor = page.nextCursor;
    }
  }

  /** Cancels a job: `cancelled`, or `running` with `cancelRequested: true` while its handler stops. */
  async cancel(id: string, options: RequestOptions = {}): Promise<JobSnapshot> {
    const res = await this.request('POST', `/v1/jobs/${enc(id)}/cancel`, { signal: options.signal });
    return parseJson(await res.text()) as JobSnapshot;
  }

  /** Requeues a failed or cancelled job with a fresh attempt budget. */
  async retry(id: string, options: RequestOptions = {}): Promise<JobSnapshot> {
    const res = await this.request('POST', `/v1/jobs/${enc(id)}/retry`, { signal: options.signal });
    return parseJson(await res.text()) as JobSnapshot;
  }

  /**
   * Erases a tenant's or a filter's ended jobs with their rows and files (admin API key; see
   * docs/api.md). At least one of tenant, type and before. Jobs not ended are counted as `skipped`.
   */
  async purge(filter: PurgeRequest, options: RequestOptions = {}): Promise<PurgeResponse> {
    const query = new URLSearchParams();
    if (filter.tenant !== undefined) query.set('tenant', filter.tenant);
    if (filter.state !== undefined) query.set('state', Array.isArray(filter.state) ? filter.state.join(',') : filter.state);
    if (filter.type !== undefined) query.set('type', filter.type);
    if (filter.before !== undefined) query.set('before', filter.before instanceof Date ? filter.before.toISOString() : filter.before);
    const res = await this.request('DELETE', '/v1/jobs', { query, signal: options.signal });
    return parseJson(await res.text()) as PurgeResponse;
  }

  /** The job's transition log, oldest first. */
  async transitions(id: string, options: RequestOptions = {}): Promise<JobTransition[]> {
    const res = await this.request('GET', `/v1/jobs/${enc(id)}/transitions`, { signal: options.signal });
    return (parseJson(await res.text()) as { items: JobTransition[] }).items;
  }

  /**
   * A page of the job's attempts, oldest first: each one's error, stack, worker and times, the
   * one running now last. Pass the page's `nextCursor` as `cursor` for the next.
   */
  async attempts(id: string, options: AttemptListOptions = {}): Promise<AttemptPage> {
    const res = await this.request('GET', `/v1/jobs/${enc(id)}/attempts`, { query: attemptQuery(options), signal: options.signal });
    return parseJson(await res.text()) as AttemptPage;
  }

  /** Failed jobs grouped by task type and error code, with counts and the newest failure, newest first. */
  async deadLetters(options: DeadLetterListOptions = {}): Promise<DeadLetterGroupView[]> {
    const res = await this.request('GET', '/v1/dead-letters', { query: deadLetterQuery(options), signal: options.signal });
    return (parseJson(await res.text()) as { items: DeadLetterGroupView[] }).items;
  }

  /** A page of the failed jobs of a filter (a group: `type` and `code`), newest failure first. */
  async deadLetterJobs(options: DeadLetterListOptions = {}): Promise<SnapshotPage> {
    const res = await this.request('GET', '/v1/dead-letters/jobs', { query: deadLetterQuery(options), signal: options.signal });
    const page = parseJson(await res.text()) as { items: JobSnapshot[]; nextCursor?: string | null };
    return { items: page.items, nextCursor: page.nextCursor ?? null };
  }

  /** Replays (manually retries) the failed jobs of a filter or of `ids`; resolves to how many were queued again. */
  async retryDeadLetters(request: DeadLetterRequest = {}): Promise<DeadLetterOutcome> {
    const res = await this.request('POST', '/v1/dead-letters/retry', { body: deadLetterBody(request), signal: request.signal });
    return parseJson(await res.text()) as DeadLetterOutcome;
  }

  /** Deletes the failed jobs of a filter or of `ids`, with their rows and files; resolves to how many were deleted. */
  async discardDeadLetters(request: DeadLetterRequest = {}): Promise<DeadLetterOutcome> {
    const res = await this.request('POST', '/v1/dead-letters/discard', { body: deadLetterBody(request), signal: request.signal });
    return parseJson(await res.text()) as DeadLetterOutcome;
  }

  /** The task types the server accepts, with the JSON Schema of their input (null when it has none). */
  async taskTypes(options: RequestOptions = {}): Promise<TaskTypeView[]> {
    const res = await this.request('GET', '/v1/task-types', { signal: options.signal });
    return parseJson(await res.text()) as TaskTypeView[];
  }

  async stats(options: RequestOptions = {}): Promise<JobStats> {
    const res = await this.request('GET', '/v1/stats', { signal: options.signal });
    return parseJson(await res.text()) as JobStats;
  }

  /** Mints a short-lived token for `EventSource` / WebSocket URLs (`?token=`). */
  async streamToken(request: StreamTokenRequest = {}): Promise<StreamToken> {
    const body: Record<string, unknown> = {};
    if (request.jobs !== undefined) body.jobs = request.jobs;
    if (request.all !== undefined) body.all = request.all;
    if (request.ttlSeconds !== undefined) body.ttlSeconds = request.ttlSeconds;
    const res = await this.request('POST', '/v1/stream-tokens', { body, signal: request.signal });
    return parseJson(await res.text()) as StreamToken;
  }

  // ---- following a job -----------------------------------------------------------------------

  /**
   * Polls the job until it is terminal and resolves with the terminal snapshot.
   *
   * Spacing: the server's `Retry-After` when it sends one (floored at `polling.minMs`);
   * otherwise 1 s, 2 s, 4 s, … capped at 10 s, back to 1 s whenever the snapshot changed.
   * Rejects with `LonghaulTimeoutError` after `timeoutMs`, with the signal's reason when aborted,
   * and with the error of a failed read (`LonghaulApiError`, network errors) at once.
   */
  async wait(id: string, options: WaitOptions = {}): Promise<JobSnapshot> {
    const { ctrl, dispose } = linkedController(options.signal);
    let last: JobSnapshot | null = null;
    const timer =
      options.timeoutMs !== undefined
        ? setTimeout(() => ctrl.abort(new LonghaulTimeoutError(id, options.timeoutMs as number, last)), options.timeoutMs)
        : undefined;
    try {
      for await (const job of this.pollChanges(id, ctrl.signal, null, options.polling)) {
        last = job;
        options.onUpdate?.(job);
        if (isTerminal(job.status)) return job;
      }
      throw new Error('unreachable: polling ended before a terminal snapshot');
    } catch (err) {
      if (ctrl.signal.aborted) throw ctrl.signal.reason;
      throw err;
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      dispose();
    }
  }

  /**
   * Live snapshots of one job over Server-Sent Events; ends after the terminal one.
   *
   * - A dropped connection is resumed after the server's `retry:` delay (2 s when it sent none)
   *   with `Last-Event-ID`, so nothing is missed; snapshots are never yielded twice.
   * - After `stream.fallbackDrops` (3) drops within `stream.fallbackWindowMs` (30 s) — failed
   *   reconnects and `429/502/503/504` answers to a reconnect count as drops — it switches to
   *   polling (spaced like `wait()`), yielding every changed snapshot until a terminal one.
   * - A `204` means the job finished and the client already had its last frame: the job is read
   *   once and yielded if it was not yet, and the stream ends.
   * - Errors of the first connection (a `404`, an unreachable server) are thrown; so are the
   *   errors of polling. Aborting the signal — or leaving the `for await` early — closes the
   *   connection; an abort rejects with the signal's reason.
   */
  async *stream(id: string, options: StreamOptions = {}): AsyncGenerator<JobSnapshot, void, undefined> {
    const { ctrl, dispose } = linkedController(options.signal);
    const signal = ctrl.signal;
    const url = this.url(`/v1/jobs/${enc(id)}/events`);
    let lastEventId = options.lastEventId ?? '';
    let retryMs = this.tuning.retryMs;
    let lastKey: string | null = null;
    let maxSeq = Number.NEGATIVE_INFINITY;
    let connected = false;
    const drops: number[] = [];
    const emit = (job: JobSnapshot): JobSnapshot => {
      lastKey = snapshotKey(job);
      options.onSnapshot?.(job);
      return job;
    };
    try {
      for (;;) {
        let extraDelayMs = 0;
        let res: Response | undefined;
        try {
          const headers = this.headers({ accept: 'text/event-stream' });
          if (lastEventId !== '') headers.set('last-event-id', lastEventId);
          res = await this.fetchFn(url, { method: 'GET', headers, signal });
        } catch (err) {
          if (signal.aborted) throw signal.reason;
          if (!connected) throw err;
          // A failed reconnect counts as a drop.
        }
        if (res?.status === 204) {
          await res.body?.cancel().catch(() => undefined);
          const job = await this.get(id, { signal });
          if (snapshotKey(job) !== lastKey) yield emit(job);
          return;
        }
        if (res && !res.ok) {
          const err = await LonghaulApiError.fromResponse(res, 'GET', url);
          if (!connected || !TRANSIENT_STATUSES.has(res.status)) throw err;
          extraDelayMs = err.retryAfterMs ?? 0;
        } else if (res?.body) {
          connected = true;
          const items = readSse(res.body, new SseParser(lastEventId));
          try {
            for (;;) {
              let step: IteratorResult<SseItem, void>;
              try {
                step = await items.next();
              } catch {
                if (signal.aborted) throw signal.reason;
                break; // the connection dropped mid-stream
              }
              if (step.done) break;
              const item = step.value;
              if (item.kind === 'retry') retryMs = item.ms;
              if (item.kind !== 'event') continue;
              lastEventId = item.id;
              if (!SNAPSHOT_EVENTS.has(item.event)) continue;
              const job = parseSnapshot(item.data);
              if (!job) continue;
              if (/^\d+$/.test(item.id)) {
                const seq = Number(item.id);
                if (seq < maxSeq) continue; // older than what we already have
                maxSeq = seq;
              }
              if (snapshotKey(job) === lastKey) continue;
              yield emit(job);
              if (isTerminal(job.status)) return;
            }
          } finally {
            await items.return(undefined).catch(() => undefined);
          }
        } else if (res) {
          connected = true; // a 200 without a body: nothing to read, treat as a drop
        }

        const now = Date.now();
        drops.push(now);
        while (drops.length > 0 && (drops[0] ?? now) <= now - this.tuning.fallbackWindowMs) drops.shift();
        if (drops.length >= this.tuning.fallbackDrops) {
          for await (const job of this.pollChanges(id, signal, lastKey, options.polling)) {
            yield emit(job);
            if (isTerminal(job.status)) return;
          }
          return;
        }
        await sleep(Math.max(retryMs, extraDelayMs), signal);
      }
    } finally {
      dispose();
      ctrl.abort();
    }
  }

  /** Polls `GET /v1/jobs/{id}`, yielding each snapshot that differs from the previous one; ends after a terminal one. */
  private async *pollChanges(id: string, signal: AbortSignal, lastKey: string | null, override?: PollingOptions): AsyncGenerator<JobSnapshot, void, undefined> {
    const polling = { ...this.polling, ...override };
    let backoff = polling.initialMs;
    let key = lastKey;
    for (;;) {
      const { job, retryAfterMs } = await this.getDetailed(id, { signal });
      const k = snapshotKey(job);
      if (k !== key) {
        key = k;
        backoff = polling.initialMs;
        yield job;
      }
      if (isTerminal(job.status)) return;
      let delay: number;
      if (retryAfterMs !== null) {
        delay = Math.max(retryAfterMs, polling.minMs);
      } else {
        delay = backoff;
        backoff = Math.min(backoff * 2, polling.maxMs);
      }
      await sleep(delay, signal);
    }
  }

  // ---- schedules (docs/schedules.md) ---------------------------------------------------------

  async listSchedules(options: RequestOptions = {}): Promise<ScheduleView[]> {
    return (await this.json<{ items: ScheduleView[] }>('GET', '/v1/schedules', options)).items;
  }
  /** A schedule with its next five runs and its last run. */
  getSchedule(name: string, options: RequestOptions = {}): Promise<ScheduleView> {
    return this.json('GET', `/v1/schedules/${enc(name)}`, options);
  }
  createSchedule(schedule: ScheduleInput, options: RequestOptions = {}): Promise<ScheduleView> {
    return this.json('POST', '/v1/schedules', options, schedule);
  }
  updateSchedule(name: string, patch: SchedulePatch, options: RequestOptions = {}): Promise<ScheduleView> {
    return this.json('PATCH', `/v1/schedules/${enc(name)}`, options, patch);
  }
  pauseSchedule(name: string, options: RequestOptions = {}): Promise<ScheduleView> {
    return this.json('POST', `/v1/schedules/${enc(name)}/pause`, options);
  }
  resumeSchedule(name: string, options: RequestOptions = {}): Promise<ScheduleView> {
    return this.json('POST', `/v1/schedules/${enc(name)}/resume`, options);
  }
  async deleteSchedule(name: string, options: RequestOptions = {}): Promise<void> {
    await this.request('DELETE', `/v1/schedules/${enc(name)}`, { signal: options.signal });
  }
  /** Submits one run now, outside the cron times; resolves to its job. */
  triggerSchedule(name: string, options: RequestOptions = {}): Promise<JobSnapshot> {
    return this.json('POST', `/v1/schedules/${enc(name)}/trigger`, options);
  }

  // ---- plumbing ------------------------------------------------------------------------------

  private async json<T>(method: string, path: string, options: RequestOptions, body?: unknown): Promise<T> {
    const res = await this.request(method, path, { ...(body === undefined ? {} : { body }), signal: options.signal });
    return parseJson(await res.text()) as T;
  }

  private url(path: string, query?: URLSearchParams): string {
    const q = query?.toString();
    return `${this.baseUrl}${path}${q ? `?${q}` : ''}`;
  }

  private headers(extra?: Record<string, string>): Headers {
    const h = new Headers(this.baseHeaders);
    if (extra) for (const [k, v] of Object.entries(extra)) h.set(k, v);
    return h;
  }

  private async request(
    method: string,
    path: string,
    init: { body?: unknown; headers?: Record<string, string>; query?: URLSearchParams; signal?: AbortSignal | undefined },
  ): Promise<Response> {
    const url = this.url(path, init.query);
    const headers = this.headers(init.headers);
    let body: string | undefined;
    if (init.body !== undefined) {
      headers.set('content-type', 'application/json');
      body = JSON.stringify(init.body);
    }
    let res: Response;
    try {
      res = await this.fetchFn(url, { method, headers, body, signal: init.signal });
    } catch (err) {
      if (init.signal?.aborted) throw init.signal.reason;
      throw err;
    }
    if (!res.ok) throw await LonghaulApiError.fromResponse(res, method, url);
    return res;
  }
}
