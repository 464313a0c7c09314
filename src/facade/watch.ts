/**
 * Following one job: its snapshots as they change, from this process's bus, the channel's
 * relayed events, and store reads that cover whatever the events miss.
 */
import type { JobBus } from '../channel/bus.js';
import { JobNotFoundError } from '../core/errors.js';
import { type JobRecord, type JobSnapshot, toSnapshot } from '../core/job.js';
import { nextInOrder, snapshotKey } from '../core/snapshot-order.js';
import { isTerminal } from '../core/states.js';
import { type ReadContext, snapshots, type TenantScope } from './reads.js';
import type { WatchBackstop } from './watch-backstop.js';

/** How often the watched jobs are read when no channel relays other processes' changes. */
export const WATCH_POLL_MS = 250;
/** With a channel: a read now and then, in case a relayed event was lost. */
export const WATCH_SAFETY_POLL_MS = 2000;

/**
 * `pollMs`: this watch reads its job on its own timer, at this interval, rather than with the
 * process's other watches (watch-backstop.ts) at theirs.
 */
export type WatchOptions = TenantScope & { signal?: AbortSignal; pollMs?: number };

export interface WatchContext extends ReadContext {
  readonly bus: JobBus;
  /** Whether a channel relays other processes' changes (then the store is read only as a safety net). */
  readonly relayed: boolean;
  /** A watch ends, quietly, when the instance closes. */
  isClosed(): boolean;
  /** The one periodic read of every job the process watches (WATCH_POLL_MS, or WATCH_SAFETY_POLL_MS with a channel). */
  readonly backstop: WatchBackstop;
}

/** What a record shows a stream; a record that shows nothing new is not turned into a snapshot. */
function recordKey(job: JobRecord): string {
  return snapshotKey(toSnapshot(job));
}

/**
 * Snapshots of one job as it changes: the current one first, then one per visible change
 * (state, flags, progress), ending after the terminal snapshot.
 */
export async function* watchJob(ctx: WatchContext, id: string, options: WatchOptions): AsyncGenerator<JobSnapshot> {
  const { bus } = ctx;
  const scope = options.tenant === undefined ? {} : { tenant: options.tenant };
  let wake: (() => void) | null = null;
  let dirty = true;
  const poke = () => {
    dirty = true;
    wake?.();
  };
  let last: JobSnapshot | null = null;
  // Progress published on the bus is applied to the last snapshot without a store read.
  let pushed: JobSnapshot | null = null;
  // The record a job ended with when the write that ended it deleted it (retention 0).
  let deletedAs: JobRecord | null = null;
  // A record the periodic read found changed, and what the last record read showed.
  let polled: JobRecord | null = null;
  let lastRecord: string | null = null;
  const offs = [
    bus.on('job:deleted', (e) => {
      if (e.job.id === id && (options.tenant === undefined || e.job.tenant === options.tenant)) deletedAs = e.job;
    }),
    bus.on('job:changed', (e) => e.id === id && poke()),
    // Relayed events may have been lost while the channel was down: read the store again.
    bus.on('channel:resync', poke),
    bus.on('job:progress', (e) => {
      if (e.id !== id || !last || (last.status !== 'running' && last.status !== 'waiting')) return;
      // Progress can reach the bus by more than one route (a relayed copy arriving after a
      // newer one, two channels): one older than the newest seen is never applied.
      const newest = (pushed ?? last).progress.updatedAt;
      if (newest && e.progress.updatedAt && e.progress.updatedAt < newest) return;
      pushed = { ...last, progress: e.progress };
      wake?.();
    }),
  ];
  const onAbort = () => wake?.();
  options.signal?.addEventListener('abort', onAbort);
  // With a channel, other processes' changes arrive as events; the read is only a safety net.
  // It is the process's one read of every watched job, unless this watch asked for its own pace.
  const timer = options.pollMs === undefined ? null : setInterval(poke, options.pollMs);
  const offBackstop =
    options.pollMs !== undefined
      ? null
      : ctx.backstop.add(id, (job) => {
          // Not found, a failed read, or closing: the watch reads for itself (and meets it).
          if (job === null || (options.tenant !== undefined && job.tenant !== options.tenant)) return poke();
          // A parent's snapshot counts its children, which its own record does not show.
          if (job.childrenTotal === 0 && recordKey(job) === lastRecord) return;
          polled = job;
          wake?.();
        });
  try {
    while (!options.signal?.aborted && !ctx.isClosed()) {
      if (dirty || pushed || polled) {
        let snap: JobSnapshot;
        if (dirty || polled) {
          let job: JobRecord | null;
          if (dirty) {
            dirty = false;
            job = (await ctx.store.getJob({ id, ...scope })) ?? deletedAs;
          } else {
            job = polled;
          }
          polled = null;
          pushed = null;
          if (!job) throw new JobNotFoundError(id);
          lastRecord = recordKey(job);
          snap = (await snapshots(ctx, [job]))[0] as JobSnapshot;
        } else {
          snap = pushed as unknown as JobSnapshot;
          pushed = null;
        }
        // A store read may lag a progress event already seen: never step progress back.
        const ordered = nextInOrder(last ?? undefined, snap);
        if (ordered) {
          last = ordered;
          yield ordered;
        }
        if (isTerminal(snap.status)) return;
        continue;
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = null;
    }
  } finally {
    if (timer !== null) clearInterval(timer);
    offBackstop?.();
    for (const off of offs) off();
    options.signal?.removeEventListener('abort', onAbort);
  }
}
