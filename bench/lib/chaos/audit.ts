/**
 * The chaos run's judgements, pure functions over what the run read back: the jobs' snapshots
 * and transition logs (HTTP API), the effects ledger (test/fixtures/effects.ts) and what the
 * driver did (kills, signals sent). Each says in a sentence what is wrong, or nothing (null,
 * an empty list) when the invariant holds.
 *
 * Duplicate effects: an effect unit (a plain job's effect, a stage, a saga step or
 * compensation, see UNITS in test/fixtures/chaos-tasks.ts) recorded more than once for one job
 * is allowed under at-least-once only when the run that recorded the earlier one lost its job
 * before the unit's completion was recorded: that run (found by its claim in the transition log:
 * the claiming worker's id carries its pid) ended by the reaper (`heartbeat lost`), or failed
 * because the database could not be reached (the unit's checkpoint write gave up), and no
 * later unit of the job began in it (a `start:` row or an effect of a later unit proves the
 * unit's completion had been saved: a unit begins only once the one before it was saved).
 * Anything else (a unit run twice in one run, or again after a run that ended normally: an
 * outcome, a suspension, a later unit) is a violation.
 */
import type { EffectRow } from '../../../test/fixtures/effects.js';
import { SAGA_STEPS, UNITS } from '../../../test/fixtures/chaos-tasks.js';

export interface Transition {
  from: string | null;
  to: string;
  at: string;
  reason: string;
  attempt: number;
  workerId: string | null;
}

export interface Snap {
  id: string;
  type: string;
  status: string;
  input: Record<string, unknown>;
  result: unknown;
  error: (Record<string, unknown> & { code?: string; message?: string; compensated?: boolean }) | null;
  attempts: number;
  parentId: string | null;
  children: { total: number; byState: Record<string, number> } | null;
  startedAt: string | null;
  finishedAt: string | null;
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);
export const OPEN_STATES = 'pending,queued,running,retrying,waiting';

export interface Duplicate {
  jobId: string;
  type: string;
  unit: string;
  attempt: number;
  explained: boolean;
  /** The category when explained, what is wrong otherwise. */
  why: string;
}

/** What ended runs, by kind (the explanation of an explained duplicate). */
export const KILLED = 'worker killed (kill -9) after the effect, before its checkpoint or outcome was written';
export const LEASE_LOST = 'lease lost while the worker lived (heartbeats not written in time: database outage or a stalled process), reaped before the checkpoint';
export const ZOMBIE = 'the handler went on after its lease was taken (worker alive; its writes fenced), the effect itself is not fenced';
export const SAVE_FAILED = "the unit's checkpoint could not be written (database unreachable past the write's retries): the attempt failed after the effect, and the unit ran again";

/** An attempt's error that says the database could not be reached (an outage), not a refusal. */
const OUTAGE_ERROR = /ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|terminat|shutting down|starting up|Connection terminated|connection (lost|closed|ended)|the database system|too many clients|SQLITE_BUSY|database is locked|57P0[1-3]|08\d\d\d|53300/i;

const ms = (iso: string) => Date.parse(iso);

/**
 * The index in `log` of the claim that started the run which recorded `e`: the last claim
 * (`→ running` from another state) by a worker of the effect's pid at or before its time,
 * preferring one of its attempt. -1 when none.
 */
export function runOf(e: Pick<EffectRow, 'pid' | 'attempt' | 'at'>, log: readonly Transition[]): number {
  let best = -1;
  let bestAny = -1;
  for (let i = 0; i < log.length; i++) {
    const t = log[i] as Transition;
    if (t.to !== 'running' || t.from === 'running') continue;
    if (!t.workerId?.includes(`:${e.pid}:`)) continue;
    if (ms(t.at) > e.at + 50) continue;
    bestAny = i;
    if (t.attempt === e.attempt) best = i;
  }
  return best >= 0 ? best : bestAny;
}

/** The transition that ended the run claimed at `claim` (the first one leaving `running` after it), if any. */
export function runEnd(claim: number, log: readonly Transition[]): Transition | null {
  for (let i = claim + 1; i < log.length; i++) {
    const t = log[i] as Transition;
    if (t.from === 'running' && t.to !== 'running') return t;
  }
  return null;
}

