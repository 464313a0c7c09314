/** Built-in example tasks registered by `longhaul dev`. */
import { setTimeout as sleep } from 'node:timers/promises';
import { withAbortReason } from '../core/abort.js';
import { csvImport } from './csv-import.js';
import { defineTask } from '../task-api/define.js';
import { reportGenerate } from './report-generate.js';
import { exportShard, shardedExport } from './sharded-export.js';

/**
 * `demo.sleep {steps = 20, stepMs = 250}`: sleeps step by step, reporting items done and a
 * stage, checkpointing after every step (a restarted attempt resumes where it stopped) and
 * stopping at once when cancelled.
 */
export const demoSleep = defineTask<Record<string, unknown>, { steps: number; resumedFrom: number }, { step: number }>({
  type: 'demo.sleep',
  input: {
    type: 'object',
    additionalProperties: false,
    properties: {
      steps: { type: 'integer', minimum: 1, maximum: 100_000, default: 20 },
      stepMs: { type: 'integer', minimum: 0, maximum: 60_000, default: 250 },
    },
  },
  maxAttempts: 3,
  async run(input, ctx) {
    const { steps, stepMs } = input as { steps: number; stepMs: number };
    const resumedFrom = ctx.checkpoint.value?.step ?? 0;
    if (resumedFrom > 0) ctx.log.info({ resumedFrom }, 'resuming from checkpoint');
    ctx.progress({ stage: 'sleeping', itemsDone: resumedFrom, itemsTotal: steps });
    for (let step = resumedFrom + 1; step <= steps; step++) {
      await withAbortReason(ctx.signal, sleep(stepMs, undefined, { signal: ctx.signal }));
      await ctx.checkpoint.save({ step });
      ctx.progress({ itemsDone: step, message: `step ${step} of ${steps}` });
    }
    ctx.progress({ stage: 'done' });
    return { steps, resumedFrom };
  },
});

/** demo.sleep, csv.import (docs/example-tasks.md), report.generate, and the workflow demo.export (docs/workflows.md). */
export const exampleTasks = [demoSleep, csvImport, reportGenerate, shardedExport, exportShard];
