/**
 * Cancel cascading: when a parent is cancelled, its open children are cancelled too, and theirs
 * in turn. (A fail-fast wait's failed child: the store stops the siblings as it wakes the parent,
 * fail-fast.ts; this cascade takes their children, and the parent's handler runs it again when
 * it wakes, for any sibling left open.) A child that no worker holds is cancelled at once; a running one
 * gets a cancel request (its handler's ctx.signal fires, and the sweeper forces it after the
 * drain period as for any cancel). Every write goes through applyTransitions, so each one that
 * applied is announced like a user's cancel.
 */
import type { JobBus } from '../channel/bus.js';
import type { JobRecord } from '../core/job.js';
import type { JobState } from '../core/states.js';
import { cancelAsChild, requestCancelAsChild } from '../core/transitions.js';
import type { JobQueueStore } from '../store/store.js';
import { applyTransitions, type Planned } from '../transitions/apply.js';

/** Why a cancelled parent's children are cancelled (their log and error say it). */
export const PARENT_CANCELLED = 'parent cancelled';

/** The states of a child that still has to be cancelled. */
const OPEN_STATES: JobState[] = ['pending', 'queued', 'retrying', 'waiting', 'running'];
/** Children read, and written, per store call: one transaction cancels a whole page. */
const PAGE = 500;
/** Rounds for children that moved between the read and the write (claimed, finished): each is read again. */
const RACE_ROUNDS = 5;

/** The write that stops `child`, or null when there is nothing to do (a cancel already requested). */
function stopWrite(child: JobRecord, now: number, reason: string): Planned | null {
  if (child.state === 'running') return child.cancelRequested ? null : { job: child, write: requestCancelAsChild(child, now, reason) };
  return { job: child, write: cancelAsChild(child, now, reason) };
}

/**
 * Cancels the open children of `parentId` and, depth first, of those children that have children
 * of their own. Returns how many jobs it cancelled or asked to cancel (writes that applied).
 *
 * Pages through the children by cursor: a cancelled child leaves the open states but the cursor
 * is already past it, a running one stays (its cancel requested) and is passed over, so the walk
 * ends after one pass. A child whose write lost a race is read again and stopped in its new state.
 */
export async function cancelChildren(store: JobQueueStore, bus: JobBus, parentId: string, now: number, reason: string): Promise<number> {
  let count = 0;
  let cursor: string | null = null;
  do {
    const page = await store.listJobs({ parentId, states: OPEN_STATES, limit: PAGE, cursor });
    cursor = page.nextCursor;
    let pending = page.items;
    const parents = new Set<string>();
    for (let round = 0; round < RACE_ROUNDS && pending.length > 0; round++) {
      const planned: Planned[] = [];
      for (const child of pending) {
        if (child.childrenTotal > 0) parents.add(child.id);
        const p = stopWrite(child, now, reason);
        if (p) planned.push(p);
      }
      const applied = await applyTransitions(store, bus, planned);
      const lost: JobRecord[] = [];
      for (const [i, ok] of applied.entries()) {
        if (ok) {
          count++;
          continue;
        }
        const fresh = await store.getJob({ id: (planned[i] as Planned).job.id });
        if (fresh && OPEN_STATES.includes(fresh.state)) lost.push(fresh);
      }
      pending = lost;
    }
    for (const id of parents) count += await cancelChildren(store, bus, id, now, reason);
  } while (cursor !== null);
  return count;
}
