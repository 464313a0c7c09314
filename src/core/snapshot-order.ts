/**
 * The order of a job's snapshots as a stream sends them: never back in time, never the same
 * one twice. A job's snapshots reach a stream by several routes (store reads, progress pushed
 * on the bus or relayed by a channel, the answer to a cancel) and a store read can lag progress
 * already seen, because progress travels on the fast path and not as job-row updates.
 */
import type { JobSnapshot } from './job.js';

/**
 * What makes two snapshots of one job the same visible change. The progress counts as well as
 * its time: a waiting parent's progress is computed from its children when it is read, stamped
 * with the parent's own updatedAt, so successive reads differ only by what they show.
 */
export function snapshotKey(s: JobSnapshot): string {
  return `${s.status}|${s.updatedAt}|${s.progress.updatedAt}|${s.progress.percent}|${s.progress.itemsDone}|${s.cancelRequested}|${s.stalled}|${s.attempts}`;
}

/**
 * What to send after `prev` (the last snapshot sent) when `next` arrives: `next` itself; `next`
 * carrying `prev`'s progress when `next`'s is older within the same attempt (a store read that
 * lags progress already sent: the answer to a cancel, a running → cancelled end); or null when
 * `next` is an older state than `prev` or shows nothing new. A succeeded job keeps its own
 * progress (100 %), and a new attempt its own, even when older. Times are ISO-8601 texts of
 * one format, so they compare as strings.
 */
export function nextInOrder(prev: JobSnapshot | undefined, next: JobSnapshot): JobSnapshot | null {
  if (!prev) return next;
  if (next.updatedAt < prev.updatedAt) return null;
  let out = next;
  const seen = prev.progress.updatedAt;
  if (seen && next.attempts === prev.attempts && next.status !== 'succeeded' && (!next.progress.updatedAt || next.progress.updatedAt < seen)) {
    out = { ...next, progress: prev.progress };
  } else if (stepsBackWhileWaiting(prev, next)) {
    out = { ...next, progress: prev.progress };
  }
  return snapshotKey(out) === snapshotKey(prev) ? null : out;
}

/**
 * A waiting parent's progress is its children's (workflow/parents.ts): every process that runs
 * children publishes what it sees, the children ended (from the store) plus the percent of the
 * running ones it runs itself, so two processes' figures interleave. What ended never un-ends:
 * a stream keeps the highest figure while the parent waits.
 */
function stepsBackWhileWaiting(prev: JobSnapshot, next: JobSnapshot): boolean {
  return (
    prev.status === 'waiting' &&
    next.status === 'waiting' &&
    next.attempts === prev.attempts &&
    prev.progress.stage === 'children' &&
    next.progress.stage === 'children' &&
    (next.progress.percent ?? 0) < (prev.progress.percent ?? 0)
  );
}
