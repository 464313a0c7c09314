/** `defineTask`: how users declare a task type, its policies and its handler. */
import type { ScheduleInput } from '../core/api-types.js';
import { parseRetention, type RetentionInput, type RetentionPolicy } from '../core/retention.js';
import type { Logger } from 'pino';
import type { ResultsHandle, UploadsHandle } from '../blobs/handles.js';
import { type BackoffPolicy, DEFAULT_BACKOFF } from '../core/backoff.js';
import { PRIORITIES, type Priority } from '../core/job.js';
import type { ProgressUpdate } from '../core/progress.js';
import type { InferInput, InputSchema } from './schema.js';
import { compileJsonSchema, isStandardSchema } from './schema.js';
import type { ChildrenSummary, ChildrenView, ChildSpec, FailurePolicy } from './children.js';
import { type IsolationOption, parseIsolation, type TaskIsolation } from './isolation.js';

export type { ChildOutcome, ChildrenSummary, ChildrenView, ChildSpec, FailurePolicy } from './children.js';
export type { IsolationOption, TaskIsolation, ThreadIsolationOptions, ThreadResourceLimits } from './isolation.js';

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
  /**
   * Runs `fn` once as a named step: sets progress.stage, and saves its result (when it is JSON)
   * in the job's journal, so that a run after a wait, a retry or a crash gets the saved result
   * instead of running `fn` again. Names must be unique within a job.
   */
  stage<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
  /**
   * Creates child jobs (one write, same tenant, `parentId` = this job) and suspends this job
   * until they are all terminal; then resolves to their counts by state. With
   * `failurePolicy: 'fail-fast'` (the default) the first child that fails or is cancelled
   * wakes this job, its open siblings are cancelled and spawn throws ChildFailedError.
   */
  spawn(children: readonly ChildSpec[], options?: { failurePolicy?: FailurePolicy }): Promise<ChildrenSummary>;
  /** Durable sleep: the job waits without a worker and runs again after `ms` (a restart changes nothing). */
  sleep(ms: number): Promise<void>;
  /** Durable sleep until a time. */
  sleepUntil(time: Date | string | number): Promise<void>;
  /**
   * Waits without a worker for the signal `name` (POST /v1/jobs/{id}/signals/{name},
   * `lh.signal()`); resolves to its JSON body. A signal sent before the wait is kept for it.
   * With `timeoutMs`, throws WaitTimeoutError (code WAIT_TIMEOUT) when none came in time.
   */
  waitFor<T = unknown>(name: string, options?: { timeoutMs?: number }): Promise<T>;
  /** The children this job spawned: counts and their results and errors, page by page. */
  readonly children: ChildrenView;
  /** Result files of the job (blob storage; recorded on the job under this attempt's lease). */
  results: ResultsHandle;
  /** Files clients uploaded (POST /v1/uploads) for the job's tenant. */
  uploads: UploadsHandle;
}

/** One stage of a pipeline (`stages`): its output is saved when it succeeds and it never runs again. */
export interface StageDefinition<I = unknown> {
  name: string;
  /** Its share of the job's percent, relative to the other stages. Default 1. */
  weight?: number;
  /** Time allowed per attempt of this stage (its ctx.signal fires, and the attempt fails with STAGE_TIMEOUT). */
  timeoutMs?: number;
  /** Attempts of this stage alone before the job fails (STAGE_FAILED). Default 3. */
  maxAttempts?: number;
  /** `previous` is the output of the stage before (undefined for the first). */
  // biome-ignore lint/suspicious/noExplicitAny: a stage's ctx is a TaskContext with any checkpoint type
  run(input: I, ctx: TaskContext<any>, previous: any): Promise<unknown> | unknown;
}

