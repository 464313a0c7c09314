/**
 * The shapes the dashboard uses that the client SDK does not declare. The API's own types
 * (snapshots, pages, stats, attempts, transitions, task types, dead-letter groups) come from
 * `longhaul/client` (src/client, mapped by web/tsconfig.json and web/vite.config.ts).
 */

/** One webhook delivery of a job (`GET /v1/jobs/{id}/webhooks`; src/facade/reads.ts). */
export interface WebhookDelivery {
  deliveryId: string;
  event: string;
  attempt: number;
  at: string;
  url: string;
  status: number | null;
  ok: boolean;
  error: string | null;
  durationMs: number | null;
}

/** The part of a task input's JSON Schema the submit form reads (`TaskTypeView.inputSchema`). */
export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  enum?: unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  description?: string;
  title?: string;
  items?: JsonSchema;
  [extra: string]: unknown;
}
