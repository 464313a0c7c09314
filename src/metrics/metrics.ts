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
 *
 * Labels are `task_type`, `state`, `outcome`, `method`, `route`, `status`: never a job id or a
 * tenant (unbounded series).
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, type Metric, Registry } from 'prom-client';
import { isRelayed } from '../channel/bridge.js';
import type { JobBus } from '../channel/bus.js';
import type { JobState } from '../core/states.js';
import type { JobQueueStore } from '../store/store.js';
import { KeyedHistogram } from './keyed-histogram.js';

/** Run times and waits: 5 ms to 6 hours. */
const SECONDS_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 21600];
const HTTP_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];
/** Default metrics whose names end in `_total` but are gauges. */
const NOT_COUNTERS = /^nodejs_active_(handles|requests|resources)_total$/;
const ENDED: ReadonlySet<JobState> = new Set(['succeeded', 'failed', 'cancelled']);

export interface MetricsOptions {
  bus: JobBus;
  store: JobQueueStore;
  /** Node's default metrics (event-loop lag, memory, CPU). Default true. */
  defaultMetrics?: boolean;
}

export class LonghaulMetrics {
  readonly registry = new Registry();
  private readonly unsubscribe: Array<() => void> = [];
  private readonly http: Counter<'method' | 'route' | 'status'>;
  private readonly httpSeconds: Histogram<'method' | 'route' | 'status'>;
  /** Node's metrics are registered at the first scrape: an instance nobody scrapes pays nothing for them. */
  private defaultMetrics: boolean;

