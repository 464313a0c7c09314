/**
 * Migration 20: what the worker's cycle (claim-sql.ts claimFunction, transition-sql.ts
 * end_succeeded) no longer pays per job.
 *
 * - **Its statements count themselves.** The claim moves every job it takes from queued to
 *   running, and end_succeeded deletes running jobs: each statement appends that change to
 *   `job_changes` itself, one row per (tenant, type), and the statistics triggers
 *   (stats-schema.ts) do nothing for it. The statement's function sets the transaction-local
 *   setting `SELF_COUNTED` just before it and clears it just after; the triggers return at once
 *   while it is on. The update trigger grouped a claim's old and new rows, 1,000 rows for a claim
 *   of 500: about 0.8 ms of the claim's 6.5 ms. The figures read the same: a row with both an old
 *   and a new state counts -n for the one and +n for the other, as the trigger's two rows did.
 * - **No progress probe for a job never claimed.** Only a lease holder saves progress
 *   (lease-ops.ts), and a lease only grows, from 0 at submission: a job whose lease is 0 has no
 *   progress row, and the claim looks it up only for the others (two probes per job, about
 *   0.6 ms per claim of 500).
 */

/** The transaction-local setting that is on only while a statement that counts itself runs. */
export const SELF_COUNTED = 'longhaul.self_counted';

/** A set_config call (for a PERFORM) that turns SELF_COUNTED on or off for the transaction. */
export const selfCounted = (on: boolean) => `set_config('${SELF_COUNTED}', '${on ? 'on' : 'off'}', true)`;

/**
 * The CTE that appends the claim's change to job_changes: after a CTE `moved` holding the
 * claimed rows (RETURNING j.*), one row per (tenant, type) of them, from queued to running.
 */
export const claimCountedCte = `      ), counted AS (
        INSERT INTO {s}.job_changes (tenant, type, old_state, new_state, n)
        SELECT m.tenant, m.type, 'queued', 'running', count(*)::integer FROM moved m GROUP BY m.tenant, m.type
`;

/**
 * A claimed job's progress lookup (a probe of the progress table) for job row `r`, guarded from
 * migration 20: `lease` is the lease the job had before this claim took it.
 */
export function progressProbe(version: number, r: string, column: 'updated_at' | 'data::text', lease: string): string {
  const probe = `(SELECT p.${column} FROM {s}.progress p WHERE p.job_id = ${r}.id)`;
  return version >= 20 ? `CASE WHEN ${lease} > 0 THEN ${probe} END` : probe;
}

/**
 * The CTE that appends end_succeeded's deletions to job_changes: after a CTE `gone` holding the
 * deleted jobs with their tenant, type and state, one row per (tenant, type, state).
 */
export const deleteCountedCte = `        ), gone_counted AS (
          INSERT INTO {s}.job_changes (tenant, type, old_state, n)
          SELECT g.tenant, g.type, g.state, count(*)::integer FROM gone g GROUP BY g.tenant, g.type, g.state
`;

/** The trigger check (for the statistics triggers' functions) that skips a statement counting itself. */
export const SKIP_SELF_COUNTED = `    -- A statement that appends its own change (self-count-sql.ts).
    IF current_setting('${SELF_COUNTED}', true) = 'on' THEN
      RETURN NULL;
    END IF;
`;
