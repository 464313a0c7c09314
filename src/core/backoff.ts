/** Retry delays: exponential backoff with full jitter, capped (AWS "Exponential Backoff And Jitter"). */

export interface BackoffPolicy {
  /** Delay scale for the first retry, in ms. */
  baseMs: number;
  /** Upper bound of any single delay, in ms. */
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, maxMs: 60_000 };

/** The cap for the delay after attempt `attempt` (1-based): min(maxMs, baseMs · 2^(attempt-1)). */
export function backoffCeiling(policy: BackoffPolicy, attempt: number): number {
  const exponent = Math.max(0, Math.min(attempt - 1, 52));
  return Math.min(policy.maxMs, policy.baseMs * 2 ** exponent);
}

/** Full jitter: a uniformly random delay in [0, ceiling]. `random` returns [0, 1). */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  return Math.floor(random() * (backoffCeiling(policy, attempt) + 1));
}

/**
 * Delay before reconnect attempt `failures` (1-based) of a long-lived connection: doubling from
 * `minMs` up to `maxMs`, with "equal jitter" (half fixed, half random) so that many processes
 * that lost one server at once do not all come back at the same moment, nor almost at once.
 */
export function reconnectDelay(failures: number, minMs: number, maxMs: number, random: () => number = Math.random): number {
  const cap = Math.min(maxMs, minMs * 2 ** Math.max(0, Math.min(failures - 1, 30)));
  return cap / 2 + random() * (cap / 2);
}