/** One step of a saga (`steps`): `compensate` undoes it when a later step fails for good. */
export interface SagaStep<I = unknown> {
  name: string;
  // biome-ignore lint/suspicious/noExplicitAny: see StageDefinition
  run(input: I, ctx: TaskContext<any>, previous: any): Promise<unknown> | unknown;
  /** Undoes the step; `output` is what its run returned. Should be idempotent: a crash may run it again. */
  // biome-ignore lint/suspicious/noExplicitAny: see StageDefinition
  compensate?(input: I, ctx: TaskContext<any>, output: any): Promise<unknown> | unknown;
}

export interface TaskOptions<S extends InputSchema | undefined = undefined, R = unknown, C = unknown> {
  type: string;
  /** What the task does, in a sentence (listed by `GET /v1/task-types`, e.g. in the dashboard's submit form). */
  description?: string;
  input?: S;
  /** Attempts in all, including the first. Default 3. */
  maxAttempts?: number;
  backoff?: Partial<BackoffPolicy>;
  /** Running time allowed per attempt before cancellation with reason `timeout`. Default none. */
  timeoutMs?: number | null;
  priority?: Priority;
  /** At most this many jobs of this type running at once, across all workers. */
  concurrency?: number;
  /**
   * A job's concurrency key from its input (a customer id, an account): at most
   * `keyConcurrency` jobs with the same key run at once, across all workers, while jobs with
   * other keys run freely. Must return a non-empty string of at most 255 characters.
   */
  concurrencyKey?: (input: S extends undefined ? unknown : InferInput<S>) => string;
  /** Jobs running at once per concurrency key. Default 1. */
  keyConcurrency?: number;
  /** At most `max` jobs of this type started in any window of `perMs`, across all workers (a downstream API's limit). */
  rateLimit?: { max: number; perMs: number };
  /** Checkpoints saved under another version are ignored by new attempts. Default 1. */
  checkpointVersion?: number;
  /** How long a result is kept after success. Default 7 days. */
  resultTtlMs?: number;
  /**
   * How long this task's ended jobs are kept, per end state, before the sweeper deletes them with
   * everything they own (`{ succeeded: '7d', failed: '30d', cancelled: '7d' }`; `0` deletes on
   * completion, `'forever'` keeps). A state not given follows the instance's `retention`.
   */
  retention?: RetentionInput;
  heartbeatIntervalMs?: number;
  heartbeatTimeoutMs?: number;
  /** Flag a running job as stalled when its progress has not moved for this long. null disables. */
  stallTimeoutMs?: number | null;
  /** A pipeline: the job runs these in order (instead of `run`) and its result is the last stage's output. */
  stages?: ReadonlyArray<StageDefinition<S extends undefined ? unknown : InferInput<S>>>;
  /** A saga: the job runs these in order (instead of `run`), compensating the done ones when one fails for good. */
  steps?: ReadonlyArray<SagaStep<S extends undefined ? unknown : InferInput<S>>>;
  /**
   * Where the run handler runs: in-process (the default), or `'thread'`, a worker thread of a
   * small pool, which a timeout or cancel can stop for real and whose crash fails only its
   * attempt (`{ kind: 'thread', graceMs, maxThreads, idleMs, resourceLimits }` for settings).
   * Needs `module`. See docs/isolation.md.
   */
  isolation?: IsolationOption;
  /** The file that defines and exports this task, as `import.meta.url` (or an absolute path): its thread imports it. Needed with `isolation`. */
  module?: string | URL;
  /** The handler; give exactly one of run, stages and steps. */
  run?(input: S extends undefined ? unknown : InferInput<S>, ctx: TaskContext<C>): Promise<R> | R;
}

export const TASK_BRAND: unique symbol = Symbol.for('longhaul.task');

