/** Server-Sent Events framing and the per-job change sequence used as the event id. */
import type { JobSnapshot } from '../core/job.js';

/** A job's change sequence: the ms time of its latest visible change (state, flags or progress). */
export function changeSeq(s: JobSnapshot): number {
  const updated = Date.parse(s.updatedAt);
  const progress = s.progress.updatedAt ? Date.parse(s.progress.updatedAt) : 0;
  return Math.max(updated, progress);
}

/** What distinguishes a `status` frame from a `progress` frame. */
export function statusKey(s: JobSnapshot): string {
  return `${s.status}|${s.cancelRequested}|${s.stalled}|${s.attempts}`;
}

export function sseFrame(id: number, event: string, data: unknown): string {
  // JSON.stringify never emits raw newlines, so one data line is always enough.
  return `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;
