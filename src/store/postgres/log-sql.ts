/** SQL text that appends transition-log entries (the jobs row's `log` column, see schema.ts). */
/** SQL appending one entry to the log of the jobs row `j` being updated (`j.log` is its log before the change). */
export function logAppend(from: string, to: string, at: string, reason: string, attempt: string, worker: string): string {
  return `j.log || ',' || json_build_array(${from}, ${to}, ${at}, ${reason}, ${attempt}, ${worker})::text`;
}

/**
 * The same for an entry whose from, to and reason are constants: they are written into the SQL
 * as JSON text, which costs a third of json_build_array per row (`at` and `attempt` are bigint
 * and integer expressions, `worker` a text expression or NULL).
 */
export function logAppendFixed(from: string, to: string, at: string, reason: string, attempt: string, worker: string): string {
  const lit = (v: string) => `'${v.replaceAll("'", "''")}'`;
  return `j.log || ${lit(`,[${JSON.stringify(from)},${JSON.stringify(to)},`)} || (${at})::text || ${lit(`,${JSON.stringify(reason)},`)} || (${attempt})::text || ',' || coalesce(to_json(${worker})::text, 'null') || ']'`;
}

/**
 * Migration 16: a claim no longer appends its entry (`queued → running, claimed`); it sets
 * `claim_logged` false instead, and the entry is written by the next change of the running job
 * (`withPendingClaim`), or never when the job is deleted on its end (retention 0). While the
 * job runs, the row keeps what the entry says: the claim's time (`started_at`), attempt and
 * worker. Readers of the log add it the same way (`pendingClaim`).
 */
export function pendingClaim(j = 'j'): string {
  return `CASE WHEN ${j}.claim_logged THEN '' ELSE ',["queued","running",' || ${j}.started_at::text || ',"claimed",' || ${j}.attempts::text || ',' || coalesce(to_json(${j}.worker_id)::text, 'null') || ']' END`;
}

/** An append (logAppend) that first writes a pending claim entry; use with `claim_logged = true`. */
export function withPendingClaim(append: string): string {
  if (!append.startsWith('j.log || ')) throw new Error('withPendingClaim expects an append to j.log');
  return `j.log || ${pendingClaim('j')} || ${append.slice('j.log || '.length)}`;
}
