/**
 * Enqueueing checked submissions: through the group commit (concurrent submissions share one
 * transaction), in the caller's own transaction (`tx`, where the store can), or as one bulk
 * insert; with the webhook target saved beside the job.
 */
import type { JobBus } from '../channel/bus.js';
import type { LonghaulConfig } from '../config.js';
import { createHash } from 'node:crypto';
import { BatchItemError, IdempotencyConflictError, InvalidOptionsError, LonghaulError, QueueFullError, TenantQuotaExceededError } from '../core/errors.js';
import { quotaFor } from '../core/quotas.js';
import { type JobSnapshot, type Priority, toSnapshot } from '../core/job.js';
import { MAX_IDEMPOTENCY_KEY } from '../core/limits.js';
import { BACKLOG_STATES } from '../core/states.js';
import { cancelNow } from '../core/transitions.js';
import { applyTransitions, type Planned } from '../transitions/apply.js';
import { Batcher } from '../store/batcher.js';
import type { InsertJobsParams, InsertResult, JobQueueStore, NewJob, SqlTransaction, WebhookOutboxStore, WebhookTarget } from '../store/store.js';
import { checkWebhookOption, type WebhookConfig, type WebhookOption, webhookSecretContext } from '../webhooks/service.js';
import { type PrepareContext, prepare } from './prepare.js';

export interface SubmitOptions {
  priority?: Priority;
  /** When to run: a Date, an ISO string or epoch ms. Not with delayMs. */
  runAt?: Date | string | number;
  delayMs?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  metadata?: Record<string, unknown>;
  idempotencyKey?: string;
  tenant?: string;
  parentId?: string;
  /**
   * Notify this URL (Standard Webhooks) when the job succeeds, fails or is cancelled. The URL
   * must pass the SSRF guard (a `WebhookRefusedError`, 422, otherwise); `secret` (whsec_...)
   * defaults to LONGHAUL_WEBHOOK_SECRET.
   */
  webhook?: WebhookOption;
  /**
   * PostgreSQL only: a `pg` client (Client, or PoolClient from `pool.connect()`) with an open
   * transaction. The job is inserted in that transaction: a rollback leaves no job, and workers
   * see it (and are woken by NOTIFY, which PostgreSQL delivers at commit) only once it commits.
   * No `job:submitted` event is emitted for it, since this process cannot tell whether it will commit.
   */
  tx?: SqlTransaction;
}

export interface SubmissionContext extends PrepareContext {
  /** Jobs are inserted; webhook targets are saved beside them. */
  readonly store: JobQueueStore & WebhookOutboxStore;
  readonly bus: JobBus;
  readonly config: PrepareContext['config'] & Pick<LonghaulConfig, 'maxQueued' | 'idempotencyTtlMs' | 'tenantQuotas'>;
  readonly webhookConfig: WebhookConfig;
}

const NEEDS_TRANSACTIONS = 'the tx option (transactional enqueue) needs a PostgreSQL database';

export class Submission {
  /** Concurrent submissions share one transaction (group commit). */
  private readonly inserts: Batcher<NewJob, InsertResult>;

  constructor(private readonly ctx: SubmissionContext) {
    const { store } = ctx;
    this.inserts = new Batcher<NewJob, InsertResult>((jobs) => store.insertJobs({ jobs, ...this.limits(jobs) }));
  }

  /** The limits an insert of these jobs keeps: the global backlog, and the quota of each of their tenants that has one. */
  private limits(jobs: readonly NewJob[]): Pick<InsertJobsParams, 'maxBacklog' | 'idempotencyTtlMs' | 'maxTenantBacklog'> {
    const { maxQueued, idempotencyTtlMs, tenantQuotas } = this.ctx.config;
    let maxTenantBacklog: Record<string, number> | undefined;
    for (const job of jobs) {
      const limit = quotaFor(tenantQuotas, job.tenant).maxQueued;
      if (limit === undefined) continue;
      maxTenantBacklog ??= {};
      maxTenantBacklog[job.tenant] = limit;
    }
    return { idempotencyTtlMs, ...(maxQueued === undefined ? {} : { maxBacklog: maxQueued }), ...(maxTenantBacklog === undefined ? {} : { maxTenantBacklog }) };
  }

