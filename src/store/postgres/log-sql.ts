/** SQL text that appends transition-log entries (the jobs row's `log` column; its format: migrations/0001_baseline.sql, "Wire formats"). */
/** SQL appending one entry to the log of the jobs row `j` being updated (`j.log` is its log before the change). */
export function logAppend(from: string, to: string, at: string, reason: string, attempt: string, worker: string): string {
  return `j.log || ',' || json_build_array(${from}, ${to}, ${at}, ${reason}, ${attempt}, ${worker})::text`;
}

/**
 * A claim appends no entry (`queued → running, claimed`); it sets `claim_logged` false instead,
 * and the entry is written by the next change of the running job (`withPendingClaim`), or never
 * when the job is deleted on its end (retention 0). While the job runs, the row keeps what the
 * entry says: the claim's time (`started_at`), attempt and worker. Readers of the log add it the
 * same way (`pendingClaim`). The format: migrations/0001_baseline.sql, "Wire formats".
 */
export function pendingClaim(j = 'j'): string {
  return `CASE WHEN ${j}.claim_logged THEN '' ELSE ',["queued","running",' || ${j}.started_at::text || ',"claimed",' || ${j}.attempts::text || ',' || coalesce(to_json(${j}.worker_id)::text, 'null') || ']' END`;
}

/** An append (logAppend) that first writes a pending claim entry; use with `claim_logged = true`. */
export function withPendingClaim(append: string): string {
  if (!append.startsWith('j.log || ')) throw new Error('withPendingClaim expects an append to j.log');
  return `j.log || ${pendingClaim('j')} || ${append.slice('j.log || '.length)}`;
}
