/**
 * Prometheus metrics of one Longhaul instance (`GET /metrics`, served by the HTTP app), on a
 * registry of its own so that several instances in one process (tests) never share series.
 *
 * - Counters and histograms count what THIS process did, from the events of its bus (never the
 *   relayed ones): submissions it accepted, jobs it ended (worker, sweeper, cancels), attempts
 *   its worker ran, its sweeper's actions, its webhook deliveries, its HTTP requests. With
 *   several processes, sum them in PromQL (`sum by (task_type) (rate(...))`): the Prometheus
 *   norm for per-process counters, which restart from 0 with the process.
 * - `longhaul_jobs{state,task_type}` is a gauge read from the store's counters at each scrape
 *   (store.countByTypeAndState, whose cost does not grow with the jobs table): every instance
 *   answers the same, so an autoscaler may scrape any one of them. So is `longhaul_stalled_jobs`
 *   (store.sweepHealth: a partial index of the stalled jobs), unlike the sweeper's counters,
 *   which only the elected sweeper's process increments.
 * - Node's default metrics (event-loop lag, heap, CPU, handles) come from prom-client.
 * - The series count in plain maps from the start (keyed-series.ts, keyed-histogram.ts);
 *   prom-client, which renders them and gives Node's metrics, is loaded at the first scrape:
 *   an instance nobody scrapes never loads it.
 *
 * Labels are `task_type`, `state`, `outcome`, `method`, `route`, `status`: never a job id or a
 * tenant (unbounded series), with one exception: `longhaul_upload_bytes{tenant}`, one series per
 * tenant that keeps uploads, tenants being those of the API keys (one without keys).
 */
import type { Metric, Registry } from 'prom-client';
import { isRelayed } from '../channel/bridge.js';
import type { JobBus } from '../channel/bus.js';
import type { JobState } from '../core/states.js';
import type { JobQueueStore } from '../store/store.js';
import { KeyedHistogram } from './keyed-histogram.js';
import { KeyedSeries } from './keyed-series.js';

/** Run times and waits: 5 ms to 6 hours. */
const SECONDS_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 21600];
const HTTP_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];
/** Default metrics whose names end in `_total` but are gauges. */
const NOT_COUNTERS = /^nodejs_active_(handles|requests|resources)_total$/;
const ENDED: ReadonlySet<JobState> = new Set(['succeeded', 'failed', 'cancelled']);
/** prom-client's Registry.PROMETHEUS_CONTENT_TYPE, the text format the registry renders. */
const CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export interface MetricsOptions {
  bus: JobBus;
  store: JobQueueStore;
  /** Node's default metrics (event-loop lag, memory, CPU). Default true. */
  defaultMetrics?: boolean;
}

export class LonghaulMetrics {
  /**
   * Every series, in the order of the exposition. They count in plain maps from the start
   * (keyed-series.ts, keyed-histogram.ts); prom-client, which renders them, is loaded at the
   * first scrape, so that an instance nobody scrapes never loads it.
   */
  private readonly all: Array<KeyedSeries<string> | KeyedHistogram<string>>;
  private readonly unsubscribe: Array<() => void> = [];
  private readonly http: KeyedSeries<'method' | 'route' | 'status'>;
  private readonly httpSeconds: KeyedHistogram<'method' | 'route' | 'status'>;
  private readonly httpRefusals: KeyedSeries<'reason'>;
  private readonly streamsOpen: KeyedSeries<'kind'>;
  private readonly streamsRefused: KeyedSeries<'kind'>;
  private readonly quotaRefusals: KeyedSeries<'quota'>;
  private readUploadBytes: (() => Promise<ReadonlyMap<string, number>>) | null = null;
  private readonly defaultMetrics: boolean;
  private registryLoad: Promise<Registry> | undefined;
  private loaded: Registry | undefined;
  private closed = false;

