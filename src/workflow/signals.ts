/**
 * Sending a signal to a job (`lh.signal`, `POST /v1/jobs/{id}/signals/{name}`): the payload is
 * checked like a submission's input, stored by the store (which wakes the job when it waits for
 * that name, or keeps the signal for its next wait), and a wake-up is announced like any other
 * change of state.
 */
import type { JobBus } from '../channel/bus.js';
import { InvalidOptionsError, JobEndedError, JobNotFoundError } from '../core/errors.js';
import { signalNameProblem } from '../core/limits.js';
import type { JobIdentity } from '../core/transitions.js';
import { jsonCopy } from '../core/json-copy.js';
import type { WorkflowStore } from '../store/store.js';

export interface SignalOutcome {
  jobId: string;
  name: string;
  /** True when the job was waiting for this signal and is queued again; false when it is kept for the job's next wait. */
  resumed: boolean;
}

/** A waiting job the store queued again, announced as the change it is (waiting → queued). */
export function announceResumed(bus: JobBus, job: JobIdentity, reason: string): void {
  bus.emit('job:changed', { id: job.id, tenant: job.tenant, type: job.type, from: 'waiting', to: 'queued', reason });
}

export async function sendSignal(
  ctx: { store: Pick<WorkflowStore, 'sendSignal'>; bus: JobBus },
  id: string,
  name: string,
  payload: unknown,
  scope: { tenant?: string },
): Promise<SignalOutcome> {
  const problem = signalNameProblem(name);
  if (problem) throw new InvalidOptionsError(`signal name ${problem}`, 'name');
  // Stored as JSON, like a submission's input: the same checks (serializable, depth, storable strings).
  const value = payload === undefined || payload === null ? null : jsonCopy(payload, 'payload');
  const res = await ctx.store.sendSignal({ id, name, payload: value, at: Date.now(), ...(scope.tenant === undefined ? {} : { tenant: scope.tenant }) });
  switch (res.kind) {
    case 'not-found':
      throw new JobNotFoundError(id);
    case 'ended':
      throw new JobEndedError(id, res.state);
    case 'accepted':
      if (res.resumed) announceResumed(ctx.bus, res.job, res.reason);
      return { jobId: id, name, resumed: res.resumed };
  }
}
