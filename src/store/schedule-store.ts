/** The schedules part of the storage contract (see store.ts): cron schedules and their ticks. */
import type { ScheduleRecord } from '../core/schedule.js';

/** Where a tick moved a schedule: the CAS on its nextRunAt, and its last run when the tick submitted one. */
export interface AdvanceScheduleParams {
  tenant: string;
  name: string;
  /** The nextRunAt the caller read: the write applies only while it is still the stored one. */
  expectedNextRunAt: number;
  nextRunAt: number | null;
  lastRun?: { at: number; jobId: string };
  now: number;
}

/**
 * Schedules (cron, core/schedule.ts): one row per (tenant, name). Guarantees:
 * - `insertSchedule` never replaces: of two creations of one name, one wins.
 * - `advanceSchedule` is a compare-and-swap on nextRunAt: of several processes handling the same
 *   tick, one moves the schedule on; the others learn they lost (the job a tick submits is keyed
 *   by its time, so a loser's submission found the winner's job instead of adding one).
 * - `replaceSchedule` writes a whole record (an update, a declared schedule at start); a tick in
 *   flight then loses its CAS when nextRunAt changed.
 */
export interface ScheduleStore {
  /** False when the name is taken in that tenant. */
  insertSchedule(params: { schedule: ScheduleRecord }): Promise<boolean>;
  /** Inserts or overwrites the schedule of that (tenant, name). */
  replaceSchedule(params: { schedule: ScheduleRecord }): Promise<void>;
  getSchedule(params: { tenant: string; name: string }): Promise<ScheduleRecord | null>;
  /** In name order; every tenant's when `tenant` is absent. */
  listSchedules(params: { tenant?: string; limit: number }): Promise<ScheduleRecord[]>;
  deleteSchedule(params: { tenant: string; name: string }): Promise<boolean>;
  /** Sets paused; when `nextRunAt` is given (a resume) it is written too. Null when absent. */
  setSchedulePaused(params: { tenant: string; name: string; paused: boolean; nextRunAt?: number | null; now: number }): Promise<ScheduleRecord | null>;
  /** Records a run submitted outside the tick (trigger now) as the last run. */
  recordScheduleRun(params: { tenant: string; name: string; at: number; jobId: string }): Promise<void>;
  /** Schedules not paused whose nextRunAt is at or before `now`, at most `limit`, earliest first. */
  dueSchedules(params: { now: number; limit: number }): Promise<ScheduleRecord[]>;
  advanceSchedule(params: AdvanceScheduleParams): Promise<boolean>;
}
