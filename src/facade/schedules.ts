/**
 * Schedules (cron): create, read, change, pause, resume, delete and trigger them, and the tick
 * pass that submits their runs. The decisions are core/schedule.ts's; the rows are the store's
 * ScheduleStore part.
 *
 * Exactly once per tick, however many processes tick: every process's sweeper calls `tick()`
 * each pass (PostgreSQL elects one sweeper, but ticking is cheap and safe anywhere, and a tick
 * must not wait for the election after a failover). A tick's job carries the idempotency key
 * (schedule name, tick time) in the schedule's tenant, so concurrent submissions of one tick find
 * one job; the schedule then moves on by a compare-and-swap on nextRunAt. A process that dies
 * between the two leaves the schedule due: the next pass submits the same key (the existing job
 * comes back) and moves it on.
 */
import type { Logger } from 'pino';
import {
  IdempotencyConflictError,
  InvalidScheduleError,
  LonghaulError,
  QueueFullError,
  ScheduleDeclaredError,
  ScheduleExistsError,
  ScheduleNotFoundError,
  ScheduleQuotaExceededError,
  ScheduleTooFrequentError,
  TenantQuotaExceededError,
  UnknownTaskError,
} from '../core/errors.js';
import type { ScheduleInput, SchedulePatch, ScheduleView } from '../core/api-types.js';
import type { JobSnapshot } from '../core/job.js';
import { decideTick, minTickIntervalMs, nextTick, nextTicks, type ScheduleRecord, type ScheduleSpec, scheduleSpecProblem, tickKey } from '../core/schedule.js';
import { isTerminal } from '../core/states.js';
import { hasUnstorable } from '../core/storable.js';
import type { JobQueueStore, ScheduleStore } from '../store/store.js';
import type { SubmitOptions } from './submission.js';

/** The tenant of requests without keys, and of declared schedules unless they name another. */
const DEFAULT_TENANT = 'default';
/** How many schedules one tick pass handles at most (the rest the next pass). */
const TICK_BATCH = 100;
/** Decisions applied to one schedule in one pass at most (more than the on-time window can hold). */
const MAX_ROUNDS = 200;
/** How many next times a schedule's view shows. */
export const NEXT_RUNS_SHOWN = 5;
/** The most schedules a list returns. */
export const MAX_SCHEDULES_LISTED = 1000;
/** A schedule whose ticks a quota keeps refusing is logged at most this often (it stays due, and is tried every pass). */
export const REFUSED_TICK_LOG_MS = 60_000;

export type { ScheduleInput, SchedulePatch, ScheduleView } from '../core/api-types.js';

export interface TickReport {
  /** Runs submitted (or found already submitted by another process). */
  fired: number;
  /** Due schedules moved on without a run (missed ticks skipped, overlap refused, or the run refused by its task). */
  skipped: number;
  /** Due schedules another process moved on first. */
  lost: number;
}

export interface SchedulesContext {
  readonly store: ScheduleStore & Pick<JobQueueStore, 'getJob'>;
  /** The task types this instance knows: a schedule's task must be one. */
  readonly tasks: ReadonlyMap<string, unknown>;
  /** Checks a run's task and input as a submission would (UnknownTaskError, InputValidationError, UnstorableValueError), writing nothing. */
  readonly check: (type: string, input: unknown) => Promise<void>;
  /** Submits a run (idempotency honoured). */
  readonly enqueue: (type: string, input: unknown, options: SubmitOptions) => Promise<{ job: JobSnapshot; replayed: boolean }>;
  readonly logger: Logger;
  readonly clock?: () => number;
  /** The most schedules a tenant may have (maxSchedules of the tenant quotas); creating one more is refused. None: unlimited. */
  readonly maxSchedules?: (tenant: string) => number;
  /** The shortest time between two ticks a created or changed schedule may have (LONGHAUL_SCHEDULE_MIN_INTERVAL); 0: any. */
  readonly minIntervalMs?: number;
  /** Told of each schedule refused at its quota or the minimum interval (metrics). */
  readonly refused?: (quota: 'maxSchedules' | 'minInterval') => void;
}

