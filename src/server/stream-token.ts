/**
 * Short-lived signed tokens for streams opened where headers cannot be set (EventSource,
 * browser WebSocket). A token names its tenant, the job ids it may stream (or "*" for the
 * tenant-wide feed) and its expiry, signed with HMAC-SHA256.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { parseJson } from '../core/json-text.js';

export interface StreamGrant {
  tenant: string;
  /** Job ids, or '*' for every stream of the tenant (the tenant-wide feed and any job). */
  jobs: string[] | '*';
  exp: number;
}

/** The shortest stream-token secret accepted, as for the URL-signing secret: a short one can be guessed offline from any token. */
export const MIN_STREAM_TOKEN_SECRET_LENGTH = 32;

export class StreamTokens {
  private readonly secret: Buffer;
  constructor(secret?: string) {
    if (secret !== undefined && secret.length < MIN_STREAM_TOKEN_SECRET_LENGTH) {
      throw new Error(`LONGHAUL_STREAM_TOKEN_SECRET (streamTokenSecret) must be at least ${MIN_STREAM_TOKEN_SECRET_LENGTH} characters`);
    }
    this.secret = secret ? Buffer.from(secret, 'utf8') : randomBytes(32);
  }

  mint(grant: StreamGrant): string {
    const body = Buffer.from(JSON.stringify({ t: grant.tenant, j: grant.jobs, e: grant.exp }), 'utf8').toString('base64url');
    return `${body}.${this.sign(body)}`;
  }

  verify(token: string, now = Date.now()): StreamGrant | null {
    const dot = token.indexOf('.');
    if (dot <= 0) return null;
    const body = token.slice(0, dot);
    const sig = Buffer.from(token.slice(dot + 1), 'base64url');
    const expected = Buffer.from(this.sign(body), 'base64url');
    if (sig.length !== expected.length || !timingSafeEqual(sig, expected)) return null;
    try {
      const v = parseJson(Buffer.from(body, 'base64url').toString('utf8')) as { t: string; j: string[] | '*'; e: number };
      if (typeof v.e !== 'number' || v.e < now) return null;
      return { tenant: v.t, jobs: v.j, exp: v.e };
    } catch {
      return null;
    }
  }

  private sign(body: string): string {
    return createHmac('sha256', this.secret).update(body).digest('base64url');
  }
}

export function grantAllows(grant: StreamGrant, jobId: string | '*'): boolean {
  if (grant.jobs === '*') return true;
  return jobId !== '*' && grant.jobs.includes(jobId);
}
