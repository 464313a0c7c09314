/**
 * A task's `isolation` option: where its handler runs. In-process by default; `'thread'` runs
 * each attempt in a worker thread of a small pool (src/worker/isolation/), so that a timeout or
 * a cancel can stop it for real, a busy loop does not freeze the process, and a crash fails that
 * attempt only. The thread imports the task's own module (`module: import.meta.url`) and finds
 * the task in it by type. See docs/isolation.md.
 */
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';

/** worker_threads resource limits of a task's threads (see Node's `new Worker(..., { resourceLimits })`). */
export interface ThreadResourceLimits {
  /** The thread's main heap; past it the thread ends with THREAD_OUT_OF_MEMORY. */
  maxOldGenerationSizeMb?: number;
  maxYoungGenerationSizeMb?: number;
  codeRangeSizeMb?: number;
  stackSizeMb?: number;
}

/** `isolation: { kind: 'thread', ... }`: a worker thread per running attempt, with settings. */
export interface ThreadIsolationOptions {
  kind: 'thread';
  /**
   * How long a handler may go on once its signal fired (cancel, timeout, lost lease, shutdown)
   * before its thread is terminated and the attempt ends without it. Default 1000 ms.
   */
  graceMs?: number;
  /** Threads one worker keeps for this task, busy or idle (jobs beyond wait for one). Default and most: the worker's concurrency. */
  maxThreads?: number;
  /** How long an idle thread is kept for the next job before it is closed. Default 30 000 ms. */
  idleMs?: number;
  /** Limits of each thread (heap size above all): a thread past them ends, and only its attempt fails. */
  resourceLimits?: ThreadResourceLimits;
}

export type IsolationOption = 'thread' | ThreadIsolationOptions;

/** A task's isolation as the worker reads it (`Task.isolation`). */
export interface TaskIsolation {
  readonly kind: 'thread';
  /** The `file:` URL of the module that exports the task (the thread imports it). */
  readonly module: string;
  readonly graceMs: number;
  readonly maxThreads: number | undefined;
  readonly idleMs: number;
  readonly resourceLimits: Readonly<ThreadResourceLimits> | undefined;
}

export const DEFAULT_GRACE_MS = 1000;
export const DEFAULT_IDLE_MS = 30_000;

const LIMIT_KEYS = ['maxOldGenerationSizeMb', 'maxYoungGenerationSizeMb', 'codeRangeSizeMb', 'stackSizeMb'] as const;

/**
 * Checks `isolation` and `module` of task `type` (`handler`: which of run, stages and steps it
 * gives); undefined when the task runs in-process. Throws a TypeError naming the task.
 */
export function parseIsolation(type: string, isolation: unknown, module: unknown, handler: 'run' | 'stages' | 'steps'): TaskIsolation | undefined {
  if (isolation === undefined || isolation === null) return undefined;
  const fail = (what: string): never => {
    throw new TypeError(`task "${type}": ${what}`);
  };
  const options: Record<string, unknown> = typeof isolation === 'string' ? { kind: isolation } : typeof isolation === 'object' ? (isolation as Record<string, unknown>) : fail(`isolation must be 'thread' or { kind: 'thread', ... }, got ${String(isolation)}`);
  if (options.kind === 'process') fail("isolation 'process' is not available; use 'thread' (a worker thread, see docs/isolation.md)");
  if (options.kind !== 'thread') fail(`isolation must be 'thread' or { kind: 'thread', ... }, got ${JSON.stringify(options.kind)}`);
  for (const key of Object.keys(options)) {
    if (!['kind', 'graceMs', 'maxThreads', 'idleMs', 'resourceLimits'].includes(key)) fail(`isolation has no option "${key}" (kind, graceMs, maxThreads, idleMs, resourceLimits)`);
  }
  if (handler !== 'run') fail(`isolation is for a run handler; a task with ${handler} runs in-process (a run handler may use ctx.stage() steps in its thread)`);
  const nonNegative = (name: string, v: unknown): number | undefined => {
    if (v === undefined) return undefined;
    return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : fail(`isolation.${name} must be a non-negative number of ms, got ${String(v)}`);
  };
  const graceMs = nonNegative('graceMs', options.graceMs) ?? DEFAULT_GRACE_MS;
  const idleMs = nonNegative('idleMs', options.idleMs) ?? DEFAULT_IDLE_MS;
  const maxThreads = options.maxThreads;
  if (maxThreads !== undefined && (!Number.isInteger(maxThreads) || (maxThreads as number) < 1)) fail(`isolation.maxThreads must be a positive integer, got ${String(maxThreads)}`);
  let resourceLimits: ThreadResourceLimits | undefined;
  if (options.resourceLimits !== undefined) {
    const given = options.resourceLimits;
    if (typeof given !== 'object' || given === null) fail('isolation.resourceLimits must be an object, e.g. { maxOldGenerationSizeMb: 256 }');
    resourceLimits = {};
    for (const [key, value] of Object.entries(given as Record<string, unknown>)) {
      if (!(LIMIT_KEYS as readonly string[]).includes(key)) fail(`isolation.resourceLimits has no limit "${key}" (${LIMIT_KEYS.join(', ')})`);
      if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) fail(`isolation.resourceLimits.${key} must be a positive number of MB, got ${String(value)}`);
      resourceLimits[key as (typeof LIMIT_KEYS)[number]] = value as number;
    }
    Object.freeze(resourceLimits);
  }
  return Object.freeze({ kind: 'thread' as const, module: moduleUrl(type, module), graceMs, maxThreads: maxThreads as number | undefined, idleMs, resourceLimits });
}

/** `module` as a `file:` URL: given as `import.meta.url`, a URL, or an absolute path. */
function moduleUrl(type: string, module: unknown): string {
  const hint = 'add module: import.meta.url to the task (the file that defines and exports it: its thread imports that file and finds the task by type)';
  if (module === undefined) throw new TypeError(`task "${type}": isolation needs to know the task's module: ${hint}`);
  if (module instanceof URL) module = module.href;
  if (typeof module !== 'string' || module === '') throw new TypeError(`task "${type}": module must be a file URL (import.meta.url) or an absolute path; ${hint}`);
  if (module.startsWith('file:')) {
    try {
      return new URL(module).href;
    } catch {
      throw new TypeError(`task "${type}": module is not a valid file URL: ${module}`);
    }
  }
  if (isAbsolute(module)) return pathToFileURL(module).href;
  throw new TypeError(`task "${type}": module must be a file URL (import.meta.url) or an absolute path, got ${JSON.stringify(module)}; ${hint}`);
}