/** A ledger row's place in its task's order: an effect's unit, or the unit a `start:` row begins; -1 for others. */
export function unitIndex(type: string, kind: string): number {
  return (UNITS[type] ?? []).indexOf(kind.startsWith('start:') ? kind.slice(6) : kind);
}

/**
 * Judges every repeat of an effect unit of one job (see the header). `attemptErrors` (attempt →
 * its error, `code: message`, from GET /v1/jobs/{id}/attempts) explains a run that ended with a
 * failure after the effect: allowed when that failure is the database being unreachable (the
 * unit's checkpoint could not be written), a violation otherwise.
 */
export function judgeDuplicates(
  job: { id: string; type: string },
  effects: readonly EffectRow[],
  log: readonly Transition[],
  kills: ReadonlyMap<number, number>,
  attemptErrors: ReadonlyMap<number, string> = new Map(),
): Duplicate[] {
  const order = UNITS[job.type] ?? [];
  const byUnit = new Map<string, EffectRow[]>();
  for (const e of effects) {
    if (!order.includes(e.kind)) continue;
    const list = byUnit.get(e.kind) ?? [];
    list.push(e);
    byUnit.set(e.kind, list);
  }
  const out: Duplicate[] = [];
  for (const [unit, list] of byUnit) {
    list.sort((a, b) => a.seq - b.seq);
    for (let i = 0; i < list.length - 1; i++) {
      const e = list[i] as EffectRow;
      const next = list[i + 1] as EffectRow;
      const verdict = (explained: boolean, why: string) => out.push({ jobId: job.id, type: job.type, unit, attempt: e.attempt, explained, why });
      const run = runOf(e, log);
      if (run < 0) {
        verdict(false, `no claim by pid ${e.pid} before the effect in the transition log`);
        continue;
      }
      if (runOf(next, log) === run) {
        verdict(false, `ran twice in one run (attempt ${e.attempt}, pid ${e.pid})`);
        continue;
      }
      const end = runEnd(run, log);
      if (!end) {
        verdict(false, 'the run that recorded it never ended');
        continue;
      }
      const reaped = end.reason.includes('heartbeat lost');
      const failed = !reaped && (end.to === 'retrying' || end.to === 'failed');
      const error = attemptErrors.get(end.attempt) ?? '';
      if (!reaped && !(failed && OUTAGE_ERROR.test(error))) {
        verdict(false, `ran again after a run that ended ${end.from} → ${end.to} (${end.reason}${error ? `: ${error.slice(0, 200)}` : ''}): its completion had been recorded`);
        continue;
      }
      const later = effects.find((x) => x.seq > e.seq && unitIndex(job.type, x.kind) > order.indexOf(unit) && runOf(x, log) === run);
      if (later) {
        verdict(false, `ran again although a later unit began after it in the same run (${later.kind}): its completion had been recorded`);
        continue;
      }
      if (failed) {
        verdict(true, SAVE_FAILED);
        continue;
      }
      const killedAt = kills.get(e.pid);
      if (killedAt !== undefined && killedAt >= e.at && killedAt <= ms(end.at)) verdict(true, KILLED);
      else if (e.at > ms(end.at)) verdict(true, ZOMBIE);
      else verdict(true, LEASE_LOST);
    }
  }
  return out;
}

/** Whether each forward unit of a succeeded job has its effect. */
export function missingEffects(snap: Snap, effects: readonly EffectRow[]): string | null {
  if (snap.status !== 'succeeded') return null;
  const forward = (UNITS[snap.type] ?? []).filter((u) => !u.startsWith('comp:'));
  const missing = forward.filter((u) => !effects.some((e) => e.kind === u));
  return missing.length === 0 ? null : `succeeded without the effect of ${missing.join(', ')}`;
}

export interface SagaVerdict {
  /** What is wrong with its compensation, or null. */
  problem: string | null;
  /**
   * Steps whose effect ran but whose completion was never recorded, and which were not
   * compensated: the worker was killed between the effect and the checkpoint on the last
   * attempt (documented: the step the worker died in is not compensated, steps must be
   * idempotent). Not a violation; counted.
   */
  partial: string[];
}