export interface Task<R = unknown> {
  readonly [TASK_BRAND]: true;
  readonly type: string;
  readonly description: string | undefined;
  readonly input: InputSchema | undefined;
  readonly maxAttempts: number | undefined;
  readonly backoff: BackoffPolicy;
  readonly timeoutMs: number | null | undefined;
  readonly priority: Priority | undefined;
  readonly concurrency: number | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: the input type is erased once tasks are collected
  readonly concurrencyKey: ((input: any) => string) | undefined;
  /** Set (default 1) when the task has a concurrencyKey. */
  readonly keyConcurrency: number | undefined;
  readonly rateLimit: { max: number; perMs: number } | undefined;
  readonly checkpointVersion: number;
  readonly resultTtlMs: number | undefined;
  /** Parsed `retention` (ms per end state; null keeps forever). */
  readonly retention: RetentionPolicy;
  readonly heartbeatIntervalMs: number | undefined;
  readonly heartbeatTimeoutMs: number | undefined;
  readonly stallTimeoutMs: number | null | undefined;
  readonly stages: readonly StageDefinition[] | undefined;
  readonly steps: readonly SagaStep[] | undefined;
  /** Set when the handler runs off the main thread (`isolation`); undefined: in-process. */
  readonly isolation: TaskIsolation | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: the handler's input type is erased once tasks are collected
  readonly run: ((input: any, ctx: TaskContext<any>) => Promise<R> | R) | undefined;
}

