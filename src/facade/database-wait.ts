/**
 * Opening the store when its database may not answer yet: a process started during a
 * PostgreSQL restart or failover, or before the database of its deployment is up. The first
 * operation at open (migrate: create or upgrade the schema) is tried again while it fails with a
 * passing error (core/store-errors.ts: connection refused or lost, the server starting up or
 * shutting down, too many connections), with growing, jittered delays up to `maxDelayMs`. The
 * log says so once when it starts waiting (with the error), again every 30 s while it waits, and
 * once when the database answers (core/outage.ts). Any other error (a bad URL, a refused
 * password, a database that does not exist, a schema newer than this Longhaul) is not waited
 * out: it is thrown at once, as without waiting.
 */
import type { Logger } from 'pino';
import { reconnectDelay } from '../core/backoff.js';
import { Outage, type OutageLine } from '../core/outage.js';
import { isTransientStoreError } from '../core/store-errors.js';

/** How `Longhaul.open` waits for a database that does not answer (OpenOptions.waitForDatabase). */
export interface DatabaseWait {
  /** Gives up after this long (ms), throwing the last error. Default: waits as long as it takes. */
  timeoutMs?: number;
  /** Stops waiting: open rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Called once, when the first try failed with a passing error and the wait begins (e.g. to answer health checks meanwhile). */
  onWaiting?: (err: unknown) => void;
  /** The first delay between tries (ms, doubled after each failure). Default 250. */
  minDelayMs?: number;
  /** The longest delay between tries (ms). Default 5000. */
  maxDelayMs?: number;
}

/** Runs `attempt` (the store's migrate) until it succeeds, waiting out passing errors as `wait` says; `false`: a single try. */
export async function whenDatabaseAnswers<T>(attempt: () => Promise<T>, wait: DatabaseWait | boolean | undefined, logger: Logger): Promise<T> {
  if (!wait) return attempt();
  const options: DatabaseWait = wait === true ? {} : wait;
  const { signal } = options;
  const minMs = options.minDelayMs ?? 250;
  const maxMs = options.maxDelayMs ?? 5_000;
  const started = Date.now();
  const outage = new Outage('startup');
  const log = (line: OutageLine | null) => {
    if (line) logger[line.level](line.fields, line.msg);
  };
  for (let failures = 1; ; failures++) {
    signal?.throwIfAborted();
    try {
      const out = await attempt();
      log(outage.succeeded(Date.now()));
      return out;
    } catch (err) {
      if (!isTransientStoreError(err)) throw err;
      if (failures === 1) options.onWaiting?.(err);
      const delay = reconnectDelay(failures, minMs, maxMs);
      if (options.timeoutMs !== undefined && Date.now() + delay - started > options.timeoutMs) {
        logger.error({ component: 'startup', failures, waitedMs: Date.now() - started, err }, 'database unreachable; gave up waiting');
        throw err;
      }
      log(outage.failed(err, Date.now(), 'database unreachable, retrying'));
      await sleep(delay, signal);
    }
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    // Not unref'd: a process waiting for its database has nothing else keeping it alive.
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
