/**
 * The attempts a worker holds (claimed, running, or ending), shared by its parts: the claim loop
 * starts and ends them, lease upkeep heartbeats and aborts them, the handler context writes on
 * their behalf.
 */
import type { JobRecord } from '../core/job.js';
import type { Task } from '../task-api/define.js';
import type { AbortKind } from '../core/abort.js';
import { AttemptAbort } from './abort.js';
import type { LongTimer } from './long-timer.js';
import type { Outcome } from './outcome.js';
import type { WorkflowRun } from '../workflow/run.js';
import type { ProgressReporter } from './progress-reporter.js';
import type { AttemptSpan } from '../telemetry/attempt-spans.js';

export interface Active {
  job: JobRecord;
  task: Task;
  /** Its abort state (`ctx.signal` is made from it on first read). */
  abortState: AttemptAbort;
  /** Made on the first progress report: most jobs' contexts never need one. */
  reporter: ProgressReporter | null;
  nextHeartbeatAt: number;
  timeoutTimer: LongTimer | null;
  /** Set once the job's outcome is queued for writing (or it was handed back). */
  settled: boolean;
  /** The outcome to write, once decided. */
  outcome: Outcome | null;
  /** Its handler was started (jobs claimed ahead wait in the ready list until a slot frees). */
  started: boolean;
  /** performance.now() when its handler started (0 before). */
  startedAt: number;
  /**
   * Its handler ignored its signal past the drain period after its job ended (timeout, cancel,
   * lost lease): the worker ended the attempt without it and freed its slot (runtime.ts
   * `abandonStuck`); whatever the handler does later is refused by the lease.
   */
  abandoned: boolean;
  /** Its handler returned or threw (after an abandonment too). */
  returned: boolean;
  /** Its tracing span, when the application traces (null otherwise). */
  span: AttemptSpan | null;
  /** performance.now() when this worker got it (for how long it waits for a slot). */
  claimedAt: number;
  /** Its workflow journal and waits, made on first use (most jobs never wait). */
  workflow: WorkflowRun | null;
}

export function newActive(job: JobRecord, task: Task, nextHeartbeatAt: number): Active {
  return {
    job,
    task,
    abortState: new AttemptAbort(),
    reporter: null,
    nextHeartbeatAt,
    timeoutTimer: null,
    settled: false,
    outcome: null,
    started: false,
    startedAt: 0,
    abandoned: false,
    returned: false,
    span: null,
    claimedAt: performance.now(),
    workflow: null,
  };
}

/** The cancel kind a recorded cancel reason stands for. */
export function cancelKindOf(reason: string | null): 'cancelled' | 'timeout' {
  return reason === 'timeout' ? 'timeout' : 'cancelled';
}

export class Attempts {
  /**
   * By the claimed record (`Active.job`, never replaced): after a lease is lost and the job
   * re-claimed, this worker may run a stale attempt and a new one of the same job at once, each
   * with its own record and entry. (An object key is hashed once; a `${id}#${lease}` string was
   * built and hashed on every add and forget.)
   */
  private readonly byLease = new Map<JobRecord, Active>();
  /** How many entries each job id has (more than one only after a lease was lost). */
  private readonly countById = new Map<string, number>();

  get size(): number {
    return this.byLease.size;
  }

  values(): IterableIterator<Active> {
    return this.byLease.values();
  }

  add(active: Active): void {
    const { job } = active;
    // Re-claimed while an older attempt of it still runs here: that attempt's lease is gone.
    // (Looked up by id only when this worker holds another attempt of the job: it may hold
    // hundreds of jobs claimed ahead, and a scan per claimed job would cost more than the job.)
    if (this.countById.has(job.id)) {
      for (const other of this.byLease.values()) if (other.job.id === job.id && other.job.lease < job.lease) other.abortState.abort('lease-lost');
    }
    this.byLease.set(job, active);
    this.countById.set(job.id, (this.countById.get(job.id) ?? 0) + 1);
  }

  /** Forgets the attempt of this record (its `Active.job`). */
  forget(job: JobRecord): void {
    if (!this.byLease.delete(job)) return;
    const n = (this.countById.get(job.id) ?? 1) - 1;
    if (n > 0) this.countById.set(job.id, n);
    else this.countById.delete(job.id);
  }

  /** Aborts every attempt of job `id` held here (a cancel request seen in this process). */
  abortJob(id: string, kind: AbortKind): void {
    if (!this.countById.has(id)) return;
    for (const active of this.byLease.values()) if (active.job.id === id) active.abortState.abort(kind);
  }

  clear(): void {
    this.byLease.clear();
    this.countById.clear();
  }
}
