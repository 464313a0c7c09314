/**
 * Isolated handlers (`isolation: 'thread'`, docs/isolation.md): what the worker calls to run an
 * attempt whose task opted in. Each worker has a pool of threads per isolated task type, made
 * when its first such attempt runs, bounded by the task's `maxThreads` and the worker's
 * concurrency.
 */
import type { Logger } from 'pino';
import type { TaskContext } from '../../task-api/define.js';
import type { Active } from '../attempt.js';
import { runInThread } from './host.js';
import { ThreadPool } from './pool.js';

export { ThreadError } from './pool.js';

/** The pools of each worker (by the worker object: a stopped, dropped worker takes its pools along). */
const poolsOf = new WeakMap<object, Map<string, ThreadPool>>();

export interface IsolationHost {
  log: Logger;
  /** The worker's concurrency: no more threads per task than it runs jobs. */
  concurrency: number;
}

/** Runs the attempt's handler (its task has `isolation`) in a thread of `worker`'s pool for the task. */
export function runIsolated(worker: object, active: Active, ctx: TaskContext, host: IsolationHost): Promise<unknown> {
  const { task } = active;
  const isolation = task.isolation;
  if (isolation === undefined) throw new Error(`task "${task.type}" runs in-process`);
  let pools = poolsOf.get(worker);
  if (pools === undefined) {
    pools = new Map();
    poolsOf.set(worker, pools);
  }
  let pool = pools.get(task.type);
  if (pool === undefined) {
    pool = new ThreadPool(
      { module: isolation.module, type: task.type, logLevel: host.log.level },
      { max: Math.min(isolation.maxThreads ?? host.concurrency, host.concurrency), idleMs: isolation.idleMs, resourceLimits: isolation.resourceLimits },
    );
    pools.set(task.type, pool);
  }
  return runInThread(pool, active, ctx, isolation, host.log);
}

/** Closes `worker`'s pools (it stopped): idle threads end at once instead of after their idle time. */
export function closeIsolated(worker: object): void {
  const pools = poolsOf.get(worker);
  if (pools === undefined) return;
  for (const pool of pools.values()) pool.close();
  poolsOf.delete(worker);
}