export interface ScheduleScope {
  /** The caller's tenant (default 'default'). */
  tenant?: string;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** A spec with its defaults, checked; throws InvalidScheduleError naming the field. */
export function normalizeSpec(input: unknown): ScheduleSpec {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new InvalidScheduleError([{ path: '', message: 'a schedule must be an object' }]);
  const raw = input as Partial<ScheduleInput>;
  const spec = {
    name: raw.name,
    task: raw.task,
    cron: typeof raw.cron === 'string' ? raw.cron.trim() : raw.cron,
    timezone: raw.timezone ?? 'UTC',
    input: raw.input ?? null,
    catchUp: raw.catchUp ?? 'skip',
    overlap: raw.overlap ?? true,
  } as Partial<ScheduleSpec>;
  const problem = scheduleSpecProblem(spec);
  if (problem) throw new InvalidScheduleError([{ path: problem.field, message: problem.message }]);
  return spec as ScheduleSpec;
}

export class Schedules {
  private readonly clock: () => number;
  /** Creations per tenant, one at a time in this process, so that the count check holds under concurrent requests. */
  private readonly creating = new Map<string, Promise<unknown>>();
  /** Schedules whose tick a quota refused: when that was last logged, and how many refusals since. */
  private readonly refusedTicks = new Map<string, { loggedAt: number; since: number }>();

  constructor(private readonly ctx: SchedulesContext) {
    this.clock = ctx.clock ?? Date.now;
  }

  private tenantOf(scope: ScheduleScope): string {
    return scope.tenant ?? DEFAULT_TENANT;
  }

  /** The task must be known here and the input must pass its schema: a schedule whose every run would be refused is refused now. */
  private async checkRun(spec: ScheduleSpec): Promise<void> {
    if (!this.ctx.tasks.has(spec.task)) throw new UnknownTaskError(spec.task);
    await this.ctx.check(spec.task, spec.input);
  }

  /** Where a schedule is kept: a name or tenant no store can hold (U+0000, a lone surrogate) names none, and PostgreSQL would refuse it in a query. */
  private keyOf(name: string, scope: ScheduleScope): { tenant: string; name: string } {
    const tenant = this.tenantOf(scope);
    if (typeof name !== 'string' || hasUnstorable(name) || typeof tenant !== 'string' || hasUnstorable(tenant)) throw new ScheduleNotFoundError(String(name));
    return { tenant, name };
  }

  private async mustGet(name: string, scope: ScheduleScope): Promise<ScheduleRecord> {
    const found = await this.ctx.store.getSchedule(this.keyOf(name, scope));
    if (!found) throw new ScheduleNotFoundError(name);
    return found;
  }

  /** The view of a record: its next times and the state of its last run. */
  async view(s: ScheduleRecord): Promise<ScheduleView> {
    const last = s.lastJobId ? await this.ctx.store.getJob({ id: s.lastJobId, tenant: s.tenant }) : null;
    return {
      name: s.name,
      task: s.task,
      cron: s.cron,
      timezone: s.timezone,
      input: s.input,
      catchUp: s.catchUp,
      overlap: s.overlap,
      paused: s.paused,
      declared: s.declared,
      // From the pending tick on (a tick due but not yet handled is still next); nothing while paused.
      nextRuns: s.paused || s.nextRunAt === null ? [] : nextTicks(s, s.nextRunAt - 1, NEXT_RUNS_SHOWN).map(iso),
      lastRun: s.lastRunAt !== null && s.lastJobId !== null ? { at: iso(s.lastRunAt), jobId: s.lastJobId, status: last?.state ?? null } : null,
      createdAt: iso(s.createdAt),
      updatedAt: iso(s.updatedAt),
    };
  }

  /** A cron that fires more often than the minimum interval is refused (created or changed over the API; declared ones are the operator's). */
  private checkInterval(spec: ScheduleSpec): void {
    const min = this.ctx.minIntervalMs ?? 0;
    if (min <= 0) return;
    const interval = minTickIntervalMs(spec, this.clock());
    if (interval !== null && interval < min) {
      this.ctx.refused?.('minInterval');
      throw new ScheduleTooFrequentError(spec.cron, interval, min);
    }
  }

