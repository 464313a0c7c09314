/**
 * `LONGHAUL_WEBHOOK_RETRY_SCHEDULE`: the delays between delivery attempts, e.g. the default
 * `5s,5m,30m,2h,5h,10h` (one first attempt plus six retries, the last about 17.5 h after the event).
 */
import { parseDuration } from '../core/duration.js';

export const DEFAULT_RETRY_SCHEDULE = '5s,5m,30m,2h,5h,10h';

const MAX_ENTRIES = 50;
const MAX_DELAY_MS = 7 * 86_400_000;

/** Delays in ms; throws an error naming the bad entry. */
export function parseRetrySchedule(text: string = DEFAULT_RETRY_SCHEDULE, name = 'LONGHAUL_WEBHOOK_RETRY_SCHEDULE'): number[] {
  if (typeof text !== 'string' || text.trim() === '') throw new Error(`${name} is empty: give comma-separated delays such as ${DEFAULT_RETRY_SCHEDULE}`);
  const entries = text.split(',').map((s) => s.trim());
  if (entries.length > MAX_ENTRIES) throw new Error(`${name} has ${entries.length} entries; at most ${MAX_ENTRIES}`);
  return entries.map((entry, i) => {
    if (entry === '') throw new Error(`${name}: entry ${i + 1} is empty in "${text}"`);
    let ms: number;
    try {
      ms = parseDuration(entry);
    } catch {
      throw new Error(`${name}: "${entry}" is not a duration (expected e.g. 500ms, 5s, 5m, 2h, 1d)`);
    }
    if (ms < 1) throw new Error(`${name}: "${entry}" must be longer than 0`);
    if (ms > MAX_DELAY_MS) throw new Error(`${name}: "${entry}" is longer than 7 days`);
    return ms;
  });
}

/** The delay before the next attempt after attempt `attempt` (1-based) failed, or null when none remains. */
export function retryDelayAfter(attempt: number, schedule: readonly number[]): number | null {
  return schedule[attempt - 1] ?? null;
}
