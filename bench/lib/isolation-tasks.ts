/**
 * The tasks of bench/isolation.ts: the same handler in-process and in a worker thread. A thread
 * imports this module (`module: import.meta.url`) to find its task. `progress` in the input:
 * that many ctx.progress() calls before the handler returns.
 */
import { defineTask, type TaskContext } from '../../src/index.js';

function work(input: unknown, ctx: TaskContext): null {
  const n = (input as { progress?: number } | null)?.progress ?? 0;
  for (let i = 1; i <= n; i++) ctx.progress({ itemsDone: i, itemsTotal: n });
  return null;
}

export const inProcess = defineTask({ type: 'bench.in-process', run: work });
export const inThread = defineTask({ type: 'bench.thread', module: import.meta.url, isolation: 'thread', run: work });