/**
 * A saga's compensations must run in reverse order for exactly its completed steps. A step's
 * completion is proven when a later step began (its `start:` row or its effect: a step begins
 * only once the one before was saved) or when the saga succeeded; a step whose effect was the
 * last thing of a killed run may or may not have been saved. So: every proven step is
 * compensated; no step is compensated without its effect, nor the step the log says was lost
 * with its worker on the last attempt; compensations run in strictly reverse step order
 * (consecutive repeats, a kill during a compensation, count once).
 */
export function judgeSaga(snap: Snap, effects: readonly EffectRow[], log: readonly Transition[]): SagaVerdict {
  const none: SagaVerdict = { problem: null, partial: [] };
  if (snap.status !== 'succeeded' && snap.status !== 'failed') return none;
  const sorted = [...effects].sort((a, b) => a.seq - b.seq);
  const stepIndex = (s: string) => SAGA_STEPS.indexOf(s as (typeof SAGA_STEPS)[number]);
  const began = new Set(sorted.filter((e) => /^(start:)?step:/.test(e.kind)).map((e) => e.kind.replace(/^(start:)?step:/, '')));
  const effected: string[] = SAGA_STEPS.filter((s) => sorted.some((e) => e.kind === `step:${s}`));
  const proven: string[] = SAGA_STEPS.filter((s) => snap.status === 'succeeded' || [...began].some((b) => stepIndex(b) > stepIndex(s)));
  const lost = log.map((t) => /^step (\S+) lost with its worker/.exec(t.reason)?.[1]).find((x) => x !== undefined);
  const comps: string[] = [];
  for (const e of sorted) {
    if (!e.kind.startsWith('comp:')) continue;
    const step = e.kind.slice(5);
    if (comps.at(-1) !== step) comps.push(step);
  }
  const partial = effected.filter((s) => !proven.includes(s) && !comps.includes(s));
  const verdict = (problem: string | null): SagaVerdict => ({ problem, partial: snap.status === 'failed' ? partial : [] });
  const last = log.at(-1);
  const ended = `ended ${last?.from} → ${last?.to}: ${last?.reason}`;
  if (snap.status === 'succeeded') return verdict(comps.length > 0 ? `succeeded but compensated ${comps.join(', ')}` : null);
  const missing = proven.filter((s) => !comps.includes(s));
  if (snap.error?.compensated !== true) {
    return verdict(missing.length > 0 ? `failed without compensating its completed steps ${missing.join(', ')} (compensations run: ${comps.join(', ') || 'none'}; ${ended})` : null);
  }
  const wrong: string[] = [];
  if (missing.length > 0) wrong.push(`completed steps not compensated: ${missing.join(', ')}`);
  const unrun = comps.filter((s) => !effected.includes(s));
  if (unrun.length > 0) wrong.push(`compensated steps that never ran: ${unrun.join(', ')}`);
  if (lost && comps.includes(lost)) wrong.push(`compensated ${lost}, the step lost with its worker`);
  if (comps.some((c, i) => i > 0 && stepIndex(c) >= stepIndex(comps[i - 1] as string))) wrong.push(`compensations out of reverse order: ${comps.join(', ')}`);
  return verdict(wrong.length > 0 ? `${wrong.join('; ')} (completed: ${proven.join(', ') || 'none'}; ${ended})` : null);
}