  /** Submits a job; `replayed` is true when an idempotency key returned an existing job. */
  enqueue(type: string, input: unknown, options: SubmitOptions): Promise<{ job: JobSnapshot; replayed: boolean }> {
    let prepared: NewJob | Promise<NewJob>;
    try {
      prepared = prepare(this.ctx, type, input, options, Date.now());
    } catch (err) {
      return Promise.reject(err);
    }
    // Most submissions (no webhook, no caller's transaction, no input schema) go straight to
    // the group commit: each await of their own would cost a promise round per request.
    if (!(prepared instanceof Promise) && options.webhook === undefined && options.tx === undefined) {
      const job = prepared;
      return this.inserts.add(job).then((res) => this.afterInsert(res, job));
    }
    return this.enqueuePrepared(prepared, options);
  }

  /** A webhook target as the store keeps it: the job's own secret sealed (never plain text in the database). */
  private async sealed(jobId: string, webhook: { url: string; secret: string | null }): Promise<WebhookTarget> {
    const secret = webhook.secret === null ? null : await this.ctx.webhookConfig.secrets.seal(webhook.secret, webhookSecretContext(jobId));
    return { jobId, url: webhook.url, secret };
  }

  private async enqueuePrepared(prepared: NewJob | Promise<NewJob>, options: SubmitOptions): Promise<{ job: JobSnapshot; replayed: boolean }> {
    const { store } = this.ctx;
    const job = await prepared;
    const webhook = options.webhook === undefined ? null : await checkWebhookOption(options.webhook, this.ctx.webhookConfig);
    if (options.tx !== undefined && !store.capabilities.transactionalEnqueue) throw new InvalidOptionsError(NEEDS_TRANSACTIONS);
    // The target is saved first, under the new job's id: a target whose job never gets inserted
    // (refused, rolled back, process killed) is ignored, as events join it with the job.
    if (webhook) await store.saveWebhook(await this.sealed(job.id, webhook));
    let res: InsertResult;
    try {
      if (options.tx !== undefined) {
        res = await store.insertJob({ job, tx: options.tx, ...this.limits([job]) });
      } else {
        res = await this.inserts.add(job);
      }
    } catch (err) {
      if (webhook) await store.deleteWebhook({ jobId: job.id }).catch(() => {});
      throw err;
    }
    if (webhook && res.kind !== 'created') await store.deleteWebhook({ jobId: job.id });
    return this.afterInsert(res, job, options.tx === undefined);
  }

  /** The caller's answer for one insert; `announce`: whether the job is known to be committed. */
  private afterInsert(res: InsertResult, job: NewJob, announce = true): { job: JobSnapshot; replayed: boolean } {
    switch (res.kind) {
      case 'created':
        if (announce) this.ctx.bus.emit('job:submitted', { job: res.job });
        return { job: toSnapshot(res.job), replayed: false };
      case 'existing':
        return { job: toSnapshot(res.job), replayed: true };
      case 'conflict':
        throw new IdempotencyConflictError(job.idempotencyKey ?? '');
      case 'full':
        throw new QueueFullError(res.backlog, this.ctx.config.maxQueued ?? 0);
      case 'tenant-full':
        throw new TenantQuotaExceededError(res.tenant, res.backlog, res.limit);
    }
  }

