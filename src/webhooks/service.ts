/**
 * Webhooks wired to jobs.
 *
 * - Submission: `checkWebhookOption` validates `{url, secret?}` (shape → 400, SSRF guard or no
 *   secret → 422); the target is saved in the store next to the job (`job_webhooks`).
 * - Events: when a job with a target ends (succeeded, failed, cancelled), `dispatchWebhookEvents`
 *   (run by the sweeper every pass, and at once after a local transition) turns it into an
 *   internal delivery job. The store keeps the pending events (an outbox): a process killed
 *   between the job's end and the enqueue leaves the event pending, and the next pass enqueues
 *   it; the idempotency key `<jobId>:<finishedAt>` makes a repeated enqueue a no-op.
 * - Delivery: the internal task `longhaul.webhook`, run by any worker, sends one attempt per
 *   job attempt and retries on the schedule (LONGHAUL_WEBHOOK_RETRY_SCHEDULE) by throwing a
 *   RetryableError with the next delay. It is a durable job like any other: a worker killed
 *   mid-delivery loses its lease and the attempt runs again elsewhere.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { FatalError, InvalidOptionsError, LonghaulError, RetryableError, UnstorableValueError } from '../core/errors.js';
import { uuidv7 } from '../core/ids.js';
import type { JobSnapshot } from '../core/job.js';
import type { SecretBox } from '../core/secret-box.js';
import { escapeUnstorable, findUnstorable, hasUnstorable, unstorableIssue } from '../core/storable.js';
import type { InsertResult, NewJob, WebhookOutboxStore } from '../store/store.js';
import { defineTask, type Task } from '../task-api/define.js';
import { DEFAULT_WEBHOOK_TIMEOUT_MS, deliverWebhook } from './deliver.js';
import { type WebhookEventType, webhookEventType } from './payload.js';
import { DEFAULT_RETRY_SCHEDULE, parseRetrySchedule, retryDelayAfter } from './retry-schedule.js';
import { parseWebhookSecret } from './signing.js';
import { type Allowlist, checkWebhookUrl, parseAllowlist, type Resolver } from './ssrf.js';

/** The internal delivery task. Users cannot submit it (the type is reserved). */
export const WEBHOOK_TASK_TYPE = 'longhaul.webhook';
/**
 * The tenant of internal jobs. API keys cannot name it (a tenant never contains `:`), so users'
 * lists, stats and streams never show delivery jobs; the library API without a tenant does.
 */
export const INTERNAL_TENANT = 'longhaul:internal';

export const MAX_WEBHOOK_URL = 2048;

export interface WebhookConfig {
  /** LONGHAUL_WEBHOOK_SECRET: used when a submission gives no secret. */
  secret: string | null;
  /** Seals a job's own secret before the store keeps it, and opens it for delivery (AES-256-GCM). */
  secrets: SecretBox;
  allowlist: Allowlist;
  /** Delays between attempts (ms). */
  schedule: number[];
  timeoutMs: number;
  /** DNS resolution (tests inject one). */
  resolve?: Resolver;
}

export interface WebhookConfigOptions {
  secret?: string | null;
  /** Hosts, `*.suffix`, IPs or CIDRs, comma-separated (as LONGHAUL_WEBHOOK_ALLOWLIST). */
  allowlist?: string;
  /** e.g. `5s,5m,30m` (as LONGHAUL_WEBHOOK_RETRY_SCHEDULE), or delays in ms. */
  retrySchedule?: string | number[];
  timeoutMs?: number;
  resolve?: Resolver;
}

export function resolveWebhookConfig(secrets: SecretBox, options: WebhookConfigOptions = {}, env: Record<string, string | undefined> = process.env): WebhookConfig {
  const envSecret = env.LONGHAUL_WEBHOOK_SECRET?.trim() ? env.LONGHAUL_WEBHOOK_SECRET.trim() : null;
  const secret = options.secret !== undefined ? options.secret : envSecret;
  if (secret !== null) parseWebhookSecret(secret, 'LONGHAUL_WEBHOOK_SECRET');
  const scheduleOption = options.retrySchedule;
  const schedule = Array.isArray(scheduleOption)
    ? scheduleOption.map((ms) => {
        if (!Number.isInteger(ms) || ms < 1) throw new Error('webhook retry delays must be positive integers of ms');
        return ms;
      })
    : parseRetrySchedule(scheduleOption ?? (env.LONGHAUL_WEBHOOK_RETRY_SCHEDULE?.trim() || DEFAULT_RETRY_SCHEDULE));
  const timeoutMs = options.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
  return {
    secret,
    secrets,
    allowlist: parseAllowlist(options.allowlist ?? env.LONGHAUL_WEBHOOK_ALLOWLIST),
    schedule,
    timeoutMs,
    ...(options.resolve ? { resolve: options.resolve } : {}),
  };
}

