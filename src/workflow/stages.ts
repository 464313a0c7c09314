/**
 * Pipelines: a task's `stages` run in order, each stage's output saved in the journal when it
 * succeeds, so that no later run (a retry, a resumption after a wait, a new attempt after a
 * crash) runs it again. A failing stage is retried alone, within its own attempt budget, with
 * the task's backoff; the job's progress is the whole pipeline's percent by stage weight, and
 * `stagePercent` the running stage's own.
 */
import { backoffDelay } from '../core/backoff.js';
import { classifyError, FatalError, LeaseLostError } from '../core/errors.js';
import type { ProgressUpdate } from '../core/progress.js';
import type { StageDefinition, Task, TaskContext } from '../task-api/define.js';
import { JobAbortedError } from '../core/abort.js';
import { storedResult } from '../core/json-copy.js';
import { Suspended, type WorkflowRun } from './run.js';

/** Errors that end the attempt rather than the stage: a wait, a lost lease, a cancel or shutdown. */
export function endsTheAttempt(err: unknown, signal: AbortSignal): boolean {
  return err instanceof Suspended || err instanceof LeaseLostError || err instanceof JobAbortedError || signal.aborted;
}

/** Resolves after `ms`, or rejects with the signal's reason when it fires first. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

class StageTimeoutError extends Error {
  readonly code = 'STAGE_TIMEOUT';
  constructor(stage: string, ms: number) {
    super(`stage "${stage}" timed out after ${ms} ms`);
    this.name = 'StageTimeoutError';
  }
}

/**
 * A stage's ctx: the job's, with the stage's own signal and progress. Every other part is read
 * from the job's ctx itself (not through a prototype: its getters hold their state in private
 * fields, which an object made by Object.create(ctx) does not have, so `ctx.log` threw there).
 */
class StageContext implements TaskContext {
  readonly #job: TaskContext;
  readonly signal: AbortSignal;
  readonly progress: TaskContext['progress'];

  constructor(job: TaskContext, signal: AbortSignal, progress: TaskContext['progress']) {
    this.#job = job;
    this.signal = signal;
    this.progress = progress;
  }

  get job(): TaskContext['job'] {
    return this.#job.job;
  }
  get attempt(): number {
    return this.#job.attempt;
  }
  get checkpoint(): TaskContext['checkpoint'] {
    return this.#job.checkpoint;
  }
  get log(): TaskContext['log'] {
    return this.#job.log;
  }
  get stage(): TaskContext['stage'] {
    return this.#job.stage;
  }
  get spawn(): TaskContext['spawn'] {
    return this.#job.spawn;
  }
  get sleep(): TaskContext['sleep'] {
    return this.#job.sleep;
  }
  get sleepUntil(): TaskContext['sleepUntil'] {
    return this.#job.sleepUntil;
  }
  get waitFor(): TaskContext['waitFor'] {
    return this.#job.waitFor;
  }
  get children(): TaskContext['children'] {
    return this.#job.children;
  }
  get results(): TaskContext['results'] {
    return this.#job.results;
  }
  get uploads(): TaskContext['uploads'] {
    return this.#job.uploads;
  }
}

/** Runs one attempt of a stage: its own signal (the job's, and its timeout) and progress. */
async function attemptStage(stage: StageDefinition, input: unknown, ctx: TaskContext, previous: unknown, report: (u: ProgressUpdate | number) => void): Promise<unknown> {
  const controller = new AbortController();
  const onJobAbort = () => controller.abort(ctx.signal.reason);
  ctx.signal.addEventListener('abort', onJobAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const stageCtx = new StageContext(ctx, controller.signal, report);
  try {
    const run = Promise.resolve().then(() => stage.run(input, stageCtx, previous));
    if (stage.timeoutMs === undefined) return await run;
    const timeoutMs = stage.timeoutMs;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const err = new StageTimeoutError(stage.name, timeoutMs);
        controller.abort(err);
        reject(err);
      }, timeoutMs);
    });
    run.catch(() => undefined); // a stage that throws after its timeout is not an unhandled rejection
    return await Promise.race([run, timedOut]);
  } finally {
    clearTimeout(timer);
    ctx.signal.removeEventListener('abort', onJobAbort);
  }
}

/** Runs the task's stages from the first one not yet done; resolves to the last stage's output. */
export async function runStages(task: Task, input: unknown, ctx: TaskContext, wf: WorkflowRun): Promise<unknown> {
  const stages = task.stages as readonly StageDefinition[];
  const weights = stages.map((s) => s.weight ?? 1);
  const totalWeight = weights.reduce((a, b) => a + b, 0) || 1;
  let doneWeight = 0;
  let previous: unknown;
  for (const [i, stage] of stages.entries()) {
    const weight = weights[i] as number;
    const saved = wf.journal.stages[stage.name];
    if (saved) {
      previous = saved.output;
      doneWeight += weight;
      continue;
    }
    const report = (u: ProgressUpdate | number) => {
      const update: ProgressUpdate = typeof u === 'number' ? { percent: u } : { ...u };
      const own = update.percent;
      // The stage's own percent, and the job's: stages before it, and its share by weight.
      if (own !== undefined) {
        update.stagePercent = own;
        update.percent = ((doneWeight + (weight * Math.min(100, Math.max(0, own))) / 100) / totalWeight) * 100;
      }
      update.stage = stage.name;
      ctx.progress(update);
    };
    report({ percent: 0 });
    const maxAttempts = stage.maxAttempts ?? 3;
    for (;;) {
      let output: unknown;
      try {
        output = await wf.inScope(`stage:${stage.name}`, () => attemptStage(stage, input, ctx, previous, report));
      } catch (err) {
        if (endsTheAttempt(err, ctx.signal)) throw err;
        const { error } = classifyError(err);
        const failures = (wf.journal.stageAttempts[stage.name] ?? 0) + 1;
        wf.journal.stageAttempts[stage.name] = failures;
        if (!error.retryable || failures >= maxAttempts) {
          throw new FatalError(`stage "${stage.name}" failed after ${failures} attempt(s): ${error.message}`, { code: error.code === 'STAGE_TIMEOUT' ? 'STAGE_TIMEOUT' : 'STAGE_FAILED' });
        }
        await wf.save(); // a crash now resumes this stage with the failures it already had
        const delay = backoffDelay(task.backoff, failures);
        ctx.log.warn({ stage: stage.name, failures, maxAttempts, retryInMs: delay, err }, 'stage failed; retrying it');
        await pause(delay, ctx.signal);
        continue;
      }
      const stored = storedResult(output);
      if (!stored.ok) throw new FatalError(`stage "${stage.name}": ${stored.error.message}`, { code: stored.error.code });
      wf.journal.stages[stage.name] = { output: stored.value };
      delete wf.journal.stageAttempts[stage.name];
      await wf.save();
      previous = stored.value;
      doneWeight += weight;
      ctx.progress({ percent: (doneWeight / totalWeight) * 100, stage: stage.name, stagePercent: 100 });
      break;
    }
  }
  return previous;
}
