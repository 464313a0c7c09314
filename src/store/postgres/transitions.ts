/**
 * Transitions as PostgresStore sends them: checked against core's table, then encoded as the
 * JSON that the SQL function apply_transitions reads (schema.ts). Shared by the store and its
 * workflow operations (workflow-ops.ts), which write their state changes the same way.
 */
import { isUuid } from '../../core/ids.js';
import { assertTransition } from '../../core/states.js';
import type { TransitionParams } from '../store.js';

/** Refuses what core does not allow; called for every item before writing any. */
export function checkTransition(p: TransitionParams): void {
  assertTransition(p.from, p.to);
  if (p.to === 'running' && p.from !== 'running') throw new Error('a job enters running only through claimJobs');
}

/**
 * Transitions as the JSON that apply_transitions reads (see schema.ts). A job named more than
 * once goes into later rounds so its items apply in order; within a round items are sorted by
 * id, so concurrent batches lock rows in the same order. Items with an id that cannot exist
 * (not a UUID) are left out: they lose.
 */
export function encodeTransitions(items: readonly TransitionParams[]): { json: string; rounds: number } {
  const seen = new Map<string, number>();
  const out: Array<Record<string, unknown> & { r: number; id: string }> = [];
  let rounds = 0;
  items.forEach((p, i) => {
    if (!isUuid(p.id)) return;
    const r = (seen.get(p.id) ?? 0) + 1;
    seen.set(p.id, r);
    rounds = Math.max(rounds, r);
    const patch = p.patch ?? {};
    const e: Record<string, unknown> & { r: number; id: string } = {
      o: i + 1,
      r,
      id: p.id,
      f: p.from,
      t: p.to,
      why: p.reason,
      w: p.workerId ?? null,
      at: p.at,
    };
    if (p.lease !== undefined) e.l = p.lease;
    // Retention 0: apply_transitions deletes the job when it may, and answers the ordinal negated.
    if (p.deleteOnEnd) e.d = true;
    if (p.cancelRequested !== undefined) e.q = p.cancelRequested;
    let m = 0;
    if (patch.runAt !== undefined) {
      m |= 1;
      e.run_at = patch.runAt;
    }
    if (patch.result !== undefined) {
      m |= 2;
      e.result = patch.result;
    }
    if (patch.error !== undefined) {
      m |= 4;
      e.error = patch.error;
    }
    if (patch.finishedAt !== undefined) {
      m |= 8;
      e.finished_at = patch.finishedAt;
    }
    if (patch.expiresAt !== undefined) {
      m |= 16;
      e.expires_at = patch.expiresAt;
    }
    if (patch.resetAttempts) m |= 32;
    else if (patch.refundAttempt) m |= 64;
    if (patch.clearCheckpoint) m |= 128;
    if (patch.cancelRequest) {
      m |= 256;
      e.cancel_reason = patch.cancelRequest.reason;
    } else if (patch.cancelRequest === false) m |= 512;
    if (patch.stalled !== undefined) {
      m |= 1024;
      e.stalled = patch.stalled;
    }
    e.m = m;
    out.push(e);
  });
  out.sort((a, b) => a.r - b.r || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return { json: JSON.stringify(out), rounds };
}