/** The webhook URL was refused by the SSRF guard, or no secret is available: 422. */
export class WebhookRefusedError extends LonghaulError {
  constructor(message: string, code = 'WEBHOOK_URL_REFUSED') {
    super(message, code, 422);
  }
}

/** Shape errors of the `webhook` option: 400. */
export class InvalidWebhookError extends InvalidOptionsError {
  constructor(message: string, field = 'webhook') {
    super(message, field);
  }
}

export interface WebhookOption {
  url: string;
  /** `whsec_<base64>`; default: the server's LONGHAUL_WEBHOOK_SECRET. */
  secret?: string;
}

/** Validates a submission's `webhook` option; the target to save (secret null = the server's). */
export async function checkWebhookOption(option: unknown, config: WebhookConfig): Promise<{ url: string; secret: string | null }> {
  if (typeof option !== 'object' || option === null || Array.isArray(option)) throw new InvalidWebhookError('webhook must be an object {url, secret?}');
  const { url, secret, ...rest } = option as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw new InvalidWebhookError(`webhook has unknown field "${unknown[0]}" (expected url and secret)`);
  if (typeof url !== 'string' || url === '' || url.length > MAX_WEBHOOK_URL) throw new InvalidWebhookError(`webhook.url must be a string of 1 to ${MAX_WEBHOOK_URL} characters`, 'webhook.url');
  if (hasUnstorable(url)) {
    const at = findUnstorable(url, 'webhook.url');
    if (at) throw new UnstorableValueError(at.path, unstorableIssue(at));
  }
  if (secret !== undefined) {
    if (typeof secret !== 'string') throw new InvalidWebhookError('webhook.secret must be a string (whsec_<base64>)', 'webhook.secret');
    try {
      parseWebhookSecret(secret, 'webhook.secret');
    } catch (err) {
      throw new InvalidWebhookError((err as Error).message, 'webhook.secret');
    }
  }
  const check = await checkWebhookUrl(url, { allowlist: config.allowlist, ...(config.resolve ? { resolve: config.resolve } : {}) });
  if (!check.ok) throw new WebhookRefusedError(`webhook.url is refused: ${check.reason}`);
  if (secret === undefined && config.secret === null) {
    throw new WebhookRefusedError('webhook.secret is required: this server has no LONGHAUL_WEBHOOK_SECRET', 'WEBHOOK_SECRET_MISSING');
  }
  return { url, secret: (secret as string | undefined) ?? null };
}

/** What a job's sealed webhook secret is bound to: its job (a row copied onto another job does not open). */
export function webhookSecretContext(jobId: string): string {
  return `job_webhooks.secret:${jobId}`;
}

interface DeliveryInput {
  jobId: string;
  event: WebhookEventType;
  finishedAt: number;
}

/** A URL fit for the delivery log: user and password replaced. */
export function redactWebhookUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.username || url.password) {
      url.username = '***';
      url.password = '';
    }
    return url.toString();
  } catch {
    return raw.slice(0, 200);
  }
}

export interface WebhookTaskDeps {
  store: WebhookOutboxStore;
  config: WebhookConfig;
  /** The job's current snapshot (with fresh signed result URLs), any tenant. */
  snapshot(jobId: string): Promise<JobSnapshot | null>;
  /** Told how each delivery attempt ended (metrics). */
  attempted?(outcome: 'delivered' | 'failed' | 'gone' | 'refused'): void;
}

