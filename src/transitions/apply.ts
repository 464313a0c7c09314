/**
 * Applying transitions: writes what `core/transitions.ts` built and announces each write that
 * applied, with the events the write implies (`eventsOf`). Every transition outside a store's
 * bulk claims and promotions goes through here: the facade's cancel and retry, the worker's
 * outcomes and timeout requests, and the sweeper.
 */
import type { JobBus } from '../channel/bus.js';
import { eventsOf, type JobIdentity, type TransitionParams } from '../core/transitions.js';
import type { JobQueueStore } from '../store/store.js';

/** A write and the job it names (for the announcement). */
export interface Planned {
  job: JobIdentity;
  write: TransitionParams;
}

/** Emits what an applied write announces (for writes a store made as part of a larger call). */
export function announce(bus: JobBus, job: JobIdentity, write: TransitionParams, deleted = false): void {
  for (const e of eventsOf(job, write)) {
    if (e.name === 'job:changed') bus.emit('job:changed', deleted ? { ...e.data, deleted: true } : e.data);
    else bus.emit('job:cancel-requested', e.data);
  }
}

/** Writes the transitions in one store call; announces those that applied. Per item: applied or not. */
export async function applyTransitions(store: Pick<JobQueueStore, 'transition'>, bus: JobBus, planned: readonly Planned[]): Promise<boolean[]> {
  if (planned.length === 0) return [];
  const applied = await store.transition({ items: planned.map((p) => p.write) });
  planned.forEach((p, i) => {
    if (applied[i]) announce(bus, p.job, p.write);
  });
  return applied;
}

/** The same for one transition. */
export async function applyTransition(store: Pick<JobQueueStore, 'transition'>, bus: JobBus, job: JobIdentity, write: TransitionParams): Promise<boolean> {
  const [ok] = await applyTransitions(store, bus, [{ job, write }]);
  return ok === true;
}
