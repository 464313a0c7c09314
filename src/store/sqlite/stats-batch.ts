/**
 * The stats the worker's own writes report themselves (see "Stats" in migrations/0001_baseline.sql): a
 * claim and the end of a running job add their changes here, and the store writes them in a few
 * upserts at the end of the write transaction, where the row triggers ran one to three statements
 * per job. Those statements mark the rows they change (`stats_seq + 1`), which the triggers skip;
 * every other write, by Longhaul or anything else, is still counted by the triggers.
 *
 * Exact like the triggers: the figures are written in the same transaction as the changes, and
 * dropped with them when it rolls back. The triggers' "ended" rule (finished_at set where it was
 * not) is `patch.finishedAt` here: only running jobs report themselves, and a claim clears
 * finished_at, so a running job's is always NULL.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { JobState } from '../../core/states.js';
import { durationBucket } from '../../core/stats-window.js';

/**
 * States whose end has a run time: the triggers' `NEW.state IN (...)` in
 * migrations/0001_baseline.sql (test/unit/sqlite-schema-agreement.test.ts compares them).
 */
export const TIMED_ENDS: ReadonlySet<string> = new Set(['succeeded', 'failed', 'expired']);

const SEP = '\u0000';

export class StatsBatch {
  /** `tenant SEP type SEP state` → change of the count. */
  private readonly counts = new Map<string, number>();
  /** `tenant SEP type SEP second` → jobs ended in that second. */
  private readonly ends = new Map<string, number>();
  /** `tenant SEP type SEP minute SEP bucket` → run times. */
  private readonly durations = new Map<string, number>();
  private statements: { counts: StatementSync; ends: StatementSync; durations: StatementSync } | null = null;

  constructor(private readonly db: DatabaseSync) {}

  /** A job of (tenant, type) moved from one state to another. */
  moved(tenant: string, type: string, from: JobState, to: JobState): void {
    if (from === to) return;
    add(this.counts, `${tenant}${SEP}${type}${SEP}${from}`, -1);
    add(this.counts, `${tenant}${SEP}${type}${SEP}${to}`, 1);
  }

  /** A running job ended in `state` at `finishedAt` (it started at `startedAt`). */
  ended(tenant: string, type: string, state: JobState, finishedAt: number, startedAt: number | null): void {
    add(this.ends, `${tenant}${SEP}${type}${SEP}${Math.floor(finishedAt / 1000)}`, 1);
    if (startedAt !== null && TIMED_ENDS.has(state)) {
      add(this.durations, `${tenant}${SEP}${type}${SEP}${Math.floor(finishedAt / 60_000)}${SEP}${durationBucket(finishedAt - startedAt)}`, 1);
    }
  }

  /** Writes what was added, inside the caller's write transaction. */
  flush(): void {
    if (this.counts.size === 0 && this.ends.size === 0 && this.durations.size === 0) return;
    this.statements ??= {
      counts: this.db.prepare('INSERT INTO job_counts (tenant, type, state, n) VALUES (?, ?, ?, ?) ON CONFLICT (tenant, type, state) DO UPDATE SET n = n + excluded.n'),
      ends: this.db.prepare(
        'INSERT INTO job_rates (second, tenant, type, submitted, finished) VALUES (?, ?, ?, 0, ?) ON CONFLICT (tenant, second, type) DO UPDATE SET finished = finished + excluded.finished',
      ),
      durations: this.db.prepare(
        'INSERT INTO job_durations (minute, tenant, type, bucket, n) VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, minute, type, bucket) DO UPDATE SET n = n + excluded.n',
      ),
    };
    const st = this.statements;
    for (const [key, n] of this.counts) {
      if (n === 0) continue;
      const [tenant, type, state] = key.split(SEP) as [string, string, string];
      st.counts.run(tenant, type, state, n);
    }
    for (const [key, n] of this.ends) {
      const [tenant, type, second] = key.split(SEP) as [string, string, string];
      st.ends.run(Number(second), tenant, type, n);
    }
    for (const [key, n] of this.durations) {
      const [tenant, type, minute, bucket] = key.split(SEP) as [string, string, string, string];
      st.durations.run(Number(minute), tenant, type, Number(bucket), n);
    }
    this.discard();
  }

  /** Forgets what was added (the transaction rolled back). */
  discard(): void {
    this.counts.clear();
    this.ends.clear();
    this.durations.clear();
  }
}

function add(map: Map<string, number>, key: string, n: number): void {
  map.set(key, (map.get(key) ?? 0) + n);
}