/** The internal delivery task: one HTTP attempt per job attempt, retried on the configured schedule. */
export function webhookTask(deps: WebhookTaskDeps): Task {
  const { store, config } = deps;
  return defineTask({
    type: WEBHOOK_TASK_TYPE,
    maxAttempts: config.schedule.length + 1,
    // One attempt is at most the HTTP timeout plus a few store calls.
    timeoutMs: config.timeoutMs + 30_000,
    priority: 'high',
    stallTimeoutMs: null,
    async run(raw, ctx) {
      const input = raw as DeliveryInput;
      const target = await store.getWebhook({ jobId: input.jobId });
      if (!target) return { delivered: false, reason: 'the job has no webhook any more' };
      const secret = target.secret === null ? config.secret : await config.secrets.open(target.secret, webhookSecretContext(input.jobId));
      if (!secret) throw new FatalError('no webhook secret: the submission gave none and LONGHAUL_WEBHOOK_SECRET is not set', { code: 'WEBHOOK_SECRET_MISSING' });
      const snapshot = await deps.snapshot(input.jobId);
      if (!snapshot) throw new FatalError(`job ${input.jobId} no longer exists`, { code: 'NOT_FOUND' });
      const payload = { type: input.event, timestamp: new Date(input.finishedAt).toISOString(), data: snapshot };
      const result = await deliverWebhook({
        url: target.url,
        secret,
        payload,
        id: ctx.job.id,
        timeoutMs: config.timeoutMs,
        allowlist: config.allowlist,
        ...(config.resolve ? { resolve: config.resolve } : {}),
      });
      await store.recordWebhookDelivery({
        jobId: input.jobId,
        deliveryId: ctx.job.id,
        eventType: input.event,
        attempt: ctx.attempt,
        at: Date.now(),
        url: redactWebhookUrl(target.url),
        status: result.status,
        ok: result.ok,
        // Diagnostic text, from the receiver: escaped where no store could keep it (core/storable.ts).
        error: result.error === null ? null : escapeUnstorable(result.error),
        durationMs: result.durationMs,
        responseSnippet: result.responseSnippet === null ? null : escapeUnstorable(result.responseSnippet),
      });
      deps.attempted?.(result.ok ? 'delivered' : result.gone ? 'gone' : result.refused ? 'refused' : 'failed');
      if (result.ok) return { delivered: true, status: result.status, attempt: ctx.attempt };
      if (result.gone) throw new FatalError('the receiver answered 410 Gone: no further attempts', { code: 'WEBHOOK_GONE' });
      if (result.refused) throw new FatalError(`webhook URL refused at delivery: ${result.error}`, { code: 'WEBHOOK_URL_REFUSED' });
      const delay = retryDelayAfter(ctx.attempt, config.schedule);
      throw new RetryableError(`delivery failed: ${result.error ?? 'unknown error'}`, { code: 'WEBHOOK_DELIVERY_FAILED', ...(delay === null ? {} : { delayMs: delay }) });
    },
  });
}

export interface DispatchDeps {
  store: WebhookOutboxStore;
  config: WebhookConfig;
  /** Inserts an internal job (the caller announces it to local workers). */
  insert(job: NewJob): Promise<InsertResult>;
  heartbeatTimeoutMs: number;
  logger: Logger;
}

/** Turns pending webhook events into delivery jobs; returns how many were enqueued. */
export async function dispatchWebhookEvents(deps: DispatchDeps, limit = 100): Promise<number> {
  const events = await deps.store.pendingWebhookEvents({ limit });
  let enqueued = 0;
  for (const e of events) {
    const event = webhookEventType(e.state);
    if (!event) continue;
    const now = Date.now();
    const key = `${e.jobId}:${e.finishedAt}`;
    const input: DeliveryInput = { jobId: e.jobId, event, finishedAt: e.finishedAt };
    const res = await deps.insert({
      id: uuidv7(now),
      tenant: INTERNAL_TENANT,
      type: WEBHOOK_TASK_TYPE,
      state: 'queued',
      priority: 'high',
      input,
      metadata: { jobId: e.jobId, tenant: e.tenant },
      maxAttempts: deps.config.schedule.length + 1,
      runAt: now,
      createdAt: now,
      timeoutMs: deps.config.timeoutMs + 30_000,
      heartbeatTimeoutMs: deps.heartbeatTimeoutMs,
      stallTimeoutMs: null,
      resultTtlMs: 7 * 86_400_000,
      parentId: null,
      idempotencyKey: key,
      requestHash: createHash('sha256').update(key).digest('base64url'),
    });
    if (res.kind === 'full') {
      deps.logger.warn({ jobId: e.jobId }, 'queue full: webhook delivery will be enqueued later');
      break;
    }
    await deps.store.markWebhookEvent({ jobId: e.jobId, finishedAt: e.finishedAt });
    if (res.kind === 'created') enqueued++;
  }
  return enqueued;
}
