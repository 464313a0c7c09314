/**
 * The messages between a worker and a handler thread (thread-entry.ts), and how errors cross.
 *
 * One attempt at a time runs in a thread; every message of an attempt carries its `seq` (the
 * thread's count of attempts), so that whatever an earlier attempt's leftover work sends is
 * told apart and ignored. The handler's `ctx` in the thread is a proxy: each method that does
 * something (a checkpoint, a result file, a stage, a wait) is a `call`, answered by a `reply`
 * from the attempt's real ctx in the worker; progress and log lines are one-way.
 *
 * Values cross as structured clones. Errors cross as `WireError`s and are rebuilt on the other
 * side as the library's own classes (FatalError, RetryableError, ...) or as an Error with the
 * same name, message, stack and primitive fields (code, status, ...), which is what
 * `classifyError` reads: a failure is classified the same in a thread as in-process.
 */
import { ChildFailedError, FatalError, type JobError, LeaseLostError, RetryableError, WaitTimeoutError } from '../../core/errors.js';
import type { ProgressUpdate } from '../../core/progress.js';
import type { TaskJobInfo } from '../../task-api/define.js';
import { Suspended } from '../../workflow/run.js';
import { type AbortKind, JobAbortedError } from '../../core/abort.js';

/** What a thread is started with (`workerData`). */
export interface ThreadInit {
  /** The `file:` URL of the tasks module to import. */
  module: string;
  type: string;
  /** The worker logger's level: the handler's `ctx.log` drops what it would drop. */
  logLevel: string;
}

/** One attempt, as the thread gets it. */
export interface RunMessage {
  seq: number;
  input: unknown;
  attempt: number;
  job: TaskJobInfo;
  /** `ctx.checkpoint.value` at the start (undefined: none usable). */
  checkpoint: unknown;
  /** The job's progress so far (the base later updates merge into). */
  progress: ProgressFields | null;
  childrenTotal: number;
  /** Why the attempt was aborted before it started (a cancel requested before the claim). */
  aborted: AbortKind | null;
}

/** The fields of a progress value a handler sets. */
export interface ProgressFields {
  percent: number | null;
  stage: string | null;
  itemsDone: number | null;
  itemsTotal: number | null;
  message: string | null;
}

/** What the thread asks its attempt's ctx to do; `args` as listed in thread-context.ts. */
export type CallOp =
  | 'checkpoint.save'
  | 'stage.begin'
  | 'stage.end'
  | 'spawn'
  | 'sleep'
  | 'sleepUntil'
  | 'waitFor'
  | 'children.counts'
  | 'children.list'
  | 'results.write'
  | 'results.writeStream'
  | 'results.list'
  | 'results.open'
  | 'results.remove'
  | 'uploads.stat'
  | 'uploads.open'
  | 'stream.push'
  | 'stream.end'
  | 'stream.abort'
  | 'stream.pull'
  | 'stream.close';

export type ToThread =
  | { t: 'run'; run: RunMessage }
  | { t: 'abort'; seq: number; kind: AbortKind }
  | { t: 'reply'; seq: number; call: number; ok: true; value: unknown }
  | { t: 'reply'; seq: number; call: number; ok: false; error: WireError };

export type FromThread =
  | { t: 'ready' }
  | { t: 'load-failed'; code: 'THREAD_MODULE_FAILED' | 'THREAD_TASK_NOT_FOUND'; error: WireError }
  | { t: 'done'; seq: number; ok: true; value: unknown }
  | { t: 'done'; seq: number; ok: false; error: WireError }
  | { t: 'progress'; seq: number; update: ProgressUpdate }
  | { t: 'log'; seq: number; line: string }
  | { t: 'call'; seq: number; call: number; op: CallOp; args: unknown[] };

/** The answer to `stage.begin`: the saved output (the stage ran before), or run it (then `stage.end`). */
export type StageBegin = { run: false; value: unknown } | { run: true; token: number };

/** An error as it crosses: which class to rebuild, and what classification and logs read. */
export interface WireError {
  cls: 'error' | 'fatal' | 'retryable' | 'lease-lost' | 'wait-timeout' | 'child-failed' | 'suspended' | 'abort' | 'value';
  name: string;
  message: string;
  stack?: string;
  /** Own primitive fields (code, status, statusCode, errno, ...). */
  props?: Record<string, string | number | boolean>;
  /** FatalError's details, ChildFailedError's counts, an abort's kind... */
  extra?: Record<string, unknown>;
  /** A thrown non-Error (cls 'value'), when it can be cloned. */
  value?: unknown;
}

/** Errors of the standard kinds keep their class (a TypeError stays a TypeError). */
const STANDARD: Record<string, ErrorConstructor> = { TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError };

