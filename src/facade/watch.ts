/**
 * Following one job: its snapshots as they change, from this process's bus, the channel's
 * relayed events, and store reads that cover whatever the events miss.
 */
import type { JobBus } from '../channel/bus.js';
import { JobNotFoundError } from '../core/errors.js';
import type { JobRecord, JobSnapshot } from '../core/job.js';
import { nextInOrder } from '../core/snapshot-order.js';
import { isTerminal } from '../core/states.js';
import { type ReadContext, snapshots, type TenantScope } from './reads.js';

/** How often a watch reads the store when no channel relays other processes' changes. */
const WATCH_POLL_MS = 250;
/** With a channel: a read now and then, in case a relayed event was lost. */
const WATCH_SAFETY_POLL_MS = 2000;

export type WatchOptions = TenantScope & { signal?: AbortSignal; pollMs?: number };

export interface WatchContext extends ReadContext {
  readonly bus: JobBus;
  /** Whether a channel relays other processes' changes (then the store is read only as a safety net). */
  readonly relayed: boolean;
  /** A watch ends, quietly, when the instance closes. */
  isClosed(): boolean;
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
  // With a channel, other processes' changes arrive as events; the poll is only a safety net.
  const timer = setInterval(poke, options.pollMs ?? (ctx.relayed ? WATCH_SAFETY_POLL_MS : WATCH_POLL_MS));
  try {
    while (!options.signal?.aborted && !ctx.isClosed()) {
      if (dirty || pushed) {
        let snap: JobSnapshot;
        if (dirty) {
          dirty = false;
          pushed = null;
          const job = (await ctx.store.getJob({ id, ...scope })) ?? deletedAs;
          if (!job) throw new JobNotFoundError(id);
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
    clearInterval(timer);
    for (const off of offs) off();
    options.signal?.removeEventListener('abort', onAbort);
  }
}
