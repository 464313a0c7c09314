/** `defineTask`: how users declare a task type, its policies and its handler. */
import type { Logger } from 'pino';
import type { ResultsHandle, UploadsHandle } from '../blobs/handles.js';
import { type BackoffPolicy, DEFAULT_BACKOFF } from '../core/backoff.js';
import { PRIORITIES, type Priority } from '../core/job.js';
import type { ProgressUpdate } from '../core/progress.js';
import type { InferInput, InputSchema } from './schema.js';
import { compileJsonSchema, isStandardSchema } from './schema.js';

export interface TaskJobInfo {
  id: string;
  type: string;
  tenant: string;
  metadata: Record<string, unknown> | null;
  createdAt: string;
  maxAttempts: number;
}

export interface CheckpointHandle<C = unknown> {
  /** The data the last attempt saved, when its version matches the task's checkpointVersion. */
  readonly value: C | undefined;
  /** Stores `data` with the job (fenced by the lease); resolves once durable. */
  save(data: C): Promise<void>;
}

export interface TaskContext<C = unknown> {
  job: TaskJobInfo;
  /** 1-based attempt number. */
  attempt: number;
  /** Aborted on cancellation, timeout, lost lease or worker shutdown; `signal.reason` says which. */
  signal: AbortSignal;
  /** Report progress; call as often as you like, writes are coalesced. */
  progress(update: ProgressUpdate | number): void;
  checkpoint: CheckpointHandle<C>;
  log: Logger;
  /** Runs `fn` as a named stage (sets progress.stage first). */
  stage<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
  /** Result files of the job (blob storage; recorded on the job under this attempt's lease). */
  results: ResultsHandle;
  /** Files clients uploaded (POST /v1/uploads) for the job's tenant. */
  uploads: UploadsHandle;
}

export interface TaskOptions<S extends InputSchema | undefined = undefined, R = unknown, C = unknown> {
  type: string;
  input?: S;
  /** Attempts in all, including the first. Default 3. */
  maxAttempts?: number;
  backoff?: Partial<BackoffPolicy>;
  /** Running time allowed per attempt before cancellation with reason `timeout`. Default none. */
  timeoutMs?: number | null;
  priority?: Priority;
  /** At most this many jobs of this type running at once, across all workers. */
  concurrency?: number;
  /** Checkpoints saved under another version are ignored by new attempts. Default 1. */
  checkpointVersion?: number;
  /** How long a result is kept after success. Default 7 days. */
  resultTtlMs?: number;
  heartbeatIntervalMs?: number;
  heartbeatTimeoutMs?: number;
  /** Flag a running job as stalled when its progress has not moved for this long. null disables. */
  stallTimeoutMs?: number | null;
  run(input: S extends undefined ? unknown : InferInput<S>, ctx: TaskContext<C>): Promise<R> | R;
}

export const TASK_BRAND: unique symbol = Symbol.for('longhaul.task');

export interface Task<R = unknown> {
  readonly [TASK_BRAND]: true;
  readonly type: string;
  readonly input: InputSchema | undefined;
  readonly maxAttempts: number | undefined;
  readonly backoff: BackoffPolicy;
  readonly timeoutMs: number | null | undefined;
  readonly priority: Priority | undefined;
  readonly concurrency: number | undefined;
  readonly checkpointVersion: number;
  readonly resultTtlMs: number | undefined;
  readonly heartbeatIntervalMs: number | undefined;
  readonly heartbeatTimeoutMs: number | undefined;
  readonly stallTimeoutMs: number | null | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: the handler's input type is erased once tasks are collected
  readonly run: (input: any, ctx: TaskContext<any>) => Promise<R> | R;
}

function positiveInt(name: string, value: number | undefined, type: string): void {
  if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
    throw new TypeError(`task "${type}": ${name} must be a positive integer, got ${String(value)}`);
  }
}

function nonNegative(name: string, value: number | null | undefined, type: string): void {
  if (value !== undefined && value !== null && (!Number.isFinite(value) || value < 0)) {
    throw new TypeError(`task "${type}": ${name} must be a non-negative number of ms, got ${String(value)}`);
  }
}

export function defineTask<S extends InputSchema | undefined = undefined, R = unknown, C = unknown>(options: TaskOptions<S, R, C>): Task<R> {
  const type = options.type;
  if (typeof type !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(type)) {
    throw new TypeError(`task type must be 1–128 characters of letters, digits and . _ : - (got ${JSON.stringify(type)})`);
  }
  if (typeof options.run !== 'function') throw new TypeError(`task "${type}": run must be a function`);
  positiveInt('maxAttempts', options.maxAttempts, type);
  positiveInt('concurrency', options.concurrency, type);
  positiveInt('checkpointVersion', options.checkpointVersion, type);
  for (const k of ['timeoutMs', 'resultTtlMs', 'heartbeatIntervalMs', 'heartbeatTimeoutMs', 'stallTimeoutMs'] as const) nonNegative(k, options[k], type);
  if (options.priority !== undefined && !PRIORITIES.includes(options.priority)) {
    throw new TypeError(`task "${type}": priority must be one of ${PRIORITIES.join(', ')}`);
  }
  const backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
  nonNegative('backoff.baseMs', backoff.baseMs, type);
  nonNegative('backoff.maxMs', backoff.maxMs, type);
  if (options.input !== undefined) {
    if (typeof options.input !== 'object' || options.input === null) throw new TypeError(`task "${type}": input must be a Standard Schema or a JSON Schema object`);
    if (!isStandardSchema(options.input)) compileJsonSchema(options.input); // fail fast on a broken JSON Schema
  }
  return Object.freeze({
    [TASK_BRAND]: true as const,
    type,
    input: options.input,
    maxAttempts: options.maxAttempts,
    backoff,
    timeoutMs: options.timeoutMs,
    priority: options.priority,
    concurrency: options.concurrency,
    checkpointVersion: options.checkpointVersion ?? 1,
    resultTtlMs: options.resultTtlMs,
    heartbeatIntervalMs: options.heartbeatIntervalMs,
    heartbeatTimeoutMs: options.heartbeatTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs,
    run: options.run,
  });
}

export function isTask(value: unknown): value is Task {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[TASK_BRAND] === true;
}

/**
 * Collects tasks from a tasks module: a default export (array or object of tasks, or one
 * task) and/or named exports that are tasks. Duplicate types are an error.
 */
export function collectTasks(mod: Record<string, unknown>): Task[] {
  const found: Task[] = [];
  const visit = (v: unknown) => {
    if (isTask(v)) found.push(v);
    else if (Array.isArray(v)) v.forEach(visit);
    else if (v && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) Object.values(v).forEach(visit);
  };
  for (const [name, value] of Object.entries(mod)) {
    if (name === 'default' || isTask(value)) visit(value);
  }
  const unique = new Map<string, Task>();
  for (const t of found) {
    const prior = unique.get(t.type);
    if (prior && prior !== t) throw new Error(`two different tasks share the type "${t.type}"`);
    unique.set(t.type, t);
  }
  return [...unique.values()];
}
