/**
 * What follows a store call that queued parents again (`resumeParents` after children ended,
 * `resumeStrandedParents` in the sweeper): each parent's wake-up is announced, and for a
 * fail-fast wake-up (reason 'child failed') so is each sibling the store stopped in that same
 * transaction (cancelled, or a cancel request for a running one: `job:changed`, and
 * `job:cancel-requested`, which aborts its handler's ctx.signal wherever it runs). A stopped
 * sibling with children of its own has them cancelled in turn, and theirs, as a cancelled
 * parent's are (cancel-children.ts, reason 'parent cancelled'), in writes after the store's.
 */
import type { JobBus } from '../channel/bus.js';
import type { JobQueueStore, ResumedJob } from '../store/store.js';
import { announce } from '../transitions/apply.js';
import { cancelChildren, PARENT_CANCELLED } from './cancel-children.js';
import { announceResumed } from './signals.js';

/**
 * Announces `resumed` and what the store stopped with them, then cascades to the stopped
 * siblings' children. Resolves to how many jobs the cascade cancelled or asked to cancel.
 */
export async function announceResumedParents(store: JobQueueStore, bus: JobBus, resumed: readonly ResumedJob[], now: number): Promise<number> {
  const cascade: string[] = [];
  for (const r of resumed) {
    for (const s of r.stopped ?? []) {
      announce(bus, s.job, s.write);
      if (s.childrenTotal > 0) cascade.push(s.job.id);
    }
    announceResumed(bus, r, r.reason);
  }
  let count = 0;
  for (const id of cascade) count += await cancelChildren(store, bus, id, now, PARENT_CANCELLED);
  return count;
}
