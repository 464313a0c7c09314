/** The webhook event for a job that reached a terminal state: `{type, timestamp, data: snapshot}`. */
import type { JobSnapshot } from '../core/job.js';
import type { JobState } from '../core/states.js';

export const WEBHOOK_EVENT_TYPES = ['job.succeeded', 'job.failed', 'job.cancelled'] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

export interface WebhookPayload {
  type: WebhookEventType;
  /** ISO 8601: when the event happened (the job's finishedAt), not when it was delivered. */
  timestamp: string;
  data: JobSnapshot;
}

/** The event a state change into `state` sends, or null (only succeeded, failed and cancelled notify). */
export function webhookEventType(state: JobState): WebhookEventType | null {
  switch (state) {
    case 'succeeded':
      return 'job.succeeded';
    case 'failed':
      return 'job.failed';
    case 'cancelled':
      return 'job.cancelled';
    default:
      return null;
  }
}

export function buildWebhookPayload(snapshot: JobSnapshot, now: number = Date.now()): WebhookPayload {
  const type = webhookEventType(snapshot.status);
  if (!type) throw new Error(`job ${snapshot.id} is ${snapshot.status}: only succeeded, failed and cancelled jobs send webhooks`);
  return { type, timestamp: snapshot.finishedAt ?? new Date(now).toISOString(), data: snapshot };
}
