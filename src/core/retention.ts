/**
 * Retention and erasure decisions, pure: how long ended jobs are kept (per end state, with
 * per-task overrides), which store-level rules a sweeper pass runs, and when an idempotency key
 * may name a new job. The stores and the sweeper only carry these out (docs/operations.md).
 */
import { parseDuration } from './duration.js';
import type { JobState } from './states.js';

/** The end states a retention period applies to; 'succeeded' also covers jobs whose result expired. */
export const RETENTION_STATES = ['succeeded', 'failed', 'cancelled'] as const;
export type RetentionState = (typeof RETENTION_STATES)[number];

/** How long ended jobs are kept, in ms per end state; null (or absent) keeps them forever, 0 deletes them on completion. */
export type RetentionPolicy = Partial<Record<RetentionState, number | null>>;

/** As written in options: a duration text ('7d', '12h', '0') or ms; null keeps forever. */
export type RetentionInput = Partial<Record<RetentionState, string | number | null>>;

/** The stored states each retention state covers: a succeeded job whose result expired is in 'expired'. */
export const STORED_STATES: Record<RetentionState, readonly JobState[]> = {
  succeeded: ['succeeded', 'expired'],
  failed: ['failed'],
  cancelled: ['cancelled'],
};

function periodMs(value: string | number | null | undefined, where: string): number | null | undefined {
  if (value === undefined || value === null) return value;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new Error(`${where} must be a duration ≥ 0 (got ${value})`);
    return Math.round(value);
  }
  const text = value.trim().toLowerCase();
  if (text === 'forever' || text === 'never' || text === '') return null;
  try {
    return parseDuration(text);
  } catch {
    throw new Error(`${where} must be a duration such as 7d, 12h or 0, or "forever" (got "${value}")`);
  }
}

/** A policy from options; unknown states are refused by name. `where` names the setting for messages. */
export function parseRetention(input: RetentionInput | undefined, where = 'retention'): RetentionPolicy {
  const out: RetentionPolicy = {};
  if (input === undefined) return out;
  if (input === null || typeof input !== 'object' || Array.isArray(input)) throw new Error(`${where} must be an object such as { succeeded: '7d' }`);
  for (const [key, value] of Object.entries(input)) {
    if (!(RETENTION_STATES as readonly string[]).includes(key)) throw new Error(`${where}.${key} is not an end state (use ${RETENTION_STATES.join(', ')})`);
    const ms = periodMs(value as string | number | null | undefined, `${where}.${key}`);
    if (ms !== undefined) out[key as RetentionState] = ms;
  }
  return out;
}

/** The policy from `LONGHAUL_RETENTION_SUCCEEDED`, `_FAILED`, `_CANCELLED` (unset: keep forever). */
export function retentionFromEnv(env: Record<string, string | undefined>): RetentionPolicy {
  const out: RetentionPolicy = {};
  for (const state of RETENTION_STATES) {
    const name = `LONGHAUL_RETENTION_${state.toUpperCase()}`;
    const raw = env[name];
    if (raw === undefined || raw.trim() === '') continue;
    const ms = periodMs(raw, name);
    if (ms !== undefined) out[state] = ms;
  }
  return out;
}

/**
 * Whether a job of a task with `own` retention (its override, if any) that ends in `state` is
 * deleted on completion (a period of 0), under the instance's `global` policy.
 */
export function deletedOnEnd(global: RetentionPolicy, own: RetentionPolicy | undefined, state: JobState): boolean {
  if (state !== 'succeeded' && state !== 'failed' && state !== 'cancelled') return false;
  const period = own !== undefined && state in own ? own[state] : global[state];
  return period === 0;
}

/** One deletion query of a sweeper pass: jobs in `states` that ended before `finishedBefore`, of `types` only or of any type but `excludeTypes`. */
export interface RetentionRule {
  states: readonly JobState[];
  finishedBefore: number;
  types?: readonly string[];
  excludeTypes?: readonly string[];
}

/**
 * The rules a pass at `now` runs. Per end state: one rule per task whose own period differs from
 * the global one (that task's jobs only), and one global rule for every other task. A period of
 * null keeps forever: no rule. `0` gives `finishedBefore = now + 1` (everything ended so far).
 */
export function retentionRules(global: RetentionPolicy, perTask: ReadonlyMap<string, RetentionPolicy>, now: number): RetentionRule[] {
  const rules: RetentionRule[] = [];
  const cutoff = (ms: number) => (ms === 0 ? now + 1 : now - ms);
  for (const state of RETENTION_STATES) {
    const base = global[state] ?? null;
    const overridden: string[] = [];
    for (const [type, policy] of perTask) {
      if (!(state in policy)) continue;
      const own = policy[state] ?? null;
      if (own === base) continue;
      overridden.push(type);
      if (own !== null) rules.push({ states: STORED_STATES[state], finishedBefore: cutoff(own), types: [type] });
    }
    if (base !== null) rules.push({ states: STORED_STATES[state], finishedBefore: cutoff(base), ...(overridden.length > 0 ? { excludeTypes: overridden } : {}) });
  }
  return rules;
}

/**
 * Whether an idempotency key already held by `existing` may name a new job submitted at `now`:
 * when that job failed or was cancelled (the design's contract: a retry of a failed request is a
 * new request), or when the key's lifetime (`ttlMs` from the job's creation) is over.
 */
export function keyReusable(existing: { state: JobState; createdAt: number }, now: number, ttlMs: number | undefined): boolean {
  if (existing.state === 'failed' || existing.state === 'cancelled') return true;
  return ttlMs !== undefined && existing.createdAt + ttlMs <= now;
}
