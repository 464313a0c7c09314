/**
 * Request bodies and answers of the client (client.ts): the submit body shared by single jobs
 * and batches, the `Idempotency-Key` check, and the shapes of the batch and signal answers.
 */
import type { JobSnapshot } from '../core/job.js';
import { idempotencyKeyProblem } from '../core/limits.js';
import type { RequestOptions, SubmitOptions } from './options.js';

/** One job of a batch: what `submit()` takes (an idempotency key belongs to the batch, not to its jobs). */
export interface BatchJob {
  type: string;
  input?: unknown;
  options?: Omit<SubmitOptions, 'idempotencyKey' | 'signal'>;
}

export interface BatchOptions extends RequestOptions {
  /** One `Idempotency-Key` for the whole batch: the same batch again returns the same jobs (`replayed`). */
  idempotencyKey?: string;
}

export interface BatchResult {
  /** The batch's jobs, in the order given. */
  jobs: JobSnapshot[];
  /** True when the server answered a replay of the same batch and key (`200`, `Idempotent-Replayed: true`). */
  replayed: boolean;
}

export interface SignalResult {
  jobId: string;
  name: string;
  /** True when the job was waiting for this signal and is queued again; false when the signal is kept for its next wait. */
  resumed: boolean;
}

/** The JSON body of a submission. */
export function submitBody(type: string, input: unknown, options: Omit<SubmitOptions, 'idempotencyKey' | 'signal'>): Record<string, unknown> {
  const body: Record<string, unknown> = { type };
  if (input !== undefined) body.input = input;
  if (options.priority !== undefined) body.priority = options.priority;
  if (options.runAt !== undefined) body.runAt = options.runAt instanceof Date ? options.runAt.toISOString() : options.runAt;
  if (options.delayMs !== undefined) body.delayMs = options.delayMs;
  if (options.maxAttempts !== undefined) body.maxAttempts = options.maxAttempts;
  if (options.timeoutMs !== undefined) body.timeoutMs = options.timeoutMs;
  if (options.metadata !== undefined) body.metadata = options.metadata;
  if (options.webhook !== undefined) body.webhook = options.webhook;
  return body;
}

/** The `Idempotency-Key` header for `key`, or none; a key HTTP cannot carry is a TypeError before any request. */
export function idempotencyHeaders(key: string | undefined): Record<string, string> {
  if (key === undefined) return {};
  // fetch() would refuse a non-ASCII header with a message about "ByteString"s; say what is wrong.
  const problem = idempotencyKeyProblem(key);
  if (problem) throw new TypeError(`idempotencyKey ${problem}`);
  return { 'idempotency-key': key };
}
