/**
 * PostgresStore's part of the webhook contract (WebhookOutboxStore in ../store.ts): each job's
 * webhook target, the outbox of job ends to announce (read from the jobs themselves, see
 * pendingWebhookEvents), and the delivery log.
 */
import type pg from 'pg';
import { isUuid } from '../../core/ids.js';
import type { JobState } from '../../core/states.js';
import type { WebhookDeliveryEntry, WebhookEvent, WebhookTarget } from '../store.js';

/** The store's rows in array mode, by a named (prepared) statement. */
type Rows = (name: string, text: string, values: unknown[]) => Promise<unknown[][]>;

export class PgWebhookOps {
  constructor(
    private readonly pool: pg.Pool,
    /** The quoted schema. */
    private readonly s: string,
    private readonly rows: Rows,
  ) {}

  async saveWebhook(params: WebhookTarget): Promise<void> {
    await this.pool.query(
      `INSERT INTO ${this.s}.job_webhooks (job_id, url, secret) VALUES ($1, $2, $3)
       ON CONFLICT (job_id) DO UPDATE SET url = excluded.url, secret = excluded.secret, pending = true, notified_finished_at = NULL`,
      [params.jobId, params.url, params.secret],
    );
  }

  async deleteWebhook(params: { jobId: string }): Promise<void> {
    if (!isUuid(params.jobId)) return;
    await this.pool.query(`DELETE FROM ${this.s}.job_webhooks WHERE job_id = $1`, [params.jobId]);
  }

  async getWebhook(params: { jobId: string }): Promise<WebhookTarget | null> {
    if (!isUuid(params.jobId)) return null;
    const res = await this.pool.query<{ url: string; secret: string | null }>(`SELECT url, secret FROM ${this.s}.job_webhooks WHERE job_id = $1`, [params.jobId]);
    const row = res.rows[0];
    return row ? { jobId: params.jobId, url: row.url, secret: row.secret } : null;
  }

  async pendingWebhookEvents(params: { limit: number }): Promise<WebhookEvent[]> {
    const rows = await this.rows(
      'pending_webhooks',
      // The pending webhooks first (few, by their partial index), never a walk of every finished job.
      `WITH w AS MATERIALIZED (SELECT job_id, notified_finished_at FROM ${this.s}.job_webhooks WHERE pending)
       SELECT j.id::text, j.tenant, j.state, j.finished_at FROM w JOIN ${this.s}.jobs j ON j.id = w.job_id
       WHERE j.state IN ('succeeded', 'failed', 'cancelled') AND j.finished_at IS NOT NULL
         AND w.notified_finished_at IS DISTINCT FROM j.finished_at
       ORDER BY j.finished_at LIMIT $1`,
      [Math.max(1, Math.floor(params.limit))],
    );
    return rows.map((r) => ({ jobId: r[0] as string, tenant: r[1] as string, state: r[2] as JobState, finishedAt: Number(r[3]) }));
  }

  async markWebhookEvent(params: { jobId: string; finishedAt: number }): Promise<void> {
    await this.pool.query(`UPDATE ${this.s}.job_webhooks SET pending = false, notified_finished_at = $2 WHERE job_id = $1`, [params.jobId, params.finishedAt]);
  }

  async rearmWebhook(params: { jobId: string }): Promise<void> {
    if (!isUuid(params.jobId)) return;
    await this.pool.query(`UPDATE ${this.s}.job_webhooks SET pending = true WHERE job_id = $1`, [params.jobId]);
  }

  async rearmWebhooks(params: { jobIds: readonly string[] }): Promise<void> {
    const ids = params.jobIds.filter(isUuid);
    if (ids.length === 0) return;
    await this.pool.query(`UPDATE ${this.s}.job_webhooks SET pending = true WHERE job_id = ANY($1::uuid[])`, [ids]);
  }

  async recordWebhookDelivery(e: WebhookDeliveryEntry): Promise<void> {
    await this.pool.query(
      `INSERT INTO ${this.s}.webhook_deliveries (job_id, delivery_id, event_type, attempt, at, url, status, ok, error, duration_ms, response_snippet)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
      [e.jobId, e.deliveryId, e.eventType, e.attempt, e.at, e.url, e.status, e.ok, e.error, Math.round(e.durationMs), e.responseSnippet],
    );
  }

  async listWebhookDeliveries(params: { jobId: string; limit: number }): Promise<WebhookDeliveryEntry[]> {
    if (!isUuid(params.jobId)) return [];
    const rows = await this.rows(
      'list_deliveries',
      `SELECT job_id::text, delivery_id::text, event_type, attempt, at, url, status, ok, error, duration_ms, response_snippet
       FROM ${this.s}.webhook_deliveries WHERE job_id = $1 ORDER BY seq LIMIT $2`,
      [params.jobId, Math.max(1, Math.floor(params.limit))],
    );
    return rows.map((r) => ({
      jobId: r[0] as string,
      deliveryId: r[1] as string,
      eventType: r[2] as string,
      attempt: Number(r[3]),
      at: Number(r[4]),
      url: r[5] as string,
      status: r[6] === null ? null : Number(r[6]),
      ok: r[7] === true,
      error: (r[8] as string | null) ?? null,
      durationMs: Number(r[9]),
      responseSnippet: (r[10] as string | null) ?? null,
    }));
  }
}