  /** Runs `fn` after the tenant's creations under way in this process. */
  private async oneAtATime<T>(tenant: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.creating.get(tenant) ?? Promise.resolve();
    const run = previous.then(fn, fn);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.creating.set(tenant, settled);
    try {
      return await run;
    } finally {
      if (this.creating.get(tenant) === settled) this.creating.delete(tenant);
    }
  }

  async create(input: ScheduleInput, scope: ScheduleScope = {}): Promise<ScheduleView> {
    const spec = normalizeSpec(input);
    this.checkInterval(spec);
    await this.checkRun(spec);
    const tenant = this.tenantOf(scope);
    const max = this.ctx.maxSchedules?.(tenant);
    if (max === undefined) return this.insertNew(spec, input, tenant);
    return this.oneAtATime(tenant, async () => {
      const existing = await this.ctx.store.listSchedules({ tenant, limit: max + 1 });
      // A name the tenant already has is SCHEDULE_EXISTS (409), whatever the count.
      if (existing.length >= max && !existing.some((s) => s.name === spec.name)) {
        this.ctx.refused?.('maxSchedules');
        throw new ScheduleQuotaExceededError(tenant, max);
      }
      return this.insertNew(spec, input, tenant);
    });
  }

  private async insertNew(spec: ScheduleSpec, input: ScheduleInput, tenant: string): Promise<ScheduleView> {
    if (input.paused !== undefined && typeof input.paused !== 'boolean') throw new InvalidScheduleError([{ path: 'paused', message: 'paused must be a boolean' }]);
    const now = this.clock();
    const record: ScheduleRecord = {
      ...spec,
      tenant,
      declared: false,
      paused: input.paused ?? false,
      nextRunAt: nextTick(spec, now),
      lastRunAt: null,
      lastJobId: null,
      createdAt: now,
      updatedAt: now,
    };
    if (!(await this.ctx.store.insertSchedule({ schedule: record }))) throw new ScheduleExistsError(spec.name);
    return this.view(record);
  }

  async list(scope: ScheduleScope = {}): Promise<ScheduleView[]> {
    const rows = await this.ctx.store.listSchedules({ tenant: this.tenantOf(scope), limit: MAX_SCHEDULES_LISTED });
    return Promise.all(rows.map((r) => this.view(r)));
  }

  async get(name: string, scope: ScheduleScope = {}): Promise<ScheduleView> {
    return this.view(await this.mustGet(name, scope));
  }

  /** Changes an API-created schedule; a new cron or timezone moves the next tick. Declared ones are refused. */
  async update(name: string, patch: SchedulePatch, scope: ScheduleScope = {}): Promise<ScheduleView> {
    if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) throw new InvalidScheduleError([{ path: '', message: 'the change must be an object' }]);
    const current = await this.mustGet(name, scope);
    if (current.declared) throw new ScheduleDeclaredError(name);
    const spec = normalizeSpec({ ...current, ...patch, name });
    const timing = spec.cron !== current.cron || spec.timezone !== current.timezone;
    if (timing) this.checkInterval(spec);
    await this.checkRun(spec);
    const now = this.clock();
    const record: ScheduleRecord = { ...current, ...spec, nextRunAt: timing ? nextTick(spec, now) : current.nextRunAt, updatedAt: now };
    await this.ctx.store.replaceSchedule({ schedule: record });
    return this.view(record);
  }

  async pause(name: string, scope: ScheduleScope = {}): Promise<ScheduleView> {
    const s = await this.ctx.store.setSchedulePaused({ ...this.keyOf(name, scope), paused: true, now: this.clock() });
    if (!s) throw new ScheduleNotFoundError(name);
    return this.view(s);
  }

  /** Resumes from the next tick after now: ticks that fell while paused are not run. */
  async resume(name: string, scope: ScheduleScope = {}): Promise<ScheduleView> {
    const current = await this.mustGet(name, scope);
    const now = this.clock();
    const s = await this.ctx.store.setSchedulePaused({ tenant: current.tenant, name, paused: false, nextRunAt: current.paused ? nextTick(current, now) : current.nextRunAt, now });
    if (!s) throw new ScheduleNotFoundError(name);
    return this.view(s);
  }

