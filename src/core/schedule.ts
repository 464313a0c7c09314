/**
 * Schedules (cron): the pure decisions. What a schedule is, whether its cron expression and
 * timezone are valid, its next tick times, and what a tick pass does with a due schedule
 * (fire, skip missed ticks, refuse an overlapping run). No I/O: the store keeps schedules and
 * facade/schedules.ts acts on these decisions. Cron parsing and DST arithmetic are croner's.
 */
import { Cron } from 'croner';

export type CatchUp = 'skip' | 'runOnce';

/** What a user declares or creates: everything but the bookkeeping. */
export interface ScheduleSpec {
  name: string;
  /** The task type each tick submits. */
  task: string;
  /** Five fields (minute first) or six (seconds first). */
  cron: string;
  /** An IANA timezone; ticks follow its DST changes. Default UTC. */
  timezone: string;
  input: unknown;
  /** Ticks missed while no process ran: 'skip' them (default) or run once for all of them. */
  catchUp: CatchUp;
  /** False: no new run while the previous run of this schedule is not terminal. Default true. */
  overlap: boolean;
}

/** A schedule as stored. */
export interface ScheduleRecord extends ScheduleSpec {
  tenant: string;
  /** Declared in a tasks module (upserted at start; read-only over HTTP except pause, resume, trigger). */
  declared: boolean;
  paused: boolean;
  /** The next tick not yet handled (ms since epoch); null when the expression has no future tick. */
  nextRunAt: number | null;
  lastRunAt: number | null;
  lastJobId: string | null;
  createdAt: number;
  updatedAt: number;
}

/**
 * How late a tick may be handled and still count as on time (not missed). Generous next to the
 * sweep interval (1 s by default), so a busy or briefly stopped process does not lose ticks;
 * anything later was missed and follows the schedule's catchUp policy.
 */
export const ON_TIME_GRACE_MS = 60_000;

/** Missed ticks are counted up to this many (for logs and the report); more are reported as this many. */
export const MISSED_COUNT_CAP = 100;

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** A schedule spec's problem, as a sentence naming the field; null when it is valid. */
export function scheduleSpecProblem(spec: Partial<ScheduleSpec>): { field: string; message: string } | null {
  if (typeof spec.name !== 'string' || !NAME_RE.test(spec.name)) {
    return { field: 'name', message: 'name must be 1 to 128 characters: letters, digits, ".", "_", ":" or "-", starting with a letter or digit' };
  }
  if (typeof spec.task !== 'string' || spec.task.length === 0) return { field: 'task', message: 'task must be a non-empty task type' };
  if (typeof spec.cron !== 'string') return { field: 'cron', message: 'cron must be a string' };
  const cronProblem = cronExpressionProblem(spec.cron);
  if (cronProblem) return { field: 'cron', message: cronProblem };
  if (spec.timezone !== undefined && (typeof spec.timezone !== 'string' || !isTimezone(spec.timezone))) {
    return { field: 'timezone', message: `timezone ${JSON.stringify(spec.timezone)} is not an IANA timezone (e.g. "Europe/Berlin", "UTC")` };
  }
  if (spec.catchUp !== undefined && spec.catchUp !== 'skip' && spec.catchUp !== 'runOnce') {
    return { field: 'catchUp', message: 'catchUp must be "skip" or "runOnce"' };
  }
  if (spec.overlap !== undefined && typeof spec.overlap !== 'boolean') return { field: 'overlap', message: 'overlap must be a boolean' };
  return null;
}

/** Why a cron expression is refused, or null. Only five or six fields: croner also takes seven (a year), which we do not offer. */
export function cronExpressionProblem(expr: string): string | null {
  const fields = expr.trim().split(/\s+/);
  if (expr.trim().startsWith('@')) return `cron "${expr}": nicknames are not supported; write five fields, or six with seconds first`;
  if (fields.length !== 5 && fields.length !== 6) return `cron "${expr}" has ${fields.length} fields; write five (minute hour day month weekday), or six with seconds first`;
  try {
    new Cron(expr, { paused: true });
    return null;
  } catch (err) {
    return `cron "${expr}" is invalid: ${(err as Error).message}`;
  }
}

export function isTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

function cronOf(s: Pick<ScheduleSpec, 'cron' | 'timezone'>): Cron {
  return new Cron(s.cron, { timezone: s.timezone, paused: true });
}

