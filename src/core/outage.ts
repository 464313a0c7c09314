/**
 * What a process logs about a database outage: one line when it starts, a reminder now and then
 * while it lasts, and one line when it ends, with how many tries failed and for how long. Every
 * part that meets the outage on its own (the sweeper, a worker's claim loop and its background
 * tasks, a LISTEN connection, startup) keeps one `Outage` and logs the lines it returns, instead
 * of one line per failed try.
 *
 * Only passing store errors (store-errors.ts) make an outage; any other error is a refusal of
 * what was asked (a bug, bad data, a schema too new) and is logged every time by the caller, as
 * before: `failed` returns its line too, at error level, so no error is ever swallowed.
 *
 * Pure: it reads no clock (callers pass `now`) and logs nothing itself; it returns the lines to
 * log, each as `logger[line.level](line.fields, line.msg)`.
 */
import { isTransientStoreError } from './store-errors.js';

export interface OutageLine {
  level: 'error' | 'warn' | 'info';
  msg: string;
  fields: Record<string, unknown>;
}

/** How often a lasting outage is mentioned again (ms). */
export const OUTAGE_REMINDER_MS = 30_000;

/** The messages, fixed so that an operator can search for them and alert on them. */
export const OUTAGE_STARTED = 'database unreachable, retrying';
export const OUTAGE_LASTING = 'database still unreachable, retrying';
export const OUTAGE_ENDED = 'database reachable again';

/** The error as a reminder carries it: its message and code, without the stack logged at the start. */
function brief(err: unknown): Record<string, unknown> {
  if (typeof err !== 'object' || err === null) return { message: String(err) };
  const { message, code } = err as { message?: unknown; code?: unknown };
  return { message: typeof message === 'string' ? message : String(err), ...(code === undefined ? {} : { code }) };
}

export class Outage {
  /** When the current outage started (its first failure), or null while the database answers. */
  private since: number | null = null;
  private failures = 0;
  private lastLineAt = 0;

  /**
   * @param component who met the outage, a field of every line (`sweeper`, `worker loop`, ...).
   * @param remindEveryMs how often a lasting outage is logged again.
   */
  constructor(
    readonly component: string,
    private readonly remindEveryMs = OUTAGE_REMINDER_MS,
  ) {}

  /** True between the first passing failure and the next success. */
  get down(): boolean {
    return this.since !== null;
  }

  /**
   * A try failed with `err` at `now`. A passing store error: the outage's first line, a
   * reminder when one is due, else null (nothing to log). Any other error: its own line, every
   * time, with the message `refused` (what the caller logged for it before).
   */
  failed(err: unknown, now: number, refused: string): OutageLine | null {
    if (!isTransientStoreError(err)) return { level: 'error', msg: refused, fields: { component: this.component, err } };
    this.failures++;
    if (this.since === null) {
      this.since = now;
      this.lastLineAt = now;
      return { level: 'error', msg: OUTAGE_STARTED, fields: { component: this.component, outage: 'started', err } };
    }
    if (now - this.lastLineAt < this.remindEveryMs) return null;
    this.lastLineAt = now;
    return {
      level: 'warn',
      msg: OUTAGE_LASTING,
      fields: { component: this.component, outage: 'lasting', failures: this.failures, downMs: now - this.since, err: brief(err) },
    };
  }

  /** A try succeeded at `now`: the outage's last line when one was under way, else null. */
  succeeded(now: number): OutageLine | null {
    if (this.since === null) return null;
    const line: OutageLine = {
      level: 'info',
      msg: OUTAGE_ENDED,
      fields: { component: this.component, outage: 'ended', failures: this.failures, downMs: now - this.since },
    };
    this.since = null;
    this.failures = 0;
    return line;
  }
}
