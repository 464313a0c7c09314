/**
 * Fan-in and a parent's live progress, in every process that ends or runs children.
 *
 * - When a child ends (a `job:changed` this process made into succeeded, failed or cancelled),
 *   its parent is handed to `store.resumeParents`, which queues the parent again once its
 *   children are done (or, fail-fast, at the first failure, stopping the open siblings in the
 *   same transaction: fail-fast.ts announces them). Calls are coalesced: the children
 *   ending in one tick cost one store call. A process killed between a child's end and that
 *   call leaves the parent waiting: the sweeper's `resumeStrandedParents` finds it.
 * - A parent's progress is its children's: the share of children ended, plus the percent of
 *   those running here, published as the parent's `job:progress` (at most every
 *   `progressEveryMs` per parent, and never more than 5 % of the time counting its children
 *   takes) on this process's bus, and from there on every channel.
 *
 * Only this process's own events count (not those relayed from others): each child's end is
 * seen once, by the process that wrote it. Each process publishes what it sees (the ended count
 * from the store, the running children it runs itself), so with several worker processes the
 * figures interleave; streams keep the highest while the parent waits (core/snapshot-order.ts).
 */
import type { Logger } from 'pino';
import { isRelayed } from '../channel/bridge.js';
import type { JobBus } from '../channel/bus.js';
import { aggregateProgress } from '../core/workflow.js';
import { isTerminal, type JobState } from '../core/states.js';
import type { ResumedJob, Store } from '../store/store.js';
import { announceResumedParents } from './fail-fast.js';

export interface ParentTrackerOptions {
  store: Store;
  bus: JobBus;
  log: Logger;
  clock?: () => number;
  /** Minimum ms between two progress events of one parent. Default 250. */
  progressEveryMs?: number;
}

interface ParentState {
  /** Running children's percents, by child id. */
  running: Map<string, number>;
  timer: NodeJS.Timeout | null;
  lastAt: number;
  /** Least ms between two publications: counting 100,000 children takes tens of ms (see publishProgress). */
  gapMs: number;
  /** The parent's tenant and children total, read once. */
  parent: { tenant: string; total: number } | null;
}

export class ParentTracker {
  private readonly toResume = new Map<string, boolean>();
  private flushing: Promise<void> | null = null;
  private flushQueued = false;
  private readonly parents = new Map<string, ParentState>();
  private readonly clock: () => number;
  private readonly every: number;
  private unsubscribe: (() => void)[] = [];
  private closed = false;

  constructor(private readonly o: ParentTrackerOptions) {
    this.clock = o.clock ?? Date.now;
    this.every = o.progressEveryMs ?? 250;
  }

  start(): void {
    const { bus } = this.o;
    this.unsubscribe.push(
      bus.on('job:changed', (e) => {
        if (!e.parentId || isRelayed(e)) return;
        if (isTerminal(e.to) && !isTerminal(e.from)) {
          this.childEnded(e.parentId, e.id, e.to);
        }
      }),
      bus.on('job:progress', (e) => {
        if (!e.parentId || isRelayed(e) || e.progress === null) return;
        const state = this.stateOf(e.parentId);
        state.running.set(e.id, e.progress.percent ?? 0);
        this.scheduleProgress(e.parentId);
      }),
    );
  }

  private stateOf(parentId: string): ParentState {
    let s = this.parents.get(parentId);
    if (!s) {
      s = { running: new Map(), timer: null, lastAt: 0, gapMs: this.every, parent: null };
      this.parents.set(parentId, s);
    }
    return s;
  }

  private childEnded(parentId: string, childId: string, to: JobState): void {
    const failed = to === 'failed' || to === 'cancelled';
    this.toResume.set(parentId, (this.toResume.get(parentId) ?? false) || failed);
    this.stateOf(parentId).running.delete(childId);
    this.scheduleProgress(parentId);
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (this.flushQueued || this.closed) return;
    this.flushQueued = true;
    setImmediate(() => {
      this.flushQueued = false;
      void this.flush();
    });
  }

  /** Hands the parents whose children ended to the store; resolves when done (tests, close). */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.toResume.size === 0) return;
    const parents = [...this.toResume].map(([id, childFailed]) => ({ id, childFailed }));
    this.toResume.clear();
    this.flushing = (async () => {
      try {
        const at = this.clock();
        let resumed: ResumedJob[];
        try {
          resumed = await this.o.store.resumeParents({ parents, at });
        } catch (err) {
          // The sweeper's backstop (resumeStrandedParents) resumes them if this keeps failing.
          this.o.log.warn({ err, parents: parents.length }, 'could not resume parents after their children ended; the sweeper will');
          return;
        }
        this.forget(resumed);
        try {
          await announceResumedParents(this.o.store, this.o.bus, resumed, at);
        } catch (err) {
          // The siblings are stopped and announced; some of their own children were not
          // cancelled and run to their end, with nothing waiting for them (docs/workflows.md).
          this.o.log.warn({ err }, 'could not cancel the children of siblings stopped by a fail-fast parent');
        }
      } finally {
        this.flushing = null;
      }
    })();
    await this.flushing;
  }

  /** Drops the progress state of parents queued again (no timer pending). */
  private forget(resumed: readonly ResumedJob[]): void {
    for (const r of resumed) {
      const s = this.parents.get(r.id);
      if (s && s.timer === null) this.parents.delete(r.id);
    }
  }

  private scheduleProgress(parentId: string): void {
    if (this.closed) return;
    const s = this.stateOf(parentId);
    if (s.timer !== null) return;
    const wait = Math.max(0, s.lastAt + s.gapMs - this.clock());
    s.timer = setTimeout(() => {
      s.timer = null;
      s.lastAt = this.clock();
      void this.publishProgress(parentId, s);
    }, wait);
    s.timer.unref?.();
  }

  private async publishProgress(parentId: string, s: ParentState): Promise<void> {
    try {
      if (s.parent === null) {
        const parent = await this.o.store.getJob({ id: parentId });
        if (!parent || parent.childrenTotal === 0) return;
        s.parent = { tenant: parent.tenant, total: parent.childrenTotal };
      }
      // Counting reads every child (tens of ms at 100,000, on SQLite on this event loop): the
      // next count waits at least 20 times as long as this one took, so counting stays under 5 %.
      const t0 = performance.now();
      const counts = await this.o.store.countChildren({ id: parentId });
      s.gapMs = Math.max(this.every, 20 * (performance.now() - t0));
      let ended = 0;
      for (const [state, n] of Object.entries(counts)) if (isTerminal(state as JobState)) ended += n;
      const progress = aggregateProgress(s.parent.total, ended, s.running.values(), this.clock());
      this.o.bus.emit('job:progress', { id: parentId, tenant: s.parent.tenant, progress });
      if (ended >= s.parent.total && s.timer === null) this.parents.delete(parentId);
    } catch (err) {
      this.o.log.debug({ err, parentId }, 'parent progress not published');
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const u of this.unsubscribe) u();
    this.unsubscribe = [];
    for (const s of this.parents.values()) if (s.timer) clearTimeout(s.timer);
    this.parents.clear();
    await this.flush();
  }
}