/** The first `n` ticks strictly after `after` (ms), in ms. Empty when the expression has no more. */
export function nextTicks(s: Pick<ScheduleSpec, 'cron' | 'timezone'>, after: number, n: number): number[] {
  return cronOf(s)
    .nextRuns(n, new Date(after))
    .map((d) => d.getTime());
}

/** Ticks sampled to find a cron's shortest interval: enough to cover any pattern of the seconds and minutes fields. */
const INTERVAL_SAMPLE = 121;

/**
 * The shortest time between two consecutive ticks among the next ones after `after` (ms), or null
 * when it ticks less than twice. A sample: a pattern of every field repeats within it for the
 * expressions that fire often, which are the ones a minimum interval is about.
 */
export function minTickIntervalMs(s: Pick<ScheduleSpec, 'cron' | 'timezone'>, after: number): number | null {
  const ticks = nextTicks(s, after, INTERVAL_SAMPLE);
  let min: number | null = null;
  for (let i = 1; i < ticks.length; i++) {
    const gap = (ticks[i] as number) - (ticks[i - 1] as number);
    if (min === null || gap < min) min = gap;
  }
  return min;
}

/** The first tick strictly after `after`, or null. */
export function nextTick(s: Pick<ScheduleSpec, 'cron' | 'timezone'>, after: number): number | null {
  return nextTicks(s, after, 1)[0] ?? null;
}

export type TickDecision =
  /** Not due yet, or paused: nothing to do. */
  | { kind: 'wait' }
  /** Submit one run for tick `tickAt` (its time keys the job: one per tick), then move nextRunAt on. */
  | { kind: 'fire'; tickAt: number; nextRunAt: number | null; missed: number }
  /** Move nextRunAt on without a run: the due ticks were missed and the policy skips them, or the previous run is still going (overlap forbidden). */
  | { kind: 'skip'; nextRunAt: number | null; missed: number; reason: 'missed' | 'overlap' };

/**
 * What a tick pass does next with a schedule at `now`; the caller applies it and asks again until
 * it says 'wait' (a pass may owe several ticks). A tick is on time while it is at most
 * ON_TIME_GRACE_MS old: each on-time tick fires, in order, each keyed by its own time (a pass
 * that ran late loses none). Ticks older than that were missed (every process was down): 'skip'
 * fires nothing for them, 'runOnce' fires one run keyed by the first missed tick; either way the
 * schedule moves on to the first tick that is not missed. `previousRunOpen`: the last run is not
 * terminal, which turns a fire into a skip when the schedule forbids overlap.
 *
 * Only the missed ticks are walked one by one, and at most MISSED_COUNT_CAP of them (to count
 * them for the log), so a long downtime of a frequent schedule costs no more than a short one.
 */
export function decideTick(s: ScheduleRecord, now: number, previousRunOpen: boolean): TickDecision {
  if (s.paused || s.nextRunAt === null || s.nextRunAt > now) return { kind: 'wait' };
  const cron = cronOf(s);
  const after = (t: number): number | null => cron.nextRun(new Date(t))?.getTime() ?? null;
  const windowStart = now - ON_TIME_GRACE_MS;
  let decision: TickDecision;
  if (s.nextRunAt >= windowStart) {
    decision = { kind: 'fire', tickAt: s.nextRunAt, nextRunAt: after(s.nextRunAt), missed: 0 };
  } else {
    let missed = 0;
    for (let t: number | null = s.nextRunAt; t !== null && t < windowStart && missed < MISSED_COUNT_CAP; t = after(t)) missed++;
    // The first tick that is not missed: on time (at or before now) or still to come.
    const resumeAt = after(windowStart - 1);
    if (s.catchUp === 'skip') return { kind: 'skip', nextRunAt: resumeAt, missed, reason: 'missed' };
    decision = { kind: 'fire', tickAt: s.nextRunAt, nextRunAt: resumeAt, missed };
  }
  if (!s.overlap && previousRunOpen) return { kind: 'skip', nextRunAt: decision.nextRunAt, missed: decision.missed, reason: 'overlap' };
  return decision;
}

/** The idempotency key of the job a tick submits: one job per (schedule, tick) in the schedule's tenant. */
export function tickKey(name: string, tickAt: number): string {
  return `schedule:${name}:${new Date(tickAt).toISOString()}`;
}
