/**
 * SqliteStore's part of the webhook contract (WebhookOutboxStore in ../store.ts): each job's
 * webhook target, the outbox of job ends to announce (read from the jobs themselves, see
 * PENDING_WEBHOOKS_SQL), and the delivery log. Every write is one IMMEDIATE transaction of the store.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { JobState } from '../../core/states.js';
import type { WebhookDeliveryEntry, WebhookEvent, WebhookTarget } from '../store.js';
import { statementCache } from './sql.js';

/** The store's IMMEDIATE transaction (`rows`: about how many rows it writes, for the checkpointer). */
type Write = <T>(fn: () => T, rows?: number) => T;

/**
 * Ended jobs with a webhook whose end was not yet turned into a delivery job. CROSS JOIN: SQLite
 * then reads the (few) pending webhooks first; with a plain JOIN it walked every finished job in
 * finished_at order to probe job_webhooks (a fifth of a busy worker's time).
 */
export const PENDING_WEBHOOKS_SQL = `SELECT j.id, j.tenant, j.state, j.finished_at FROM job_webhooks w CROSS JOIN jobs j ON j.id = w.job_id
   WHERE w.pending = 1 AND j.state IN ('succeeded', 'failed', 'cancelled') AND j.finished_at IS NOT NULL
     AND (w.notified_finished_at IS NULL OR w.notified_finished_at <> j.finished_at)
   ORDER BY j.finished_at LIMIT ?`;

export class SqliteWebhookOps {
  /** The store's statement cache (same connection). */
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly write: Write,
  ) {
    this.stmt = statementCache(db);
  }

  async saveWebhook(params: WebhookTarget): Promise<void> {
    this.write(() =>
      this.stmt(
        `INSERT INTO job_webhooks (job_id, url, secret) VALUES (?, ?, ?)
         ON CONFLICT (job_id) DO UPDATE SET url = excluded.url, secret = excluded.secret, pending = 1, notified_finished_at = NULL`,
      ).run(params.jobId, params.url, params.secret),
    );
  }

  async deleteWebhook(params: { jobId: string }): Promise<void> {
    this.write(() => this.stmt('DELETE FROM job_webhooks WHERE job_id = ?').run(params.jobId));
  }

  async getWebhook(params: { jobId: string }): Promise<WebhookTarget | null> {
    const row = this.stmt('SELECT url, secret FROM job_webhooks WHERE job_id = ?').get(params.jobId) as { url: string; secret: string | null } | undefined;
    return row ? { jobId: params.jobId, url: row.url, secret: row.secret } : null;
  }

  async pendingWebhookEvents(params: { limit: number }): Promise<WebhookEvent[]> {
    const rows = this.stmt(PENDING_WEBHOOKS_SQL).all(Math.max(1, Math.floor(params.limit))) as { id: string; tenant: string; state: JobState; finished_at: number }[];
    return rows.map((r) => ({ jobId: r.id, tenant: r.tenant, state: r.state, finishedAt: r.finished_at }));
  }

  async markWebhookEvent(params: { jobId: string; finishedAt: number }): Promise<void> {
    this.write(() => this.stmt('UPDATE job_webhooks SET pending = 0, notified_finished_at = ? WHERE job_id = ?').run(params.finishedAt, params.jobId));
  }

  async rearmWebhook(params: { jobId: string }): Promise<void> {
    this.write(() => this.stmt('UPDATE job_webhooks SET pending = 1 WHERE job_id = ?').run(params.jobId));
  }

  async rearmWebhooks(params: { jobIds: readonly string[] }): Promise<void> {
    if (params.jobIds.length === 0) return;
    this.write(() => this.stmt('UPDATE job_webhooks SET pending = 1 WHERE job_id IN (SELECT value FROM json_each(?))').run(JSON.stringify(params.jobIds)));
  }

  async recordWebhookDelivery(e: WebhookDeliveryEntry): Promise<void> {
    this.write(() =>
      this.stmt(
        `INSERT INTO webhook_deliveries (job_id, delivery_id, event_type, attempt, at, url, status, ok, error, duration_ms, response_snippet)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(e.jobId, e.deliveryId, e.eventType, e.attempt, e.at, e.url, e.status, e.ok ? 1 : 0, e.error, e.durationMs, e.responseSnippet),
    );
  }

  async listWebhookDeliveries(params: { jobId: string; limit: number }): Promise<WebhookDeliveryEntry[]> {
    const rows = this.stmt(
      `SELECT job_id, delivery_id, event_type, attempt, at, url, status, ok, error, duration_ms, response_snippet
       FROM webhook_deliveries WHERE job_id = ? ORDER BY seq LIMIT ?`,
    ).all(params.jobId, Math.max(1, Math.floor(params.limit))) as Record<string, unknown>[];
    return rows.map((r) => ({
      jobId: r.job_id as string,
      deliveryId: r.delivery_id as string,
      eventType: r.event_type as string,
      attempt: r.attempt as number,
      at: r.at as number,
      url: r.url as string,
      status: (r.status as number | null) ?? null,
      ok: r.ok === 1,
      error: (r.error as string | null) ?? null,
      durationMs: r.duration_ms as number,
      responseSnippet: (r.response_snippet as string | null) ?? null,
    }));
  }
}
