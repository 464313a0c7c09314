/**
 * Workflows: what a suspended job waits for, and the journal that lets a handler run again from
 * the top after each wait and find every earlier wait, stage and saga step already done.
 *
 * A handler that waits (ctx.spawn, ctx.sleep, ctx.waitFor) is suspended: its job goes
 * running → waiting, its worker slot is freed, and the job is queued again when its condition
 * holds. The handler then runs again from the start; each wait it reaches again is found in the
 * journal by its key (the scope it runs in and its place there) and returns at once.
 *
 * Pure: no I/O.
 */
import type { JobError } from './errors.js';
import type { Progress } from './progress.js';

/**
 * A waiting job's wake-up time when only its condition wakes it (children, or a signal without
 * a timeout): far beyond any real date, so the due-promotion never picks it.
 */
export const NEVER = 8_640_000_000_000_000;

/** What a waiting job waits for, as the store keeps it (see JobQueueStore.suspend). */
export type WaitCondition =
  /** Its children all terminal; with failFast also the first child that ends failed or cancelled. */
  | { kind: 'children'; failFast: boolean }
  /** Its runAt (durable sleep). */
  | { kind: 'sleep' }
  /** A signal `name` (or its runAt: the wait's timeout). `key` names the wait in the journal. */
  | { kind: 'signal'; name: string; key: string };

/** One wait of the journal, by key. */
export type WaitEntry =
  | { kind: 'sleep'; until: number }
  | { kind: 'signal'; name: string; deadline: number | null }
  | { kind: 'spawn'; count: number; failFast: boolean };

/** A pipeline stage that succeeded: its output is kept, the stage never runs again. */
export interface StageRecord {
  output: unknown;
}

/** Where a saga stands once a step failed for good. */
export interface Compensation {
  /** The step that failed, and why. */
  failedStep: string;
  error: JobError;
  /** Steps compensated so far, in the order they were. */
  done: string[];
  /** A compensation that failed (the saga stops compensating and the job fails with it flagged). */
  failed: { step: string; error: JobError } | null;
}

/** The journal of a job's workflow, kept with the job (the store's `workflow` column). */
export interface WorkflowState {
  /** Waits reached so far, by key (`scope#n`: the n-th wait of that scope). */
  waits: Record<string, WaitEntry>;
  /** Outputs of the stages that succeeded, by stage name. */
  stages: Record<string, StageRecord>;
  /** Failed attempts of the stage that is running, by stage name (a stage's own retry budget). */
  stageAttempts: Record<string, number>;
  /** Saga steps that completed, in order, with their outputs. */
  steps: Array<{ name: string; output: unknown }>;
  compensation: Compensation | null;
}

export function emptyWorkflow(): WorkflowState {
  return { waits: {}, stages: {}, stageAttempts: {}, steps: [], compensation: null };
}

/** A stored journal, completed with defaults (journals written before a field existed). */
export function readWorkflow(value: unknown): WorkflowState {
  const w = (value ?? {}) as Partial<WorkflowState>;
  return {
    waits: w.waits ?? {},
    stages: w.stages ?? {},
    stageAttempts: w.stageAttempts ?? {},
    steps: w.steps ?? [],
    compensation: w.compensation ?? null,
  };
}

/**
 * Whether ending a saga's job now would leave completed steps done and not undone: it completed
 * steps not compensated yet, and no compensation of it failed (after a failed one it stops on
 * purpose). Such a saga runs again even when its attempts are spent: when its worker dies
 * (core/transitions.ts reapLostWorker) and when an attempt fails outside its steps, a journal
 * write refused or out of reach (worker/outcome.ts sagaOutcome).
 */
export function owesCompensation(journal: WorkflowState): boolean {
  const c = journal.compensation;
  if (c !== null && c.failed !== null) return false;
  return journal.steps.some((s) => c === null || !c.done.includes(s.name));
}

/**
 * Whether attempt `attempts` may only compensate: an attempt beyond the job's `maxAttempts`,
 * which only the reaper grants (to a saga whose worker died with compensation owed). It runs
 * no step forward (workflow/saga.ts): the step not done yet failed with the worker.
 */
export function compensationOnly(attempts: number, maxAttempts: number): boolean {
  return attempts > maxAttempts;
}

/** What a job waits for, as a snapshot shows it while the job is `waiting`. */
export interface JobWait {
  kind: 'children' | 'sleep' | 'signal';
  /** The signal's name (kind 'signal'). */
  name: string | null;
  /** Children: whether the first failed child wakes the parent. */
  failFast: boolean;
}

/** The aggregate progress of a parent with `total` children of which `ended` ended, `running` the percents of running ones known here. */
export function aggregateProgress(total: number, ended: number, running: Iterable<number>, at: number): Progress {
  let partial = 0;
  for (const p of running) partial += Math.min(100, Math.max(0, p));
  const percent = total === 0 ? 100 : Math.min(100, Math.round(((ended * 100 + partial) / total) * 100) / 100);
  return { percent, stage: 'children', itemsDone: ended, itemsTotal: total, message: null, eta: null, updatedAt: new Date(at).toISOString() };
}
