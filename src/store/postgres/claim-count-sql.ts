/**
 * Migration 20: what the worker's claim (claim-sql.ts claimFunction) no longer pays per job.
 *
 * - **The claim counts itself.** Every claimed job moves from queued to running, so the claim
 *   statement appends that change to `job_changes` itself, one row per (tenant, type), and the
 *   update trigger (stats-schema.ts) does nothing for it: the claim sets the transaction-local
 *   setting `CLAIM_COUNTED` just before its statement and clears it just after, and the trigger
 *   returns at once while it is on. The trigger grouped the statement's old and new rows, 1,000
 *   rows for a claim of 500: about 0.8 ms of the claim's 6.5 ms. The figures read the same: a
 *   row with both an old and a new state counts -n for the one and +n for the other, as the
 *   trigger's two rows did.
 * - **No progress probe for a job never claimed.** Only a lease holder saves progress
 *   (lease-ops.ts), and a lease only grows, from 0 at submission: a job whose lease is 0 has no
 *   progress row, and the claim looks it up only for the others (two probes per job, about
 *   0.6 ms per claim of 500).
 */

/** The transaction-local setting that is on only while a claim statement runs. */
export const CLAIM_COUNTED = 'longhaul.claim_counted';

/** set_config calls (for a PERFORM) that turn CLAIM_COUNTED on or off for the transaction. */
export const claimCounted = (on: boolean) => `set_config('${CLAIM_COUNTED}', '${on ? 'on' : 'off'}', true)`;

/**
 * The CTE that appends the claim's change to job_changes: after a CTE `moved` holding the
 * claimed rows (RETURNING j.*), one row per (tenant, type) of them, from queued to running.
 */
export const countedCte = `      ), counted AS (
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