function primitiveProps(err: Error): Record<string, string | number | boolean> | undefined {
  let props: Record<string, string | number | boolean> | undefined;
  for (const key of Object.keys(err)) {
    if (key === 'message' || key === 'name' || key === 'stack') continue;
    const v = (err as unknown as Record<string, unknown>)[key];
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') continue;
    props ??= {};
    props[key] = v;
  }
  return props;
}

/** What `err` becomes to cross a thread boundary. */
export function encodeError(err: unknown): WireError {
  if (!(err instanceof Error)) {
    if (err === null || typeof err !== 'object' || isCloneable(err)) return { cls: 'value', name: 'Error', message: '', value: err };
    return { cls: 'value', name: 'Error', message: '', value: safeText(err) };
  }
  let stack: string | undefined;
  try {
    stack = typeof err.stack === 'string' ? err.stack : undefined;
  } catch {
    stack = undefined;
  }
  const base = { name: String(err.name), message: String(err.message), ...(stack === undefined ? {} : { stack }) };
  const props = primitiveProps(err);
  const withProps = props === undefined ? base : { ...base, props };
  if (err instanceof JobAbortedError) return { ...base, cls: 'abort', extra: { kind: err.kind } };
  if (err instanceof Suspended) return { ...base, cls: 'suspended', extra: { why: err.why } };
  if (err instanceof LeaseLostError) return { ...base, cls: 'lease-lost', extra: { jobId: err.jobId } };
  if (err instanceof WaitTimeoutError) return { ...base, cls: 'wait-timeout', extra: { signalName: err.signalName } };
  if (err instanceof ChildFailedError) return { ...base, cls: 'child-failed', extra: { failed: err.failed, cancelled: err.cancelled } };
  if (err instanceof FatalError) return { ...withProps, cls: 'fatal', extra: { code: err.code, details: cloneOrUndefined(err.details) } };
  if (err instanceof RetryableError) return { ...withProps, cls: 'retryable', extra: { code: err.code, delayMs: err.delayMs } };
  return { ...withProps, cls: 'error' };
}

/** The error `w` stands for, rebuilt on this side. */
export function decodeError(w: WireError): unknown {
  const x = w.extra ?? {};
  let err: Error;
  switch (w.cls) {
    case 'value':
      return w.value;
    case 'abort':
      err = new JobAbortedError(x.kind as AbortKind, w.message);
      break;
    case 'suspended':
      err = new Suspended(String(x.why));
      break;
    case 'lease-lost':
      err = new LeaseLostError(String(x.jobId));
      break;
    case 'wait-timeout':
      err = new WaitTimeoutError(String(x.signalName));
      break;
    case 'child-failed':
      err = new ChildFailedError(Number(x.failed), Number(x.cancelled));
      break;
    case 'fatal': {
      const details = x.details as Pick<JobError, 'compensated' | 'compensationFailed'> | undefined;
      err = new FatalError(w.message, { code: String(x.code), ...(details === undefined ? {} : { details }) });
      break;
    }
    case 'retryable':
      err = new RetryableError(w.message, { code: String(x.code), ...(typeof x.delayMs === 'number' ? { delayMs: x.delayMs } : {}) });
      break;
    default: {
      const Ctor = STANDARD[w.name];
      err = Ctor ? new Ctor(w.message) : new Error(w.message);
      if (err.name !== w.name) Object.defineProperty(err, 'name', { value: w.name, writable: true, configurable: true, enumerable: false });
    }
  }
  if (w.props) for (const [k, v] of Object.entries(w.props)) if (!(k in err)) (err as unknown as Record<string, unknown>)[k] = v;
  if (w.stack !== undefined) Object.defineProperty(err, 'stack', { value: w.stack, writable: true, configurable: true, enumerable: false });
  return err;
}

function isCloneable(value: unknown): boolean {
  try {
    structuredClone(value);
    return true;
  } catch {
    return false;
  }
}

function cloneOrUndefined(value: unknown): unknown {
  return value === undefined || isCloneable(value) ? value : undefined;
}

function safeText(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    try {
      return String(value);
    } catch {
      return Object.prototype.toString.call(value);
    }
  }
}

/**
 * A copy of a chunk in an ArrayBuffer of its own, to transfer: a clone of the chunk itself
 * would copy its whole underlying buffer (a Buffer is often a view into a shared pool), and
 * transferring the caller's own buffer would empty it under them.
 */
export function ownBytes(chunk: Uint8Array | string): Uint8Array<ArrayBuffer> {
  return typeof chunk === 'string' ? new TextEncoder().encode(chunk) : new Uint8Array(chunk);
}
