/**
 * Transitions as PostgresStore sends them: checked against core's table, then encoded as the
 * JSON that the SQL function apply_transitions reads (its format: migrations/0001_baseline.sql,
 * "Wire formats"). Shared by the store and its
 * workflow operations (workflow-ops.ts), which write their state changes the same way.
 */
import { compareIds, isUuid } from '../../core/ids.js';
import { assertTransition } from '../../core/states.js';
import type { TransitionParams } from '../store.js';

/** Refuses what core does not allow; called for every item before writing any. */
export function checkTransition(p: TransitionParams): void {
  assertTransition(p.from, p.to);
  if (p.to === 'running' && p.from !== 'running') throw new Error('a job enters running only through claimJobs');
}

/**
 * The patch mask's bits (item key `m`): which patch fields an item sets. The same numbers as the
 * table in migrations/0001_baseline.sql, "Wire formats" (test/unit/postgres-schema-agreement.test.ts
 * compares them).
 */
export const PATCH = {
  run_at: 1,
  result: 2,
  error: 4,
  finished_at: 8,
  expires_at: 16,
  reset_attempts: 32,
  refund_attempt: 64,
  clear_checkpoint: 128,
  request_cancel: 256,
  clear_cancel: 512,
  stalled: 1024,
} as const;

/**
 * Transitions as the JSON that apply_transitions reads (see "Wire formats" in
 * migrations/0001_baseline.sql). A job named more than
 * once goes into later rounds so its items apply in order; within a round items are sorted by
 * id, so concurrent batches lock rows in the same order. Items with an id that cannot exist
 * (not a UUID) are left out: they lose. Items marked in `skip` are left out too (sent as
 * `EndedArrays` instead), their ordinals kept.
 */
export function encodeTransitions(items: readonly TransitionParams[], skip?: readonly boolean[]): { json: string; rounds: number } {
  const seen = new Map<string, number>();
  const out: Array<Record<string, unknown> & { r: number; id: string }> = [];
  let rounds = 0;
  items.forEach((p, i) => {
    if (skip?.[i] || !isUuid(p.id)) return;
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
      m |= PATCH.run_at;
      e.run_at = patch.runAt;
    }
    if (patch.result !== undefined) {
      m |= PATCH.result;
      e.result = patch.result;
    }
    if (patch.error !== undefined) {
      m |= PATCH.error;
      e.error = patch.error;
    }
    if (patch.finishedAt !== undefined) {
      m |= PATCH.finished_at;
      e.finished_at = patch.finishedAt;
    }
    if (patch.expiresAt !== undefined) {
      m |= PATCH.expires_at;
      e.expires_at = patch.expiresAt;
    }
    if (patch.resetAttempts) m |= PATCH.reset_attempts;
    else if (patch.refundAttempt) m |= PATCH.refund_attempt;
    if (patch.clearCheckpoint) m |= PATCH.clear_checkpoint;
    if (patch.cancelRequest) {
      m |= PATCH.request_cancel;
      e.cancel_reason = patch.cancelRequest.reason;
    } else if (patch.cancelRequest === false) m |= PATCH.clear_cancel;
    if (patch.stalled !== undefined) {
      m |= PATCH.stalled;
      e.stalled = patch.stalled;
    }
    // Not a patch field: the attempt history's copy of the stack (apply_transitions, job_attempts).
    if (patch.stack !== undefined) e.stack = patch.stack;
    e.m = m;
    out.push(e);
  });
  out.sort((a, b) => a.r - b.r || compareIds(a.id, b.id));
  return { json: JSON.stringify(out), rounds };
}

/**
 * The jobs a worker ended as succeeded and asks to delete (retention 0), as the parallel arrays
 * that worker_cycle takes (end_succeeded in migrations/0001_baseline.sql), each as PostgreSQL array text:
 * ids, leases, ordinals, end times, expiry times, results as JSON text.
 */
export interface EndedArrays {
  count: number;
  ids: string;
  leases: string;
  ords: string;
  ats: string;
  expires: string;
  results: string;
  /** skip[i]: item i is in the arrays (encodeTransitions leaves it out). */
  skip: boolean[];
}

const NO_ENDED: EndedArrays = { count: 0, ids: '{}', leases: '{}', ords: '{}', ats: '{}', expires: '{}', results: '{}', skip: [] };

/**
 * Whether `p` is exactly the write `succeed` (core/transitions.ts) builds for `workerId`, with
 * deleteOnEnd: what end_succeeded applies. Anything else goes as JSON.
 */
function isEndedSuccess(p: TransitionParams, workerId: string): boolean {
  const patch = p.patch;
  if (!p.deleteOnEnd || p.from !== 'running' || p.to !== 'succeeded' || p.reason !== 'completed' || p.workerId !== workerId) return false;
  if (p.cancelRequested !== undefined || !Number.isSafeInteger(p.lease) || !Number.isSafeInteger(p.at) || patch === undefined) return false;
  if (patch.finishedAt !== p.at || !Number.isSafeInteger(patch.expiresAt) || patch.clearCheckpoint !== true || patch.result === undefined) return false;
  // No other patch field (the object literal `succeed` builds has exactly these four).
  return Object.keys(patch).length === 4 && isUuid(p.id);
}

/** A JSON text as an element of a PostgreSQL array literal (NULL for JSON null). */
function resultElement(result: unknown): string {
  const text = result === null ? undefined : JSON.stringify(result);
  return text === undefined ? 'NULL' : `"${text.replace(/["\\]/g, '\\$&')}"`;
}

/**
 * Picks the successes with deleteOnEnd of `workerId` out of `items` (a job named once in the
 * batch only: one named again goes as JSON, in its rounds), sorted by id like the JSON items.
 */
export function endedArrays(items: readonly TransitionParams[], workerId: string): EndedArrays {
  let picked: number[] | null = null;
  for (let i = 0; i < items.length; i++) {
    if (!isEndedSuccess(items[i] as TransitionParams, workerId)) continue;
    picked ??= [];
    picked.push(i);
  }
  if (picked === null) return NO_ENDED;
  // A job named more than once in the batch: all its items go as JSON (rounds keep their order).
  if (items.length > 1) {
    const seen = new Set<string>();
    const twice = new Set<string>();
    for (const p of items) (seen.has(p.id) ? twice : seen).add(p.id);
    if (twice.size > 0) picked = picked.filter((i) => !twice.has((items[i] as TransitionParams).id));
    if (picked.length === 0) return NO_ENDED;
  }
  picked.sort((a, b) => compareIds((items[a] as TransitionParams).id, (items[b] as TransitionParams).id));
  const skip = new Array<boolean>(items.length).fill(false);
  const id: string[] = [];
  const lease: number[] = [];
  const ord: number[] = [];
  const at: number[] = [];
  const expires: number[] = [];
  const results: string[] = [];
  for (const i of picked) {
    const p = items[i] as TransitionParams;
    const patch = p.patch as NonNullable<TransitionParams['patch']>;
    skip[i] = true;
    id.push(p.id);
    lease.push(p.lease as number);
    ord.push(i + 1);
    at.push(p.at);
    expires.push(patch.expiresAt as number);
    results.push(resultElement(patch.result));
  }
  const list = (v: readonly (string | number)[]) => `{${v.join(',')}}`;
  return { count: picked.length, ids: list(id), leases: list(lease), ords: list(ord), ats: list(at), expires: list(expires), results: list(results), skip };
}
