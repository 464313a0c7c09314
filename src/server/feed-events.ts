/**
 * The event name of each frame of one `/v1/events` connection: `status` when a job's status
 * (or a flag) differs from the last frame this connection sent of it, `progress` when only
 * progress moved. What it remembers per job is dropped at the job's terminal frame, and is
 * bounded besides: a process does not see every job end (separate worker processes on SQLite,
 * a relayed event lost), and a connection may stay open for months. Past the bound, the jobs
 * whose status changed longest ago are forgotten; their next frame is a `status` frame, as for
 * a job seen for the first time.
 */
import type { JobSnapshot } from '../core/job.js';
import { isTerminal } from '../core/states.js';
import { statusKey } from './sse.js';

export const FEED_JOBS_REMEMBERED = 10_000;

/**
 * One copy of each status key, shared by every connection: a key built by a template literal
 * is a chain of string pieces, about 200 bytes per entry had each connection kept its own.
 * The keys are few (state, two flags, attempt count); the table starts over if it ever fills.
 */
let interned = new Map<string, string>();
function intern(key: string): string {
  const known = interned.get(key);
  if (known !== undefined) return known;
  if (interned.size >= 4096) interned = new Map();
  interned.set(key, key);
  return key;
}

export class FeedEventNames {
  private readonly last = new Map<string, string>();

  constructor(private readonly max = FEED_JOBS_REMEMBERED) {}

  /** Jobs remembered (tests). */
  get size(): number {
    return this.last.size;
  }

  /** The event name of this snapshot's frame; call once per frame sent, in order. */
  next(snap: JobSnapshot): 'status' | 'progress' {
    const key = statusKey(snap);
    const previous = this.last.get(snap.id);
    if (isTerminal(snap.status)) {
      this.last.delete(snap.id);
      return previous === key ? 'progress' : 'status';
    }
    if (previous === key) return 'progress';
    // Re-inserted, so that insertion order is the order of the last status change.
    this.last.delete(snap.id);
    this.last.set(snap.id, intern(key));
    if (this.last.size > this.max) {
      const oldest = this.last.keys().next();
      if (!oldest.done) this.last.delete(oldest.value);
    }
    return 'status';
  }
}
