/**
 * Control: cancel and manual retry. Each decision is a pure builder of core/transitions.ts,
 * written (compare-and-swap) and announced by transitions/apply.ts; a lost race reads again.
 */
import type { JobBus } from '../channel/bus.js';
import { JobStateConflictError } from '../core/errors.js';
import { type JobSnapshot, toSnapshot } from '../core/job.js';
import { IMMEDIATELY_CANCELLABLE, isTerminal } from '../core/states.js';
import { cancelNow, manualRetry, requestCancel } from '../core/transitions.js';
import type { JobQueueStore, WebhookOutboxStore, WorkflowStore } from '../store/store.js';
import { applyTransition } from '../transitions/apply.js';
import { cancelChildren, PARENT_CANCELLED } from '../workflow/cancel-children.js';
import { mustGetJob, type TenantScope, withChildren } from './reads.js';

export interface ControlContext {
  /** A retry rearms the job's webhook before it moves; a parent's snapshot counts its children; signals are stored. */
  readonly store: JobQueueStore & WebhookOutboxStore & Pick<WorkflowStore, 'countChildren' | 'sendSignal'>;
  /** Where applied transitions are announced (streams, webhooks, workers running the job). */
  readonly bus: JobBus;
}

/**
 * Queued work (pending, queued, retrying, waiting) is cancelled at once; a running job gets a
 * cancel request (its ctx.signal fires) and is forced to cancelled after the drain period if
 * the handler ignores it. A terminal job is a JobStateConflictError. A job with children has
 * them cancelled too, and theirs (workflow/cancel-children.ts).
 */
export async function cancelJob(ctx: ControlContext, id: string, scope: TenantScope): Promise<JobSnapshot> {
  const { store, bus } = ctx;
  for (let round = 0; round < 20; round++) {
    const job = await mustGetJob(store, id, scope);
    const now = Date.now();
    if (isTerminal(job.state)) throw new JobStateConflictError(id, job.state, 'cancel');
    let done = false;
    if (IMMEDIATELY_CANCELLABLE.has(job.state)) {
      done = await applyTransition(store, bus, job, cancelNow(job, now));
    } else if (job.state === 'running') {
      // A cancel already requested still cascades: children spawned since, or a cascade cut short, are stopped too.
      done = job.cancelRequested || (await applyTransition(store, bus, job, requestCancel(job, now)));
    }
    if (!done) continue; // lost a race: look again
    // The parent first: once it is cancelled (or asked to stop) it spawns no more children.
    if (job.childrenTotal > 0) await cancelChildren(store, bus, id, now, PARENT_CANCELLED);
    return withChildren(store, toSnapshot(await mustGetJob(store, id, scope)), job.childrenTotal);
  }
  throw new Error(`could not cancel job ${id}: it kept changing state`);
}

/** Manual retry of a failed or cancelled job: a fresh attempt budget; it resumes from its checkpoint. */
export async function retryJob({ store, bus }: ControlContext, id: string, scope: TenantScope): Promise<JobSnapshot> {
  const job = await mustGetJob(store, id, scope);
  if (job.state !== 'failed' && job.state !== 'cancelled') throw new JobStateConflictError(id, job.state, 'retry');
  // Before the transition: the next end of the job sends an event again (the one already sent is not repeated).
  await store.rearmWebhook({ jobId: id });
  if (!(await applyTransition(store, bus, job, manualRetry(job, Date.now())))) {
    const fresh = await mustGetJob(store, id, scope);
    throw new JobStateConflictError(id, fresh.state, 'retry');
  }
  const fresh = await mustGetJob(store, id, scope);
  return withChildren(store, toSnapshot(fresh), fresh.childrenTotal);
}