/** A parent's counts against its children: how many, and in which end states, by its snapshot and its result. */
export function judgeParent(snap: Snap, children: readonly Snap[]): string | null {
  const n = snap.input.n as number;
  const policy = snap.input.policy as string;
  const tally: Record<string, number> = {};
  for (const c of children) tally[c.status] = (tally[c.status] ?? 0) + 1;
  const fmt = (t: Record<string, number>) =>
    Object.entries(t)
      .filter(([, v]) => v > 0)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
  if (children.length === 0 && snap.status === 'failed' && snap.error?.code !== 'CHILD_FAILED') return null; // failed before it spawned: an unexpected end, judged there
  if (children.length !== n) return `${children.length} children found, ${n} spawned`;
  if (!snap.children) return 'no children counts in its snapshot';
  if (snap.children.total !== n) return `its snapshot counts ${snap.children.total} children of ${n}`;
  if (fmt(snap.children.byState) !== fmt(tally)) return `its snapshot counts ${fmt(snap.children.byState)}, its children are ${fmt(tally)}`;
  if (policy === 'collect' && snap.status === 'succeeded') {
    const s = (snap.result as { summary?: { total: number; succeeded: number; failed: number; cancelled: number } } | null)?.summary;
    const want = { total: n, succeeded: tally.succeeded ?? 0, failed: tally.failed ?? 0, cancelled: tally.cancelled ?? 0 };
    if (!s || s.total !== want.total || s.succeeded !== want.succeeded || s.failed !== want.failed || s.cancelled !== want.cancelled) {
      return `its result counts ${JSON.stringify(s && { total: s.total, succeeded: s.succeeded, failed: s.failed, cancelled: s.cancelled })}, its children are ${JSON.stringify(want)}`;
    }
  }
  if (policy === 'fail-fast' && snap.status === 'failed' && (tally.failed ?? 0) + (tally.cancelled ?? 0) === 0) return 'failed fail-fast with no child failed or cancelled';
  return null;
}

/**
 * Why a job ended otherwise than planned, or null. Plain jobs, pipelines, sleeps, signal waits
 * and collect parents succeed; a fail-fast parent fails with CHILD_FAILED; a saga with a
 * failing step fails compensated; a child fails when planned to, is cancelled only as a
 * fail-fast sibling, and succeeds otherwise.
 */
export function unexpectedEnd(snap: Snap, parentPolicy?: string): string | null {
  if (!TERMINAL.has(snap.status)) return null;
  let expected: string[];
  switch (snap.type) {
    case 'chaos.parent':
      expected = [snap.input.policy === 'fail-fast' ? 'failed' : 'succeeded'];
      break;
    case 'chaos.saga':
      expected = [snap.input.failAt ? 'failed' : 'succeeded'];
      break;
    case 'chaos.child':
      expected = snap.input.fail ? ['failed'] : parentPolicy === 'fail-fast' ? ['succeeded', 'cancelled'] : ['succeeded'];
      break;
    default:
      expected = ['succeeded'];
  }
  if (expected.includes(snap.status)) return null;
  return `${snap.status}${snap.error?.code ? ` (${snap.error.code})` : ''}`;
}

/** A durable sleep must not wake before its time: its `after` effect at least `sleepMs` after its last `before`. */
export function judgeSleep(snap: Snap, effects: readonly EffectRow[]): string | null {
  if (snap.status !== 'succeeded') return null;
  const before = effects.filter((e) => e.kind === 'before').at(-1);
  const after = effects.find((e) => e.kind === 'after');
  if (!before || !after) return null; // missing effects are judged elsewhere
  const slept = after.at - before.at;
  const want = snap.input.sleepMs as number;
  return slept + 5 < want ? `woke after ${slept} ms, slept for ${want} ms` : null;
}

export interface SentSignal {
  jobId: string;
  name: string;
  nonce: string;
  /**
   * 202 (resumed or kept); 409 JOB_ENDED on a retry after a try whose answer was lost; 409 at
   * the first try (the job had ended: not a lost signal); or never accepted (the API did not
   * answer for minutes: reported apart).
   */
  outcome: 'accepted' | 'ended-after-retry' | 'refused' | 'unsent';
  tries: number;
}

/** Signals the API accepted whose payload the job never received. */
export function lostSignals(snap: Snap | undefined, sent: readonly SentSignal[]): string[] {
  const lost: string[] = [];
  for (const s of sent) {
    if (s.outcome === 'refused' || s.outcome === 'unsent') continue;
    const got = (snap?.result as Record<string, { nonce?: string }> | null | undefined)?.[s.name]?.nonce;
    if (snap?.status === 'succeeded' && got === s.nonce) continue;
    lost.push(`${s.name} (${s.outcome} after ${s.tries} tries): job ${snap ? snap.status : 'absent'}${got ? `, got ${got}` : ''}`);
  }
  return lost;
}