  constructor(options: MetricsOptions) {
    const registers: Registry[] = [];
    const { bus, store } = options;
    const submitted = new KeyedSeries({ name: 'longhaul_jobs_submitted_total', help: 'Jobs accepted by this process.', type: 'counter', labelNames: ['task_type'] });
    const finished = new KeyedSeries({
      name: 'longhaul_jobs_finished_total',
      help: 'Jobs this process moved to an end state (succeeded, failed, cancelled).',
      type: 'counter',
      labelNames: ['task_type', 'state'],
    });
    const duration = new KeyedHistogram({
      name: 'longhaul_job_duration_seconds',
      help: "Run time of this process's attempts, from claim to written outcome, by the state the job went to.",
      labelNames: ['task_type', 'state'],
      buckets: SECONDS_BUCKETS,
      registers,
    });
    const queueWait = new KeyedHistogram({
      name: 'longhaul_job_queue_wait_seconds',
      help: 'Time from a job being due (submitted or retry due) to its claim by this process.',
      labelNames: ['task_type'],
      buckets: SECONDS_BUCKETS,
      registers,
    });
    const reaped = new KeyedSeries({ name: 'longhaul_zombies_reaped_total', help: 'Running jobs whose worker stopped heartbeating, handed on by this sweeper.', type: 'counter' });
    const timedOut = new KeyedSeries({ name: 'longhaul_jobs_timed_out_total', help: 'Running jobs past their timeout, cancelled by this sweeper.', type: 'counter' });
    const forced = new KeyedSeries({ name: 'longhaul_cancels_forced_total', help: 'Cancel requests not honoured within the drain, forced by this sweeper.', type: 'counter' });
    const stalled = new KeyedSeries({ name: 'longhaul_jobs_stalled_total', help: 'Running jobs flagged stalled (no progress for their stall timeout) by this sweeper.', type: 'counter' });
    const expired = new KeyedSeries({ name: 'longhaul_results_expired_total', help: 'Succeeded jobs whose result expired, by this sweeper.', type: 'counter' });
    const deleted = new KeyedSeries({ name: 'longhaul_jobs_deleted_total', help: 'Ended jobs deleted by retention in this sweeper.', type: 'counter' });
    const webhooks = new KeyedSeries({
      name: 'longhaul_webhook_deliveries_total',
      help: 'Webhook delivery attempts of this process by outcome (delivered, failed, gone, refused).',
      type: 'counter',
      labelNames: ['outcome'],
    });
    const abandoned = new KeyedSeries({
      name: 'longhaul_abandoned_handlers_total',
      help: "Handlers of this process's worker that ignored their signal past the drain period after their job ended, abandoned with their slot freed.",
      type: 'counter',
      labelNames: ['task_type'],
    });
    const abandonedPending = new KeyedSeries({
      name: 'longhaul_abandoned_handlers_pending',
      help: 'Abandoned handlers of this process that have not returned yet (past LONGHAUL_MAX_ABANDONED_HANDLERS the worker reports itself unhealthy).',
      type: 'gauge',
    });
    this.http = new KeyedSeries({ name: 'longhaul_http_requests_total', help: 'HTTP requests answered, by route and status.', type: 'counter', labelNames: ['method', 'route', 'status'] });
    this.httpSeconds = new KeyedHistogram({
      name: 'longhaul_http_request_duration_seconds',
      help: 'Time to answer HTTP requests, by route and status.',
      labelNames: ['method', 'route', 'status'],
      buckets: HTTP_BUCKETS,
      registers,
    });
    this.streamsOpen = new KeyedSeries({
      name: 'longhaul_streams_open',
      help: 'Streams this server holds open, by kind (sse: per-job and feed responses; websocket), all tenants.',
      type: 'gauge',
      labelNames: ['kind'],
    });
    this.streamsRefused = new KeyedSeries({
      name: 'longhaul_streams_refused_total',
      help: 'Streams refused at the per-tenant cap (sse: 429, websocket: close 1008) and WebSocket subscriptions refused at the per-socket cap (subscription).',
      type: 'counter',
      labelNames: ['kind'],
    });
    this.httpRefusals = new KeyedSeries({
      name: 'longhaul_http_refusals_total',
      help: 'Connections and requests the HTTP server refused before any route (server/http-limits.ts, browser-guard.ts, auth-throttle.ts), by reason.',
      type: 'counter',
      labelNames: ['reason'],
    });
    this.quotaRefusals = new KeyedSeries({
      name: 'longhaul_quota_refusals_total',
      help: 'Uploads and schedules this process refused at a tenant quota or limit, by quota (maxUploads, maxUploadBytes, maxSchedules, minInterval).',
      type: 'counter',
      labelNames: ['quota'],
    });
    const uploadBytes = new KeyedSeries({
      name: 'longhaul_upload_bytes',
      help: 'Bytes of uploads kept (not yet expired) per tenant, read from the blob store at each scrape: the same on every server sharing it. Only servers that accept uploads report it.',
      type: 'gauge',
      labelNames: ['tenant'],
      collect: async (series) => {
        if (!this.readUploadBytes) return;
        const byTenant = await this.readUploadBytes();
        series.reset();
        for (const [tenant, bytes] of byTenant) series.set([tenant], bytes);
      },
    });
    const jobs = new KeyedSeries({
      name: 'longhaul_jobs',
      help: 'Jobs in the database by state and task type, all tenants (from the counters the store keeps; the same on every instance).',
      type: 'gauge',
      labelNames: ['state', 'task_type'],
      async collect(series) {
        const rows = await store.countByTypeAndState({});
        series.reset();
        for (const r of rows) series.set([r.state, r.type], r.count);
      },
    });
    const stalledNow = new KeyedSeries({
      name: 'longhaul_stalled_jobs',
      help: 'Running jobs flagged stalled now (no progress for their stall timeout), all tenants, read from the store: the same on every instance, whichever one sweeps.',
      type: 'gauge',
      async collect(series) {
        series.set([], (await store.sweepHealth({ reapedSince: Date.now() })).stalled);
      },
    });
    this.all = [
      submitted,
      finished,
      duration,
      queueWait,
      reaped,
      timedOut,
      forced,
      stalled,
      expired,
      deleted,
      webhooks,
      abandoned,
      abandonedPending,
      this.http,
      this.httpSeconds,
      this.httpRefusals,
      this.streamsOpen,
      this.streamsRefused,
      jobs,
      stalledNow,
      this.quotaRefusals,
      uploadBytes,
    ] as Array<KeyedSeries<string> | KeyedHistogram<string>>;
    this.defaultMetrics = options.defaultMetrics !== false;

    this.unsubscribe.push(
      bus.on('job:submitted', ({ job }) => submitted.add([job.type])),
      bus.on('job:changed', (e) => {
        // Relayed changes (another process's) are counted by that process.
        if (!ENDED.has(e.to) || e.from === e.to || isRelayed(e)) return;
        finished.add([e.type, e.to]);
      }),
      bus.on('attempt:started', ({ job }) => {
        if (job.startedAt !== null) queueWait.observe([job.type], Math.max(0, job.startedAt - job.runAt) / 1000);
      }),
      bus.on('attempt:ended', ({ job, to, at }) => {
        if (job.startedAt !== null) duration.observe([job.type, to], Math.max(0, at - job.startedAt) / 1000);
      }),
      bus.on('sweeper:pass', (r) => {
        reaped.add([], r.reaped);
        timedOut.add([], r.timedOut);
        forced.add([], r.forced);
        stalled.add([], r.stalled);
        expired.add([], r.expired);
        deleted.add([], r.deleted);
      }),
      bus.on('webhook:attempt', ({ outcome }) => webhooks.add([outcome])),
      bus.on('attempt:abandoned', ({ job }) => {
        abandoned.add([job.type]);
        abandonedPending.add([]);
      }),
      bus.on('attempt:abandoned-returned', () => abandonedPending.add([], -1)),
    );
  }

