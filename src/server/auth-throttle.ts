/**
 * Throttling of failed authentication, per client address: past `maxFailures` failed attempts
 * (a 401: a wrong or missing API key, an invalid stream token) within one window, every request
 * from that address that needs authentication is answered `429 AUTH_THROTTLED` with
 * `Retry-After` until the window ends, even with a good key: a guesser learns nothing more, and
 * a stuck client misconfigured with an old key stops costing a hash per request.
 *
 * Logged at `warn` with the address (never the key): the first failure of an address in a
 * window, and its being throttled; not one line per request. The table of addresses is bounded
 * (the oldest window is forgotten first), so a flood of addresses costs bounded memory.
 *
 * The address is the socket's peer: behind a proxy it is the proxy's, and one client's
 * failures throttle everyone behind it (docs/security.md says so).
 */
import type { FastifyBaseLogger } from 'fastify';
import { HttpProblem } from './problem.js';

export interface AuthThrottleOptions {
  /** Failed attempts an address may make in one window before it is throttled. Default 20. */
  maxFailures?: number;
  /** The window, ms. Default 10 000. */
  windowMs?: number;
  /** Addresses remembered at once. Default 10 000. */
  maxAddresses?: number;
}

export const DEFAULT_AUTH_MAX_FAILURES = 20;
export const DEFAULT_AUTH_WINDOW_MS = 10_000;

interface Window {
  startedAt: number;
  failures: number;
}

export class AuthThrottle {
  private readonly maxFailures: number;
  private readonly windowMs: number;
  private readonly maxAddresses: number;
  private readonly windows = new Map<string, Window>();

  constructor(
    options: AuthThrottleOptions,
    private readonly log: FastifyBaseLogger,
    private readonly onThrottled: () => void = () => {},
    private readonly now: () => number = Date.now,
  ) {
    this.maxFailures = options.maxFailures ?? DEFAULT_AUTH_MAX_FAILURES;
    this.windowMs = options.windowMs ?? DEFAULT_AUTH_WINDOW_MS;
    this.maxAddresses = options.maxAddresses ?? 10_000;
  }

  /** The 429 for an address over its failures in the current window, or null. */
  check(address: string | undefined): HttpProblem | null {
    const w = this.current(address ?? 'unknown');
    if (!w || w.failures < this.maxFailures) return null;
    this.onThrottled();
    const seconds = Math.max(1, Math.ceil((w.startedAt + this.windowMs - this.now()) / 1000));
    return new HttpProblem(429, 'AUTH_THROTTLED', `too many failed authentication attempts from this address; try again in ${seconds} s`, {
      retryAfterSeconds: seconds,
    });
  }

  /** Records a failed attempt (`reason`: the 401's code, for the log). */
  fail(address: string | undefined, reason: string): void {
    const key = address ?? 'unknown';
    let w = this.current(key);
    if (!w) {
      if (this.windows.size >= this.maxAddresses) this.forgetOldest();
      w = { startedAt: this.now(), failures: 0 };
      this.windows.set(key, w);
    }
    w.failures++;
    if (w.failures === 1) {
      this.log.warn({ remoteAddress: key, reason, windowMs: this.windowMs }, 'authentication failed (further failures from this address are not logged until the window ends)');
    } else if (w.failures === this.maxFailures) {
      this.log.warn(
        { remoteAddress: key, failures: w.failures, windowMs: this.windowMs },
        'authentication failures throttled: this address is answered 429 until the window ends',
      );
    }
  }

  /** The address's window while it lasts. */
  private current(key: string): Window | undefined {
    const w = this.windows.get(key);
    if (w && this.now() - w.startedAt >= this.windowMs) {
      this.windows.delete(key);
      return undefined;
    }
    return w;
  }

  private forgetOldest(): void {
    const now = this.now();
    for (const [key, w] of this.windows) {
      if (now - w.startedAt >= this.windowMs) this.windows.delete(key);
    }
    // Still full: the oldest windows (Map order is insertion order) go.
    for (const key of this.windows.keys()) {
      if (this.windows.size < this.maxAddresses) break;
      this.windows.delete(key);
    }
  }
}
