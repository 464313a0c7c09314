/** Errors of the client SDK. */
import type { FieldIssue } from '../core/errors.js';
import type { JobSnapshot } from '../core/job.js';
import { parseJson } from '../core/json-text.js';

/**
 * Parses a `Retry-After` header: delay-seconds (`"5"`) or an HTTP date. Returns milliseconds
 * (never negative), or null when the header is absent or unreadable.
 */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | null {
  if (value === null || value === undefined) return null;
  const v = value.trim();
  if (v === '') return null;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

function str(v: unknown): string | null {
  return typeof v === 'string' ? v : null;
}

function fieldErrors(v: unknown): FieldIssue[] {
  if (!Array.isArray(v)) return [];
  const out: FieldIssue[] = [];
  for (const e of v) {
    if (e && typeof e === 'object' && typeof (e as { message?: unknown }).message === 'string') {
      const path = (e as { path?: unknown }).path;
      out.push({ path: typeof path === 'string' ? path : '', message: (e as { message: string }).message });
    }
  }
  return out;
}

/**
 * A non-2xx answer of the API. The fields come from the RFC 9457 problem document when the
 * body is one; a non-JSON body (a proxy's HTML error page) leaves them null and keeps the text
 * in `body`.
 */
export class LonghaulApiError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The stable machine-readable code (`INVALID_INPUT`, `JOB_NOT_FOUND`, ...), when given. */
  readonly code: string | null;
  /** The problem `type` URI, when given. */
  readonly type: string | null;
  readonly title: string | null;
  readonly detail: string | null;
  /** The problem document's field errors (`errors: [{path, message}]`); empty when there are none. */
  readonly errors: FieldIssue[];
  /** The `Retry-After` header in ms (on `503`, `429`), or null. */
  readonly retryAfterMs: number | null;
  /** The parsed problem document, or the raw text when the body was not JSON. */
  readonly body: unknown;
  readonly method: string;
  readonly url: string;

  constructor(init: {
    status: number;
    method: string;
    url: string;
    body: unknown;
    retryAfterMs: number | null;
    statusText?: string;
  }) {
    const problem = init.body && typeof init.body === 'object' && !Array.isArray(init.body) ? (init.body as Record<string, unknown>) : {};
    const code = str(problem.code);
    const title = str(problem.title);
    const detail = str(problem.detail);
    const summary = detail ?? title ?? (init.statusText || `request failed with status ${init.status}`);
    super(`HTTP ${init.status}${code ? ` ${code}` : ''}: ${summary}`);
    this.name = 'LonghaulApiError';
    this.status = init.status;
    this.code = code;
    this.type = str(problem.type);
    this.title = title;
    this.detail = detail;
    this.errors = fieldErrors(problem.errors);
    this.retryAfterMs = init.retryAfterMs;
    this.body = init.body;
    this.method = init.method;
    this.url = init.url;
  }

  /** Builds the error from a response, reading (and so consuming) its body. */
  static async fromResponse(res: Response, method: string, url: string): Promise<LonghaulApiError> {
    let text = '';
    try {
      text = await res.text();
    } catch {
      // The body could not be read (connection dropped): the status alone must do.
    }
    let body: unknown = text;
    if (text !== '') {
      try {
        body = parseJson(text);
      } catch {
        body = text;
      }
    }
    const init = { status: res.status, statusText: res.statusText, method, url, body, retryAfterMs: parseRetryAfter(res.headers.get('retry-after')) };
    const code = body && typeof body === 'object' ? (body as { code?: unknown }).code : undefined;
    if (res.status === 429 && code === TenantQuotaExceededApiError.CODE) return new TenantQuotaExceededApiError(init);
    return new LonghaulApiError(init);
  }
}

/**
 * `429 TENANT_QUOTA_EXCEEDED`: the tenant already has as many jobs waiting as its quota allows
 * (a batch is refused as a whole). `retryAfterMs` says when to try again; unlike a full queue
 * (`503 QUEUE_FULL`), only this tenant is refused.
 */
export class TenantQuotaExceededApiError extends LonghaulApiError {
  static readonly CODE = 'TENANT_QUOTA_EXCEEDED';
  constructor(init: ConstructorParameters<typeof LonghaulApiError>[0]) {
    super(init);
    this.name = 'TenantQuotaExceededApiError';
  }
}

/** `wait()` ran out of time before the job reached a terminal state. */
export class LonghaulTimeoutError extends Error {
  constructor(
    readonly jobId: string,
    readonly timeoutMs: number,
    /** The last snapshot seen, or null if none arrived in time. */
    readonly lastSnapshot: JobSnapshot | null,
  ) {
    super(`job ${jobId} did not finish within ${timeoutMs} ms${lastSnapshot ? ` (last status: ${lastSnapshot.status})` : ''}`);
    this.name = 'LonghaulTimeoutError';
  }
}
