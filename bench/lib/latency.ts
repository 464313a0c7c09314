/**
 * End-to-end latency with an idle worker, the same way for every Longhaul benchmark: one job
 * at a time, from the start of the submit() call to the start of its handler
 * (performance.now() in this process); each sample waits for the previous job's outcome to be
 * written, so the worker is idle again when the next one is submitted.
 */
import type { Longhaul, Task } from '../../src/index.js';

type Lib = typeof import('../../src/index.js');

export async function idleWorkerLatency(options: {
  lib: Lib;
  /** Opens a Longhaul instance with these tasks (the store under test). */
  open: (tasks: Task[]) => Promise<Longhaul>;
  warmup: number;
  samples: number;
  sweeper: boolean;
}): Promise<number[]> {
  let onStart: ((t: number) => void) | null = null;
  const probe = options.lib.defineTask({
    type: 'bench.probe',
    run: () => {
      onStart?.(performance.now());
      return null;
    },
  });
  const lh = await options.open([probe]);
  try {
    const worker = await lh.startWorker({ concurrency: 10, sweeper: options.sweeper });
    await worker.idle();
    const samples: number[] = [];
    const total = options.warmup + options.samples;
    for (let i = 0; i < total; i++) {
      const started = new Promise<number>((resolve) => {
        onStart = resolve;
      });
      const t0 = performance.now();
      const submitted = lh.submit('bench.probe', { n: i });
      const t1 = await started;
      await submitted;
      await worker.idle();
      if (i >= options.warmup) samples.push(t1 - t0);
    }
    if (worker.stats.succeeded !== total) throw new Error(`latency: ${worker.stats.succeeded} jobs succeeded, expected ${total}`);
    return samples;
  } finally {
    await lh.close();
  }
}
