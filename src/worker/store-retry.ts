/**
 * Store writes made on a handler's behalf (checkpoint saves, progress, result-file records, log
 * notes) retried through a short outage: a PostgreSQL restart or a dropped connection should
 * not cost the attempt. Only passing errors (core/store-errors.ts) are retried, with growing,
 * jittered delays, and only while the attempt can still hold its lease: the budget is a part of
 * the job's heartbeat timeout, since heartbeats fail during the outage too. A refused write
 * (its data, or a lost lease) is never retried. The first retry is logged, and how the write
 * ended (succeeded after n retries, or gave up); not every retry, which with many jobs running
 * through an outage would be a line per job every few hundred milliseconds.
 */
import type { Logger } from 'pino';
import { isTransientStoreError } from '../core/store-errors.js';

export interface StoreRetryOptions {
  /** What is written, for the log: `checkpoint`, `progress`, `result file`. */
  what: string;
  log: Logger;
  /** Fields of every log line (job id, type, attempt, tenant). */
  fields: Record<string, unknown>;
  /** How long to keep trying, from the first failure (ms). */
  budgetMs: number;
  /** True once retrying is pointless (the lease is gone, the worker stops). */
  stopped?: () => boolean;
  clock?: () => number;
  /** Waits between tries (tests shorten it). */
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

const FIRST_DELAY_MS = 50;
const MAX_DELAY_MS = 1_000;

const defaultSleep = (ms: number) =>
  new Promise<void>((resolve) => {
    setTimeout(resolve, ms).unref?.();
  });

/** The retry budget of a job's handler-side writes: half its heartbeat timeout, at least 1 s. */
export function retryBudgetMs(heartbeatTimeoutMs: number): number {
  return Math.max(1_000, Math.floor(heartbeatTimeoutMs / 2));
}

/** Runs `write`, again after each passing store error, until it succeeds or the budget is spent. */
export async function withStoreRetry<T>(write: () => Promise<T>, options: StoreRetryOptions): Promise<T> {
  const clock = options.clock ?? Date.now;
  const sleep = options.sleep ?? defaultSleep;
  const random = options.random ?? Math.random;
  let started: number | null = null;
  for (let retry = 1; ; retry++) {
    try {
      const out = await write();
      if (started !== null) options.log.info({ ...options.fields, write: options.what, retries: retry - 1 }, `store write (${options.what}) succeeded after retrying`);
      return out;
    } catch (err) {
      if (!isTransientStoreError(err) || options.stopped?.()) throw err;
      started ??= clock();
      const cap = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** Math.min(retry - 1, 10));
      const delay = Math.round(cap / 2 + (random() * cap) / 2);
      const left = started + options.budgetMs - clock();
      if (delay > left) {
        options.log.error({ ...options.fields, write: options.what, retries: retry - 1, err }, `store write (${options.what}) failed; retries exhausted`);
        throw err;
      }
      if (retry === 1) {
        options.log.warn(
          { ...options.fields, write: options.what, retry, delayMs: delay, err: { message: (err as Error).message, code: (err as { code?: unknown }).code } },
          `store write (${options.what}) failed; retrying`,
        );
      }
      await sleep(delay);
    }
  }
}
