/**
 * Fan-out of job snapshots to stream clients (SSE, WebSocket). A process holds ONE watch per
 * job, however many clients follow it, and one bus listener for all tenant-wide feeds.
 */
import { type JobRecord, type JobSnapshot, toSnapshot } from '../core/job.js';
import type { Longhaul } from '../longhaul.js';

export interface JobListener {
  next(snapshot: JobSnapshot): void;
  /** The job reached a terminal state (after its last `next`), or watching failed. */
  end(error?: unknown): void;
}

interface Entry {
  listeners: Set<JobListener>;
  last: JobSnapshot | undefined;
  controller: AbortController;
  /** Listeners that joined after the first snapshot and have not received one yet. */
  fresh: Set<JobListener>;
}

export class JobHub {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly lh: Longhaul) {}

  /** Number of jobs with a live subscription in this process. */
  get watchedJobs(): number {
    return this.entries.size;
  }

  /** The caller must have checked that the client may see this job. */
  subscribe(id: string, listener: JobListener): () => void {
    let entry = this.entries.get(id);
    if (!entry) {
      const created: Entry = { listeners: new Set(), last: undefined, controller: new AbortController(), fresh: new Set() };
      this.entries.set(id, created);
      // run() ends every listener itself; a throw from one of them is logged, never unhandled.
      this.run(id, created).catch((err) => this.lh.logger.error({ err, jobId: id }, 'job stream fan-out failed'));
      entry = created;
    }
    entry.listeners.add(listener);
    if (entry.last) {
      // The latest snapshot at delivery time, and only if the watch loop has not delivered a
      // newer one meanwhile (the snapshot current at subscribe time could arrive after it).
      entry.fresh.add(listener);
      const e = entry;
      queueMicrotask(() => {
        if (!e.fresh.delete(listener) || !e.listeners.has(listener) || !e.last) return;
        listener.next(e.last);
      });
    }
    return () => {
      const e = this.entries.get(id);
      e?.fresh.delete(listener);
      if (!e?.listeners.delete(listener) || e.listeners.size > 0) return;
      e.controller.abort();
      this.entries.delete(id);
    };
  }

  private async run(id: string, entry: Entry): Promise<void> {
    let failure: unknown;
    try {
      for await (const snap of this.lh.watch(id, { signal: entry.controller.signal })) {
        entry.last = snap;
        entry.fresh.clear();
        for (const l of [...entry.listeners]) l.next(snap);
      }
    } catch (err) {
      failure = err;
    }
    if (this.entries.get(id) === entry) this.entries.delete(id);
    if (!entry.controller.signal.aborted) for (const l of [...entry.listeners]) l.end(failure);
  }

  close(): void {
    for (const e of this.entries.values()) e.controller.abort();
    this.entries.clear();
  }
}

export type FeedListener = (snapshot: JobSnapshot) => void;

/** Tenant-wide feed: every change this process sees, read once and sent to every listener of the tenant. */
export class FeedHub {
  private readonly listeners = new Map<string, Set<FeedListener>>();
  private readonly pending = new Map<string, string>(); // job id → tenant
  private flushScheduled = false;
  private flushing: Promise<void> = Promise.resolve();
  private readonly offs: (() => void)[] = [];
  /** Jobs deleted by the write that ended them (retention 0), pending delivery: the record they ended with. */
  private readonly deleted = new Map<string, JobRecord>();

  constructor(private readonly lh: Longhaul) {
    const note = (id: string, tenant: string) => {
      if (!this.listeners.has(tenant) || id === '') return;
      this.pending.set(id, tenant);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        // One flush at a time: two overlapping ones could read a job on two pool connections
        // (PostgreSQL) and deliver its older snapshot after its newer one.
        setImmediate(() => {
          this.flushing = this.flushing.then(() => this.flush());
        });
      }
    };
    this.offs.push(
      lh.bus.on('job:submitted', ({ job }) => note(job.id, job.tenant)),
      // Submitted through another process (relayed by the events channel).
      lh.bus.on('job:submitted-remote', (e) => note(e.id, e.tenant)),
      lh.bus.on('job:deleted', ({ job }) => {
        if (this.listeners.has(job.tenant)) this.deleted.set(job.id, job);
      }),
      lh.bus.on('job:changed', (e) => note(e.id, e.tenant)),
      lh.bus.on('job:progress', (e) => note(e.id, e.tenant)),
    );
  }

  subscribe(tenant: string, listener: FeedListener): () => void {
    let set = this.listeners.get(tenant);
    if (!set) {
      set = new Set();
      this.listeners.set(tenant, set);
    }
    set.add(listener);
    return () => {
      const s = this.listeners.get(tenant);
      if (!s) return;
      s.delete(listener);
      if (s.size === 0) this.listeners.delete(tenant);
    };
  }

  private async flush(): Promise<void> {
    this.flushScheduled = false;
    const batch = [...this.pending];
    this.pending.clear();
    for (const [id, tenant] of batch) {
      const ended = this.deleted.get(id);
      this.deleted.delete(id);
      const set = this.listeners.get(tenant);
      if (!set) continue;
      try {
        // A job deleted as it ended (retention 0) is sent as it ended: there is no row to read.
        const snap = (await this.lh.get(id, { tenant })) ?? (ended ? toSnapshot(ended) : null);
        if (snap) for (const l of [...set]) l(snap);
      } catch {
        // the store is closing; nothing to deliver
      }
    }
  }

  close(): void {
    for (const off of this.offs) off();
    this.listeners.clear();
  }
}
