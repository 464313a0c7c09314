/**
 * Bounds on submission options, shared by the library API and the HTTP schemas so both refuse
 * the same values with the same words.
 */

/** 100 years: the furthest a job may be scheduled (`delayMs`, or `runAt` from now, either way). */
export const MAX_SCHEDULE_MS = 100 * 365 * 86_400_000;
/** 100 years: the longest `timeoutMs` (longer would be no timeout at all). */
export const MAX_TIMEOUT_MS = MAX_SCHEDULE_MS;
export const MAX_ATTEMPTS_LIMIT = 1000;
export const MAX_IDEMPOTENCY_KEY = 255;
/** Jobs in one batch over HTTP (`POST /v1/batches`, or an array to `POST /v1/jobs`). */
export const MAX_BATCH_JOBS = 1000;
/** Characters of a failed attempt's stack kept in its attempt history (the rest is cut). */
export const MAX_ATTEMPT_STACK = 8192;
/** Attempts per page of `GET /v1/jobs/{id}/attempts`, and jobs per page of a dead-letter group. */
export const MAX_PAGE_LIMIT = 1000;
/** Jobs a bulk dead-letter retry or discard moves per transaction (the retention sweeper's batch). */
export const DEAD_LETTER_BATCH = 500;
/** Job ids a bulk dead-letter retry or discard may name at once (`ids`). */
export const MAX_DEAD_LETTER_IDS = 1000;
/**
 * The furthest time from the epoch a Date holds (±8.64e15 ms, about 275,000 years): a time
 * option past it is refused, so that no store is asked for a number its 64-bit columns cannot
 * hold (PostgreSQL's bigint ends at 9.2e18) or a Date cannot show.
 */
export const MAX_TIME_MS = 8.64e15;
/** The largest lease (an attempts cursor names one): PostgreSQL keeps it in an `integer`. */
export const MAX_LEASE = 2 ** 31 - 1;
/** How deeply `input` and `metadata` may nest (deeper JSON is refused rather than risking the stack). */
export const MAX_JSON_DEPTH = 64;

/** The nesting depth of a JSON value: 0 for a scalar, 1 for a flat object or array. */
export function jsonDepth(value: unknown, limit = MAX_JSON_DEPTH + 1): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (typeof v !== 'object' || v === null) continue;
    const d = depth + 1;
    if (d > deepest) deepest = d;
    if (d >= limit) return d;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d]);
  }
  return deepest;
}

/**
 * Why an `Idempotency-Key` header value is refused, or null when it is fine: 1 to 255 printable
 * ASCII characters (the header is a structured-field string; HTTP carries no other text).
 */
export function idempotencyKeyProblem(key: string): string | null {
  if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY) return `must be 1 to ${MAX_IDEMPOTENCY_KEY} characters (got ${key.length})`;
  const bad = /[^\x20-\x7e]/.exec(key);
  if (bad) {
    const cp = bad[0].codePointAt(0) ?? 0;
    return `must be printable ASCII (HTTP headers carry no other text): character ${bad.index + 1} is U+${cp.toString(16).toUpperCase().padStart(4, '0')}`;
  }
  return null;
}

/** Signal names: letters, digits and `._:-`, 1 to 128 characters (safe in a URL path segment as is). */
const SIGNAL_NAME = /^[A-Za-z0-9._:-]{1,128}$/;

/** Why a signal name is refused, or null when it is fine. */
export function signalNameProblem(name: unknown): string | null {
  if (typeof name !== 'string') return 'must be a string';
  return SIGNAL_NAME.test(name) ? null : 'must be 1 to 128 letters, digits or . _ : - characters';
}