  /**
   * Bulk enqueue in one transaction: all the jobs or none. Each job is checked first, and a
   * refused one rejects the batch (a BatchItemError naming it) before anything is written. The
   * queue limit applies to the batch as a whole. One idempotency key covers the batch: each job
   * gets a key derived from it (`<key>#<index>`) and the hash of the whole batch as its request
   * hash, so the per-job machinery answers a replay (every job found again) or a conflict.
   */
  async submitMany(jobs: ReadonlyArray<BatchItem>, options: BatchOptions = {}): Promise<{ jobs: JobSnapshot[]; replayed: boolean }> {
    const { store, config } = this.ctx;
    const batchKey = options.idempotencyKey;
    if (batchKey !== undefined && (typeof batchKey !== 'string' || batchKey.length === 0 || batchKey.length > MAX_IDEMPOTENCY_KEY)) {
      throw new InvalidOptionsError(`idempotencyKey must be a string of 1 to ${MAX_IDEMPOTENCY_KEY} characters`, 'idempotencyKey');
    }
    const now = Date.now();
    const prepared: NewJob[] = [];
    const webhooks: ({ url: string; secret: string | null } | null)[] = [];
    for (const [i, j] of jobs.entries()) {
      try {
        const own = j.options ?? {};
        if (batchKey !== undefined && own.idempotencyKey !== undefined) {
          throw new InvalidOptionsError('a job of a batch with an idempotency key has no key of its own', 'idempotencyKey');
        }
        // With a batch key, each job is prepared as keyed so that it gets the hash of its own request.
        prepared.push(await prepare(this.ctx, j.type, j.input, batchKey === undefined ? own : { ...own, idempotencyKey: batchKey }, now));
        webhooks.push(own.webhook === undefined ? null : await checkWebhookOption(own.webhook, this.ctx.webhookConfig));
      } catch (err) {
        throw err instanceof LonghaulError ? new BatchItemError(i, err) : err;
      }
    }
    if (batchKey !== undefined) {
      const hash = createHash('sha256');
      for (const job of prepared) hash.update(`${job.requestHash}\n`);
      const batchHash = hash.digest('base64url');
      prepared.forEach((job, i) => {
        job.idempotencyKey = `${batchKey}#${i}`;
        job.requestHash = batchHash;
      });
    }
    const txs = new Set(jobs.map((j) => j.options?.tx));
    if (txs.size > 1) throw new InvalidOptionsError('submitMany takes one tx for the whole batch or none');
    const [tx] = txs;
    if (tx !== undefined && !store.capabilities.transactionalEnqueue) throw new InvalidOptionsError(NEEDS_TRANSACTIONS);
    // The limit is checked for the whole batch before its transaction (the store's own check is
    // per job, and would insert the jobs that fit). Concurrent submissions may take the backlog
    // past the limit by one batch at most.
    let maxBacklog: number | undefined;
    if (config.maxQueued !== undefined && prepared.length > 0) {
      const counts = await store.countByState({});
      const backlog = BACKLOG_STATES.reduce((n, s) => n + counts[s], 0);
      // A full queue still answers a replay: keyed jobs already stored are found, new ones refused (limit 0).
      if (backlog + prepared.length > config.maxQueued) {
        if (batchKey === undefined) throw new QueueFullError(backlog, config.maxQueued);
        maxBacklog = 0;
      }
    }
    for (const [i, w] of webhooks.entries()) if (w) await store.saveWebhook(await this.sealed((prepared[i] as NewJob).id, w));
    // A tenant's quota applies to the batch as a whole, in its transaction: over it, no job is inserted.
    const { maxTenantBacklog } = this.limits(prepared);
    const results = await store.insertJobs({
      jobs: prepared,
      idempotencyTtlMs: config.idempotencyTtlMs,
      ...(maxBacklog === undefined ? {} : { maxBacklog }),
      ...(maxTenantBacklog === undefined ? {} : { maxTenantBacklog, wholeBatch: true }),
      ...(tx === undefined ? {} : { tx }),
    });
    for (const [i, r] of results.entries()) if (webhooks[i] && r.kind !== 'created') await store.deleteWebhook({ jobId: (prepared[i] as NewJob).id });
    const overQuota = results.find((r) => r.kind === 'tenant-full');
    if (overQuota) {
      // Nothing was inserted; the jobs found again by their key need no withdrawal.
      const refusedJobs = results.filter((r) => r.kind === 'tenant-full' && r.tenant === overQuota.tenant).length;
      throw new TenantQuotaExceededError(overQuota.tenant, overQuota.backlog, overQuota.limit, refusedJobs);
    }
    const refused = results.find((r) => r.kind === 'conflict' || r.kind === 'full');
    if (refused) {
      await this.withdraw(results, now);
      if (refused.kind === 'full') throw new QueueFullError(refused.backlog, config.maxQueued ?? 0);
      throw new IdempotencyConflictError(batchKey ?? '');
    }
    const replayed = results.length > 0 && results.every((r) => r.kind === 'existing');
    return { jobs: results.map((r, i) => this.afterInsert(r, prepared[i] as NewJob, tx === undefined).job), replayed };
  }

  /**
   * Cancels the jobs a refused batch created: a batch key reused for a longer, different batch
   * finds its first jobs (a conflict) but creates the others, in the same transaction. Best
   * effort: a job a worker claimed meanwhile is left to run.
   */
  private async withdraw(results: InsertResult[], now: number): Promise<void> {
    const planned: Planned[] = [];
    for (const r of results) {
      if (r.kind === 'created') planned.push({ job: r.job, write: { ...cancelNow(r.job, now), reason: 'idempotency conflict in its batch' } });
    }
    await applyTransitions(this.ctx.store, this.ctx.bus, planned);
  }
}

/** One job of a batch: what `submit` takes. */
export interface BatchItem {
  type: string;
  input?: unknown;
  options?: SubmitOptions;
}

export interface BatchOptions {
  /** One key for the whole batch: the same batch again returns the same jobs; a different one is an IdempotencyConflictError. */
  idempotencyKey?: string;
}