  /** Deletes it (a declared one comes back at the next start while the module still declares it). Runs already submitted are left alone. */
  async delete(name: string, scope: ScheduleScope = {}): Promise<void> {
    if (!(await this.ctx.store.deleteSchedule(this.keyOf(name, scope)))) throw new ScheduleNotFoundError(name);
  }

  /** Submits one run now, outside the cron times (paused or not, overlap or not), and records it as the last run. */
  async trigger(name: string, scope: ScheduleScope = {}): Promise<JobSnapshot> {
    const s = await this.mustGet(name, scope);
    const now = this.clock();
    const { job } = await this.ctx.enqueue(s.task, s.input, { tenant: s.tenant, metadata: { schedule: s.name, trigger: 'manual' } });
    await this.ctx.store.recordScheduleRun({ tenant: s.tenant, name: s.name, at: now, jobId: job.id });
    return job;
  }

  /**
   * Declared schedules (tasks module), upserted by name in their tenant at start. A new one is
   * created; a changed one takes the declaration (its next tick moves when its cron or timezone
   * changed; paused and the last run are kept); an unchanged one is left alone, so processes
   * starting together do not disturb each other's ticks.
   */
  async declare(declared: ReadonlyArray<ScheduleInput & { tenant?: string }>): Promise<void> {
    const now = this.clock();
    const seen = new Set<string>();
    for (const d of declared) {
      try {
        await this.declareOne(d, now, seen);
      } catch (err) {
        // Opening fails on a bad declaration: the message names which one (a module may declare many).
        if (err instanceof LonghaulError) err.message = `declared schedule ${JSON.stringify(d?.name)}: ${err.message}`;
        throw err;
      }
    }
  }

  private async declareOne(d: ScheduleInput & { tenant?: string }, now: number, seen: Set<string>): Promise<void> {
    const spec = normalizeSpec(d);
    const tenant = d.tenant ?? DEFAULT_TENANT;
    if (seen.has(`${tenant}\n${spec.name}`)) throw new InvalidScheduleError([{ path: 'name', message: `two declared schedules are named "${spec.name}"` }]);
    seen.add(`${tenant}\n${spec.name}`);
    await this.checkRun(spec);
    const current = await this.ctx.store.getSchedule({ tenant, name: spec.name });
    const fresh: ScheduleRecord = { ...spec, tenant, declared: true, paused: d.paused ?? false, nextRunAt: nextTick(spec, now), lastRunAt: null, lastJobId: null, createdAt: now, updatedAt: now };
    if (!current) {
      // Another process may insert it first: then it is the same declaration, nothing to do.
      await this.ctx.store.insertSchedule({ schedule: fresh });
      return;
    }
    const same =
      current.declared &&
      current.task === spec.task &&
      current.cron === spec.cron &&
      current.timezone === spec.timezone &&
      current.catchUp === spec.catchUp &&
      current.overlap === spec.overlap &&
      JSON.stringify(current.input) === JSON.stringify(spec.input);
    if (same) return;
    const timing = current.cron !== spec.cron || current.timezone !== spec.timezone;
    await this.ctx.store.replaceSchedule({
      schedule: { ...current, ...spec, declared: true, nextRunAt: timing ? fresh.nextRunAt : current.nextRunAt, updatedAt: now },
    });
  }

  /** One tick pass: every due schedule submits its run (or skips it) and moves on. */
  async tick(now: number = this.clock()): Promise<TickReport> {
    const report: TickReport = { fired: 0, skipped: 0, lost: 0 };
    const due = await this.ctx.store.dueSchedules({ now, limit: TICK_BATCH });
    for (const s of due) {
      // A process that does not run this task type (an API server without the tasks module)
      // leaves the schedule to the processes that do, instead of failing on it every pass.
      if (!this.ctx.tasks.has(s.task)) continue;
      const key = `${s.tenant}\n${s.name}`;
      try {
        await this.tickOne(s, now, report);
        this.refusedTicks.delete(key);
      } catch (err) {
        if (err instanceof TenantQuotaExceededError || err instanceof QueueFullError) {
          this.refusedTick(key, s, err);
          continue;
        }
        // One schedule's failure (its task unknown to this process, a database hiccup) leaves it due for the next pass or another process.
        this.ctx.logger.warn({ err, schedule: s.name, tenant: s.tenant }, 'schedule tick failed; it stays due');
      }
    }
    return report;
  }

