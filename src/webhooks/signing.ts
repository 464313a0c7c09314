/**
 * Standard Webhooks signing (www.standardwebhooks.com): the receiver gets `webhook-id`,
 * `webhook-timestamp` (unix seconds) and `webhook-signature: v1,<base64 HMAC-SHA256 of
 * "<id>.<timestamp>.<body>">`, keyed with the bytes of the `whsec_<base64>` secret. The
 * signature is made by the `standardwebhooks` package (the reference library, which the tests
 * also verify with); this module checks secrets and ids more strictly than it does.
 */
import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

const PREFIX = 'whsec_';
const MIN_KEY_BYTES = 24;
const MAX_KEY_BYTES = 64;

/** The key bytes of a `whsec_<base64>` secret; a clear error (never echoing the secret) otherwise. */
export function parseWebhookSecret(secret: string, what = 'webhook secret'): Buffer {
  if (typeof secret !== 'string' || !secret.startsWith(PREFIX)) throw new Error(`${what} must look like whsec_<base64>`);
  const b64 = secret.slice(PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64) || b64.length % 4 !== 0) throw new Error(`${what} must be whsec_ followed by standard base64`);
  const key = Buffer.from(b64, 'base64');
  if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES)
    throw new Error(`${what} must encode ${MIN_KEY_BYTES} to ${MAX_KEY_BYTES} bytes (got ${key.length})`);
  return key;
}

export function isWebhookSecret(secret: unknown): secret is string {
  try {
    parseWebhookSecret(secret as string);
    return true;
  } catch {
    return false;
  }
}

/** A new random secret (32 bytes). */
export function generateWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

export interface SignParams {
  /** The message id: the same for every delivery attempt of one event, so receivers can deduplicate. */
  id: string;
  /** Unix seconds of this attempt (receivers refuse old timestamps, so each attempt signs anew). */
  timestamp: number;
  /** The exact bytes sent as the body. */
  body: string;
  secret: string;
}

export function webhookSignature({ id, timestamp, body, secret }: SignParams): string {
  if (!/^[^\s.,]{1,255}$/.test(id)) throw new Error('webhook id must be 1–255 characters without spaces, dots or commas');
  // The key as raw bytes: the secret's format is checked here, once (the package would take any base64).
  return new Webhook(parseWebhookSecret(secret), { format: 'raw' }).sign(id, new Date(Math.floor(timestamp) * 1000), body);
}

/** The three Standard Webhooks headers for one delivery attempt. */
export function webhookHeaders(params: SignParams): Record<'webhook-id' | 'webhook-timestamp' | 'webhook-signature', string> {
  return {
    'webhook-id': params.id,
    'webhook-timestamp': String(Math.floor(params.timestamp)),
    'webhook-signature': webhookSignature(params),
  };
}