  constructor(options: MetricsOptions) {
    const registers = [this.registry];
    const { bus, store } = options;
    const submitted = new Counter({ name: 'longhaul_jobs_submitted_total', help: 'Jobs accepted by this process.', labelNames: ['task_type'], registers });
    // Counted per (type, state) in a plain map on the worker's hot path, and added to the counter
    // when it is read (collect runs at every scrape): prom-client's inc validates and hashes its
    // labels object at every call.
    const finishedSince = new Map<string, { labels: { task_type: string; state: string }; n: number }>();
    new Counter({
      name: 'longhaul_jobs_finished_total',
      help: 'Jobs this process moved to an end state (succeeded, failed, cancelled).',
      labelNames: ['task_type', 'state'],
      registers,
      collect() {
        for (const c of finishedSince.values()) {
          if (c.n > 0) this.inc(c.labels, c.n);
          c.n = 0;
        }
      },
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
    const reaped = new Counter({ name: 'longhaul_zombies_reaped_total', help: 'Running jobs whose worker stopped heartbeating, handed on by this sweeper.', registers });
    const timedOut = new Counter({ name: 'longhaul_jobs_timed_out_total', help: 'Running jobs past their timeout, cancelled by this sweeper.', registers });
    const forced = new Counter({ name: 'longhaul_cancels_forced_total', help: 'Cancel requests not honoured within the drain, forced by this sweeper.', registers });
    const stalled = new Counter({ name: 'longhaul_jobs_stalled_total', help: 'Running jobs flagged stalled (no progress for their stall timeout) by this sweeper.', registers });
    const expired = new Counter({ name: 'longhaul_results_expired_total', help: 'Succeeded jobs whose result expired, by this sweeper.', registers });
    const deleted = new Counter({ name: 'longhaul_jobs_deleted_total', help: 'Ended jobs deleted by retention in this sweeper.', registers });
    const webhooks = new Counter({
      name: 'longhaul_webhook_deliveries_total',
      help: 'Webhook delivery attempts of this process by outcome (delivered, failed, gone, refused).',
      labelNames: ['outcome'],
      registers,
    });
    const abandoned = new Counter({
      name: 'longhaul_abandoned_handlers_total',
      help: "Handlers of this process's worker that ignored their signal past the drain period after their job ended, abandoned with their slot freed.",
      labelNames: ['task_type'],
      registers,
    });
    const abandonedPending = new Gauge({
      name: 'longhaul_abandoned_handlers_pending',
      help: 'Abandoned handlers of this process that have not returned yet (past LONGHAUL_MAX_ABANDONED_HANDLERS the worker reports itself unhealthy).',
      registers,
    });
    this.http = new Counter({ name: 'longhaul_http_requests_total', help: 'HTTP requests answered, by route and status.', labelNames: ['method', 'route', 'status'], registers });
    this.httpSeconds = new Histogram({
      name: 'longhaul_http_request_duration_seconds',
      help: 'Time to answer HTTP requests, by route and status.',
      labelNames: ['method', 'route', 'status'],
      buckets: HTTP_BUCKETS,
      registers,
    });
    new Gauge({
      name: 'longhaul_jobs',
      help: 'Jobs in the database by state and task type, all tenants (from the counters the store keeps; the same on every instance).',
      labelNames: ['state', 'task_type'],
      registers,
      async collect() {
        this.reset();
        for (const r of await store.countByTypeAndState({})) this.set({ state: r.state, task_type: r.type }, r.count);
      },
    });
    new Gauge({
      name: 'longhaul_stalled_jobs',
      help: 'Running jobs flagged stalled now (no progress for their stall timeout), all tenants, read from the store: the same on every instance, whichever one sweeps.',
      registers,
      async collect() {
        this.set((await store.sweepHealth({ reapedSince: Date.now() })).stalled);
      },
    });
    this.defaultMetrics = options.defaultMetrics !== false;

    this.unsubscribe.push(
      bus.on('job:submitted', ({ job }) => submitted.inc({ task_type: job.type })),
      bus.on('job:changed', (e) => {
        // Relayed changes (another process's) are counted by that process.
        if (!ENDED.has(e.to) || e.from === e.to || isRelayed(e)) return;
        const key = `${e.type}\u0000${e.to}`;
        const c = finishedSince.get(key);
        if (c) c.n++;
        else finishedSince.set(key, { labels: { task_type: e.type, state: e.to }, n: 1 });
      }),
      bus.on('attempt:started', ({ job }) => {
        if (job.startedAt !== null) queueWait.observe([job.type], Math.max(0, job.startedAt - job.runAt) / 1000);
      }),
      bus.on('attempt:ended', ({ job, to, at }) => {
        if (job.startedAt !== null) duration.observe([job.type, to], Math.max(0, at - job.startedAt) / 1000);
      }),
      bus.on('sweeper:pass', (r) => {
        reaped.inc(r.reaped);
        timedOut.inc(r.timedOut);
        forced.inc(r.forced);
        stalled.inc(r.stalled);
        expired.inc(r.expired);
        deleted.inc(r.deleted);
      }),
      bus.on('webhook:attempt', ({ outcome }) => webhooks.inc({ outcome })),
      bus.on('attempt:abandoned', ({ job }) => {
        abandoned.inc({ task_type: job.type });
        abandonedPending.inc();
      }),
      bus.on('attempt:abandoned-returned', () => abandonedPending.dec()),
    );
  }

  /** Counts one answered HTTP request (`route`: the route's pattern, never the raw URL). */
  observeRequest(method: string, route: string, status: number, seconds: number): void {
    const labels = { method, route, status: String(status) };
    this.http.inc(labels);
    this.httpSeconds.observe(labels, seconds);
  }

  /** The text exposition format (Prometheus 0.0.4). */
  async render(): Promise<string> {
    if (this.defaultMetrics) {
      this.defaultMetrics = false;
      // Node's metrics, less three gauges named like counters (`nodejs_active_handles_total`...),
      // which `promtool check metrics` rejects.
      const node = new Registry();
      collectDefaultMetrics({ register: node, eventLoopMonitoringPrecision: 10 });
      for (const m of node.getMetricsAsArray()) {
        if (!NOT_COUNTERS.test(m.name)) this.registry.registerMetric(m as unknown as Metric);
      }
    }
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  close(): void {
    for (const off of this.unsubscribe.splice(0)) off();
    this.registry.clear();
  }
}
