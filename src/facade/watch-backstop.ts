/**
 * The store reads behind a process's watches (watch.ts): at each interval, ONE read of every job
 * the process watches (in chunks of WATCH_READ_CHUNK ids), whatever their number, handed to each
 * job's watchers. Events (this process's bus, a channel's relay) bring changes at once; this
 * read is what catches a change whose event was lost, and the changes of other processes when no
 * channel relays them. Before, each watch read its own job at each interval: one socket following
 * 500 jobs on PostgreSQL was 250 reads a second (issue 36).
 */
import type { Logger } from 'pino';
import type { JobRecord } from '../core/job.js';
import type { JobQueueStore } from '../store/store.js';

/** Ids per read: one statement's worth (SQLite's and PostgreSQL's parameter lists take far more). */
export const WATCH_READ_CHUNK = 1000;

/**
 * A watcher's callback: the job's record as read, or null when the watcher must read the job
 * itself (the job was not found, the read failed, or the instance is closing): its own read
 * then meets what it must report (a deleted job's last record, JobNotFoundError, the error).
 */
export type BackstopListener = (job: JobRecord | null) => void;

export class WatchBackstop {
  private readonly watchers = new Map<string, Set<BackstopListener>>();
  private timer: ReturnType<typeof setInterval> | null = null;
  private reading = false;
  private closed = false;
  /** Reads made (tests and the bench count them). */
  reads = 0;

  constructor(
    private readonly store: Pick<JobQueueStore, 'getJobs'>,
    private readonly intervalMs: number,
    private readonly logger: Logger,
  ) {}

  /** Jobs watched through this backstop. */
  get size(): number {
    return this.watchers.size;
  }

  /** Reads `id` with the others at each interval until the returned function is called. */
  add(id: string, listener: BackstopListener): () => void {
    let set = this.watchers.get(id);
    if (!set) {
      set = new Set();
      this.watchers.set(id, set);
    }
    set.add(listener);
    if (this.timer === null && !this.closed) this.timer = setInterval(() => void this.read(), this.intervalMs);
    return () => {
      const s = this.watchers.get(id);
      if (!s?.delete(listener) || s.size > 0) return;
      this.watchers.delete(id);
      if (this.watchers.size === 0 && this.timer !== null) {
        clearInterval(this.timer);
        this.timer = null;
      }
    };
  }

  /** One read of every watched job; a read still under way when the next is due is not doubled. */
  private async read(): Promise<void> {
    if (this.reading || this.closed) return;
    this.reading = true;
    try {
      const ids = [...this.watchers.keys()];
      for (let i = 0; i < ids.length; i += WATCH_READ_CHUNK) {
        const chunk = ids.slice(i, i + WATCH_READ_CHUNK);
        let found: Map<string, JobRecord>;
        try {
          this.reads++;
          found = new Map((await this.store.getJobs({ ids: chunk })).map((j) => [j.id, j]));
        } catch (err) {
          if (this.closed) return;
          // Each watcher reads for itself, and fails as it did before with its own read's error.
          this.logger.debug({ err, jobs: chunk.length }, 'watched jobs could not be read together; each watch reads its own');
          found = new Map();
        }
        for (const id of chunk) {
          const job = found.get(id) ?? null;
          for (const l of [...(this.watchers.get(id) ?? [])]) l(job);
        }
      }
    } finally {
      this.reading = false;
    }
  }

  /** The instance is closing: every watcher is woken (to end), and nothing is read again. */
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    for (const set of [...this.watchers.values()]) for (const l of [...set]) l(null);
  }
}