/** Checks a pipeline's stages or a saga's steps. */
function checkParts(type: string, what: 'stages' | 'steps', parts: ReadonlyArray<{ name?: unknown; run?: unknown; compensate?: unknown; weight?: unknown; timeoutMs?: unknown; maxAttempts?: unknown }>): void {
  if (!Array.isArray(parts) || parts.length === 0) throw new TypeError(`task "${type}": ${what} must be a non-empty array`);
  const names = new Set<string>();
  for (const p of parts) {
    if (typeof p?.name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(p.name)) throw new TypeError(`task "${type}": each of ${what} needs a name of 1–128 letters, digits and . _ : -`);
    if (names.has(p.name)) throw new TypeError(`task "${type}": two ${what} are named "${p.name}"`);
    names.add(p.name);
    if (typeof p.run !== 'function') throw new TypeError(`task "${type}": ${what} "${p.name}" needs a run function`);
    if (p.compensate !== undefined && typeof p.compensate !== 'function') throw new TypeError(`task "${type}": step "${p.name}": compensate must be a function`);
    if (p.weight !== undefined && (typeof p.weight !== 'number' || !Number.isFinite(p.weight) || p.weight < 0)) throw new TypeError(`task "${type}": stage "${p.name}": weight must be a non-negative number`);
    if (p.timeoutMs !== undefined && (typeof p.timeoutMs !== 'number' || !Number.isFinite(p.timeoutMs) || p.timeoutMs <= 0)) throw new TypeError(`task "${type}": stage "${p.name}": timeoutMs must be a positive number of ms`);
    positiveInt(`stage "${p.name}" maxAttempts`, p.maxAttempts as number | undefined, type);
  }
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
  const handlers = [options.run, options.stages, options.steps].filter((h) => h !== undefined).length;
  if (handlers !== 1) throw new TypeError(`task "${type}": give exactly one of run, stages and steps`);
  if (options.run !== undefined && typeof options.run !== 'function') throw new TypeError(`task "${type}": run must be a function`);
  if (options.stages !== undefined) checkParts(type, 'stages', options.stages);
  if (options.steps !== undefined) checkParts(type, 'steps', options.steps);
  if (options.description !== undefined && typeof options.description !== 'string') throw new TypeError(`task "${type}": description must be a string`);
  positiveInt('maxAttempts', options.maxAttempts, type);
  positiveInt('concurrency', options.concurrency, type);
  positiveInt('checkpointVersion', options.checkpointVersion, type);
  if (options.concurrencyKey !== undefined && typeof options.concurrencyKey !== 'function') throw new TypeError(`task "${type}": concurrencyKey must be a function of the input`);
  positiveInt('keyConcurrency', options.keyConcurrency, type);
  if (options.keyConcurrency !== undefined && options.concurrencyKey === undefined) throw new TypeError(`task "${type}": keyConcurrency needs a concurrencyKey`);
  const rate = options.rateLimit;
  if (rate !== undefined) {
    if (typeof rate !== 'object' || rate === null) throw new TypeError(`task "${type}": rateLimit must be { max, perMs }`);
    positiveInt('rateLimit.max', rate.max, type);
    if (typeof rate.perMs !== 'number' || !Number.isInteger(rate.perMs) || rate.perMs < 1) throw new TypeError(`task "${type}": rateLimit.perMs must be a positive integer of ms, got ${String(rate.perMs)}`);
  }
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
  const isolation = parseIsolation(type, options.isolation, options.module, options.run !== undefined ? 'run' : options.stages !== undefined ? 'stages' : 'steps');
  let retention: RetentionPolicy;
  try {
    retention = parseRetention(options.retention);
  } catch (err) {
    throw new TypeError(`task "${type}": ${(err as Error).message}`);
  }
  return Object.freeze({
    [TASK_BRAND]: true as const,
    type,
    description: options.description,
    input: options.input,
    maxAttempts: options.maxAttempts,
    backoff,
    timeoutMs: options.timeoutMs,
    priority: options.priority,
    concurrency: options.concurrency,
    concurrencyKey: options.concurrencyKey,
    keyConcurrency: options.concurrencyKey === undefined ? undefined : (options.keyConcurrency ?? 1),
    rateLimit: rate === undefined ? undefined : Object.freeze({ max: rate.max, perMs: rate.perMs }),
    checkpointVersion: options.checkpointVersion ?? 1,
    resultTtlMs: options.resultTtlMs,
    retention,
    heartbeatIntervalMs: options.heartbeatIntervalMs,
    heartbeatTimeoutMs: options.heartbeatTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs,
    stages: options.stages as readonly StageDefinition[] | undefined,
    steps: options.steps as readonly SagaStep[] | undefined,
    isolation,
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
/**
 * What a tasks module declares with defineSchedule (see docs/schedules.md): the schedule shape
 * of core/api-types.ts (`ScheduleInput`, without `paused`: pausing is an operation on a running
 * system, kept across restarts), plus the tenant it belongs to.
 */
export type ScheduleDeclaration = Omit<ScheduleInput, 'paused'> & {
  /** The tenant it belongs to. Default 'default'. */
  tenant?: string;
};

const SCHEDULE = Symbol.for('longhaul.schedule');

export type DeclaredSchedule = Readonly<ScheduleDeclaration> & { readonly [SCHEDULE]: true };

/**
 * Declares a schedule in a tasks module (exported by name, or in the default export's array or
 * object, like tasks). It is checked when the module is loaded by Longhaul.open.
 */
export function defineSchedule(declaration: ScheduleDeclaration): DeclaredSchedule {
  return Object.freeze({ ...declaration, [SCHEDULE]: true as const });
}

export function isSchedule(v: unknown): v is DeclaredSchedule {
  return typeof v === 'object' && v !== null && (v as Record<symbol, unknown>)[SCHEDULE] === true;
}

/**
 * The schedules of a tasks module: defineSchedule values found where collectTasks looks for tasks
 * (named exports, the default export and its arrays and plain objects), plus an export named
 * `schedules` holding plain declarations (an array).
 */
export function collectSchedules(mod: Record<string, unknown>): ScheduleDeclaration[] {
  const found: ScheduleDeclaration[] = [];
  const visit = (v: unknown) => {
    if (isSchedule(v)) found.push(v);
    else if (Array.isArray(v)) v.forEach(visit);
    else if (v && typeof v === 'object' && !isTask(v) && Object.getPrototypeOf(v) === Object.prototype) Object.values(v).forEach(visit);
  };
  for (const [name, value] of Object.entries(mod)) {
    if (name === 'schedules' && Array.isArray(value)) {
      for (const v of value) found.push(isSchedule(v) ? v : (v as ScheduleDeclaration));
    } else if (name === 'default' || isSchedule(value)) visit(value);
  }
  return [...new Set(found)];
}

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
