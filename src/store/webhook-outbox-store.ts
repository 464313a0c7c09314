/** The webhook part of the storage contract (see store.ts): webhook targets, the outbox of job ends, the delivery log. */
import type { JobState } from '../core/states.js';

/** A job's webhook target. The secret is null when the server's LONGHAUL_WEBHOOK_SECRET applies. */
export interface WebhookTarget {
  jobId: string;
  url: string;
  secret: string | null;
}

/** A job that reached succeeded, failed or cancelled and whose webhook event is not yet enqueued. */
export interface WebhookEvent {
  jobId: string;
  tenant: string;
  state: JobState;
  finishedAt: number;
}

/** One delivery attempt, as the delivery log shows it. Never holds the secret. */
export interface WebhookDeliveryEntry {
  jobId: string;
  /** The internal delivery job (its id is the event's `webhook-id`). */
  deliveryId: string;
  eventType: string;
  attempt: number;
  at: number;
  url: string;
  status: number | null;
  ok: boolean;
  error: string | null;
  durationMs: number;
  responseSnippet: string | null;
}

/**
 * Webhook targets, the outbox of job ends to announce, and the delivery log. Guarantees:
 * - A pending event is read from the job itself (ended, and that end not yet marked), not
 *   written beside it: no transition can end a job without its event, and a process killed
 *   between enqueueing a delivery and marking the event finds the event again (the caller
 *   keys its delivery job by job id and end time, so that does not send twice).
 * - Each end of a job is reported once; a manual retry re-arms the target, so the next end
 *   is reported too, never the same end again.
 * - A target saved for a job that was never inserted is ignored.
 */
export interface WebhookOutboxStore {
  /** Saves the webhook target of a job (before the job is inserted: a target without a job is ignored). */
  saveWebhook(params: WebhookTarget): Promise<void>;
  deleteWebhook(params: { jobId: string }): Promise<void>;
  getWebhook(params: { jobId: string }): Promise<WebhookTarget | null>;
  /** Jobs with a webhook that ended (succeeded, failed, cancelled) since their last event was enqueued. */
  pendingWebhookEvents(params: { limit: number }): Promise<WebhookEvent[]>;
  /** The event of the job's end at `finishedAt` is enqueued: it is not pending any more. */
  markWebhookEvent(params: { jobId: string; finishedAt: number }): Promise<void>;
  /** The job runs again (manual retry): its next end sends an event again. */
  rearmWebhook(params: { jobId: string }): Promise<void>;
  /** The same for many jobs in one write (a bulk replay of dead letters); jobs without a target are skipped. */
  rearmWebhooks(params: { jobIds: readonly string[] }): Promise<void>;
  recordWebhookDelivery(params: WebhookDeliveryEntry): Promise<void>;
  /** The job's delivery log, oldest first. */
  listWebhookDeliveries(params: { jobId: string; limit: number }): Promise<WebhookDeliveryEntry[]>;
}