  /**
   * A tick a quota refused (the tenant's maxQueued, or the global maxQueued): an expected state,
   * not a fault, and the schedule is tried again every pass until the backlog shrinks. One warn
   * line per schedule a minute at most, without a stack, saying how many refusals it stands for.
   */
  private refusedTick(key: string, s: ScheduleRecord, err: TenantQuotaExceededError | QueueFullError): void {
    const at = this.clock();
    const seen = this.refusedTicks.get(key);
    if (seen && at - seen.loggedAt < REFUSED_TICK_LOG_MS) {
      seen.since++;
      return;
    }
    this.refusedTicks.set(key, { loggedAt: at, since: 0 });
    this.ctx.logger.warn(
      { schedule: s.name, tenant: s.tenant, code: err.code, reason: err.message, refusedSinceLastLine: seen?.since ?? 0 },
      'schedule tick refused by a quota; it stays due and is tried again each pass (logged once a minute)',
    );
  }

  /** Applies decisions to one schedule until it waits (a late pass may owe it several on-time ticks) or another process moved it first. */
  private async tickOne(due: ScheduleRecord, now: number, report: TickReport): Promise<void> {
    let s = due;
    // Bounded: the on-time window holds at most ON_TIME_GRACE_MS / 1000 + 1 ticks (per-second cron).
    for (let round = 0; round < MAX_ROUNDS; round++) {
      let previousRunOpen = false;
      if (!s.overlap && s.lastJobId) {
        const last = await this.ctx.store.getJob({ id: s.lastJobId, tenant: s.tenant });
        previousRunOpen = last !== null && !isTerminal(last.state);
      }
      const decision = decideTick(s, now, previousRunOpen);
      if (decision.kind === 'wait') return;
      const expected = s.nextRunAt as number;
      let lastRun: { at: number; jobId: string } | undefined;
      let refused = false;
      if (decision.kind === 'fire') {
        try {
          const { job } = await this.ctx.enqueue(s.task, s.input, {
            tenant: s.tenant,
            idempotencyKey: tickKey(s.name, decision.tickAt),
            metadata: { schedule: s.name, tick: iso(decision.tickAt) },
          });
          lastRun = { at: decision.tickAt, jobId: job.id };
        } catch (err) {
          if (err instanceof IdempotencyConflictError) {
            // The schedule's input changed between two processes' submissions of one tick: the tick's job exists.
          } else if (err instanceof LonghaulError && err.status === 422) {
            // The run is refused for good (the task's schema changed since the schedule was
            // checked): this tick is lost, said loudly, and the schedule moves on instead of
            // failing on the same tick every pass. Transient errors (the database) stay due.
            this.ctx.logger.error({ err, schedule: s.name, tenant: s.tenant, tick: iso(decision.tickAt) }, 'schedule run refused; the tick is skipped');
            refused = true;
          } else {
            throw err;
          }
        }
      }
      const moved = await this.ctx.store.advanceSchedule({ tenant: s.tenant, name: s.name, expectedNextRunAt: expected, nextRunAt: decision.nextRunAt, ...(lastRun ? { lastRun } : {}), now });
      if (!moved) {
        report.lost++;
        return;
      }
      if (decision.kind === 'fire' && !refused) report.fired++;
      else report.skipped++;
      if (decision.kind === 'skip' && decision.reason === 'overlap') {
        this.ctx.logger.info({ schedule: s.name, tenant: s.tenant }, 'schedule tick skipped: the previous run is still going');
      } else if (decision.missed > 0) {
        this.ctx.logger.info({ schedule: s.name, tenant: s.tenant, missed: decision.missed, catchUp: s.catchUp }, `schedule ticks were missed (${s.catchUp === 'skip' ? 'skipped' : 'one run for them'})`);
      }
      s = { ...s, nextRunAt: decision.nextRunAt, ...(lastRun ? { lastRunAt: lastRun.at, lastJobId: lastRun.jobId } : {}) };
    }
  }
}
