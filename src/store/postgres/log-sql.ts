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