  /** Counts one answered HTTP request (`route`: the route's pattern, never the raw URL). */
  observeRequest(method: string, route: string, status: number, seconds: number): void {
    const labels = [method, route, String(status)];
    this.http.add(labels);
    this.httpSeconds.observe(labels, seconds);
  }

  /** An upload or schedule refused at a tenant quota (blobs/upload-quota.ts, facade/schedules.ts). */
  quotaRefused(quota: 'maxUploads' | 'maxUploadBytes' | 'maxSchedules' | 'minInterval'): void {
    this.quotaRefusals.add([quota]);
  }

  /** Where `longhaul_upload_bytes` reads the bytes kept per tenant (the upload routes set it over their blob store). */
  reportUploadBytes(read: () => Promise<ReadonlyMap<string, number>>): void {
    this.readUploadBytes = read;
  }

  /** A stream opened (+1) or closed (-1) by this server (server/stream-limits.ts). */
  streamOpenChange(kind: 'sse' | 'websocket', delta: number): void {
    this.streamsOpen.add([kind], delta);
  }

  /** A stream or a WebSocket subscription refused at its cap. */
  streamRefused(kind: 'sse' | 'websocket' | 'subscription'): void {
    this.streamsRefused.add([kind]);
  }

  /** Counts a connection or request the HTTP server refused (`reason`: connection_limit, request_timeout, ...). */
  countHttpRefusal(reason: string): void {
    this.httpRefusals.add([reason]);
  }

  /** The text exposition format (Prometheus 0.0.4). The first call loads prom-client. */
  async render(): Promise<string> {
    return (await this.registry()).metrics();
  }

  /**
   * The prom-client registry of the series, made at the first scrape with Node's default
   * metrics (so an instance nobody scrapes pays nothing for them either).
   */
  registry(): Promise<Registry> {
    this.registryLoad ??= import('prom-client').then(({ Registry, collectDefaultMetrics }) => {
      const registry = new Registry();
      for (const m of this.all) registry.registerMetric(m as unknown as Metric);
      if (this.defaultMetrics) {
        // Node's metrics, less three gauges named like counters (`nodejs_active_handles_total`...),
        // which `promtool check metrics` rejects.
        const node = new Registry();
        collectDefaultMetrics({ register: node, eventLoopMonitoringPrecision: 10 });
        for (const m of node.getMetricsAsArray()) {
          if (!NOT_COUNTERS.test(m.name)) registry.registerMetric(m as unknown as Metric);
        }
      }
      if (this.closed) registry.clear();
      this.loaded = registry;
      return registry;
    });
    return this.registryLoad;
  }

  get contentType(): string {
    return CONTENT_TYPE;
  }

  close(): void {
    this.closed = true;
    for (const off of this.unsubscribe.splice(0)) off();
    this.loaded?.clear();
  }
}
