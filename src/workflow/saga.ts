/**
 * Sagas: a task's `steps` run in order, each completed step's output saved in the journal.
 * When a step fails for good (a fatal error, or its job's last attempt), the completed steps are
 * compensated in reverse order, each one saved and noted in the transition log as it is done, so
 * a crash during compensation resumes compensating where it stopped. The job then ends failed
 * with `compensated: true` in its error, or with `compensationFailed` when a compensation
 * itself failed (the steps before that one are left as they are: undoing them could be wrong
 * once an undo failed; a manual retry tries the failed compensation again).
 *
 * A step that fails with attempts left fails the attempt as any handler error does: the job is
 * retried with backoff, and the next attempt starts at the step that failed.
 *
 * A worker that dies (its heartbeat lost) fails its attempt the same way: the reaper requeues
 * the job while attempts remain, and the step it died in runs again. When it dies on the last
 * attempt with steps completed, the reaper grants one attempt more (core/transitions.ts
 * reapLostWorker), which only compensates: the step the worker died in is taken as failed with
 * the lost worker's error (the job's last error) and is not run again. So does an attempt that
 * failed outside its steps on the last attempt, a journal write out of reach past its retries
 * (worker/outcome.ts sagaOutcome).
 */
import { classifyError, FatalError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';
import { lostWorkerError } from '../core/lifecycle.js';
import { compensationOnly } from '../core/workflow.js';
import type { SagaStep, Task, TaskContext } from '../task-api/define.js';
import { storedResult } from '../core/json-copy.js';
import type { WorkflowRun } from './run.js';
import { endsTheAttempt } from './stages.js';

export interface SagaHost {
  /** Writes a note in the job's transition log (under the lease). */
  note(reason: string): Promise<void>;
}

function stepOf(task: Task, name: string): SagaStep | undefined {
  return (task.steps as readonly SagaStep[]).find((s) => s.name === name);
}

/** Runs the saga from where its journal stands; resolves to the last step's output. */
export async function runSaga(task: Task, job: Pick<JobRecord, 'attempts' | 'maxAttempts' | 'error'>, input: unknown, ctx: TaskContext, wf: WorkflowRun, host: SagaHost): Promise<unknown> {
  const journal = wf.journal;
  if (journal.compensation === null) {
    let previous: unknown = journal.steps.at(-1)?.output;
    for (const step of task.steps as readonly SagaStep[]) {
      if (journal.steps.some((s) => s.name === step.name)) continue;
      if (compensationOnly(job.attempts, job.maxAttempts)) {
        // This step did not complete on the job's last attempt (its worker died in it, or the
        // journal could not be written after it: worker/outcome.ts sagaOutcome): undo the steps
        // done, do not run it again.
        const error = job.error ?? lostWorkerError(job.maxAttempts, job.maxAttempts);
        journal.compensation = { failedStep: step.name, error, done: [], failed: null };
        await wf.save();
        const how = error.code === 'HEARTBEAT_TIMEOUT' ? 'lost with its worker' : 'not completed';
        await host.note(`step ${step.name} ${how} on the last attempt; compensating`);
        break;
      }
      let output: unknown;
      try {
        output = await wf.inScope(`step:${step.name}`, async () => await step.run(input, ctx, previous));
      } catch (err) {
        if (endsTheAttempt(err, ctx.signal)) throw err;
        const { error } = classifyError(err);
        // Attempts left: the job is retried and starts again at this step.
        if (error.retryable && job.attempts < job.maxAttempts) throw err;
        journal.compensation = { failedStep: step.name, error, done: [], failed: null };
        await wf.save();
        await host.note(`step ${step.name} failed; compensating`);
        break;
      }
      const stored = storedResult(output);
      if (!stored.ok) throw new FatalError(`step "${step.name}": ${stored.error.message}`, { code: stored.error.code });
      journal.steps.push({ name: step.name, output: stored.value });
      await wf.save();
      previous = stored.value;
    }
    if (journal.compensation === null) return previous;
  }
  const compensation = journal.compensation;
  // A manual retry after a failed compensation tries that compensation again.
  compensation.failed = null;
  for (const done of [...journal.steps].reverse()) {
    if (compensation.done.includes(done.name)) continue;
    const step = stepOf(task, done.name);
    if (step?.compensate) {
      try {
        await wf.inScope(`compensate:${done.name}`, async () => await step.compensate?.(input, ctx, done.output));
      } catch (err) {
        if (endsTheAttempt(err, ctx.signal)) throw err;
        const { error } = classifyError(err);
        compensation.failed = { step: done.name, error };
        await wf.save();
        await host.note(`compensation of ${done.name} failed`);
        throw new FatalError(`step "${compensation.failedStep}" failed: ${compensation.error.message}; then compensating step "${done.name}" failed: ${error.message}`, {
          code: compensation.error.code,
          details: { compensationFailed: { step: done.name, message: error.message } },
        });
      }
    }
    compensation.done.push(done.name);
    await wf.save();
    await host.note(step?.compensate ? `compensated ${done.name}` : `nothing to compensate for ${done.name}`);
  }
  throw new FatalError(`step "${compensation.failedStep}" failed: ${compensation.error.message}`, { code: compensation.error.code, details: { compensated: true } });
}
