/**
 * The SQL twin of core/job.ts `toSnapshot`: SQLite writes a job's public snapshot as JSON text
 * in the same read that finds the row, so a status poll (`GET /v1/jobs/{id}`) costs one
 * statement and no parsing, object building or serialising in JavaScript.
 *
 * The text is concatenated rather than built with `json_object` (which parses and re-renders
 * every JSON column) or `json_quote` (about 0.3 µs a call): the JSON columns (input, metadata,
 * result, error, progress) hold `JSON.stringify` output written by this store and go in as
 * they are, and ids (UUIDs), task types (letters, digits and `._:-`, checked by `defineTask`),
 * states and priorities never need escaping. Written out, it costs about 4.5 µs a read against
 * 5.7 µs for the `json_object` form.
 *
 * Its output must parse to exactly what `JSON.stringify(toSnapshot(job))` gives;
 * test/integration/snapshot-json.test.ts checks that over every state and shape of job. Three cases
 * are left to the general path, flagged by `fast = 0`: jobs with result files (their signed URLs
 * are made in JavaScript; files exist only once an attempt ran), jobs with children (the reader
 * counts them by state), and dates `strftime` does not write as `toISOString` does (before 1970,
 * after 9999; a wait with no time limit has its runAt there).
 */
import { ERROR_STATES, PRIORITIES } from '../../core/job.js';
import { EMPTY_PROGRESS } from '../../core/progress.js';

/** The last millisecond `strftime` renders exactly as `Date.prototype.toISOString` does. */
const MAX_PLAIN_DATE = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

const DATE_FIELDS = [
  ['createdAt', 'created_at'],
  ['startedAt', 'started_at'],
  ['finishedAt', 'finished_at'],
  ['updatedAt', 'updated_at'],
  ['runAt', 'run_at'],
  ['expiresAt', 'expires_at'],
] as const;

/** A SQL string literal. */
const lit = (text: string) => `'${text.replaceAll("'", "''")}'`;
/** A nullable JSON-text column as JSON (`null` for NULL). */
const jsonOrNull = (expr: string) => `coalesce(${expr}, 'null')`;
export const isoDateSql = (column: string) =>
  `CASE WHEN ${column} IS NULL THEN 'null' ELSE strftime('"%Y-%m-%dT%H:%M:%fZ"', ${column} / 1000.0, 'unixepoch') END`;
const bool = (column: string) => `CASE ${column} WHEN 1 THEN 'true' ELSE 'false' END`;
const priorityName = `CASE j.priority ${PRIORITIES.map((p, rank) => `WHEN ${rank} THEN '"${p}"'`).join(' ')} ELSE '"normal"' END`;

const storedProgress = `coalesce((SELECT p.data FROM job_progress p WHERE p.job_id = j.id), ${lit(JSON.stringify(EMPTY_PROGRESS))})`;
// A succeeded job reads 100 % with no ETA (json_set keeps the other fields).
const progress = `CASE WHEN j.state <> 'succeeded' THEN ${storedProgress}
  ELSE (SELECT CASE WHEN json_extract(g.v, '$.percent') IS 100 THEN g.v ELSE json_set(g.v, '$.percent', 100, '$.eta', 0) END FROM (SELECT ${storedProgress} AS v) g) END`;

/** `[name, SQL giving the field's JSON text]`, in the order of `JobSnapshot`'s fields. */
const FIELDS: [string, string][] = [
  ['id', `concat('"', j.id, '"')`],
  ['type', `concat('"', j.type, '"')`],
  ['status', `concat('"', j.state, '"')`],
  ['priority', priorityName],
  ['input', jsonOrNull('j.input')],
  ['metadata', jsonOrNull('j.metadata')],
  ['progress', progress],
  ['result', jsonOrNull('j.result')],
  ['resultUrl', "'null'"],
  ['results', "'[]'"],
  ['downloads', "'0'"],
  ['error', `CASE WHEN j.state IN (${[...ERROR_STATES].map((st) => lit(st)).join(', ')}) THEN ${jsonOrNull('j.error')} ELSE 'null' END`],
  ['lastError', jsonOrNull('j.error')],
  ['attempts', 'j.attempts'],
  ['maxAttempts', 'j.max_attempts'],
  ['cancelRequested', bool('j.cancel_requested')],
  ['stalled', bool('j.stalled')],
  // Any string can be given as a parent id (library option): quoted properly, when there is one.
  ['parentId', `CASE WHEN j.parent_id IS NULL THEN 'null' ELSE json_quote(j.parent_id) END`],
  // JobWait as rows.ts builds it (kind, name, failFast), only while waiting (see job-row.ts readWait).
  [
    'waitingFor',
    `CASE WHEN j.state = 'waiting' AND j.wait_kind IS NOT NULL THEN concat('{"kind":"', j.wait_kind, '","name":',
      CASE WHEN j.wait_name IS NULL THEN 'null' ELSE json_quote(j.wait_name) END, ',"failFast":', ${bool('j.wait_fail_fast')}, '}') ELSE 'null' END`,
  ],
  // A job with children takes the general path (the reader counts them): always null here.
  ['children', "'null'"],
  ...DATE_FIELDS.map(([name, column]): [string, string] => [name, isoDateSql(`j.${column}`)]),
  ['links', `concat('{"self":"/v1/jobs/', j.id, '","events":"/v1/jobs/', j.id, '/events","cancel":"/v1/jobs/', j.id, '/cancel"}')`],
];

const snapshotText = `concat(${FIELDS.map(([name, sql], i) => `${lit(`${i === 0 ? '{' : ','}"${name}":`)}, ${sql}`).join(',\n    ')}, '}')`;

const storedProgressOrNull = '(SELECT p.data FROM job_progress p WHERE p.job_id = j.id)';

/**
 * One row per job: `[tenant, state, run_at, expires_at, fast, updated_at, progress, snapshot
 * JSON]`. Parameters: the `updated_at` and progress text of a copy the caller holds (or -1 and
 * NULL), then the job id. The snapshot is NULL when that copy is still current: `updated_at`
 * moves forward on every change of the jobs row a snapshot shows, and progress lives in its own
 * table, compared as text. `fast` is 0 when the snapshot must come from the general path.
 */
export const SNAPSHOT_JSON_SQL = `
  SELECT j.tenant, j.state, j.run_at, j.expires_at,
    (j.attempts = 0 OR NOT EXISTS (SELECT 1 FROM job_results r WHERE r.job_id = j.id)) AND j.children_total = 0
      AND ${DATE_FIELDS.map(([, c]) => `coalesce(j.${c} BETWEEN 0 AND ${MAX_PLAIN_DATE}, 1)`).join(' AND ')},
    j.updated_at, ${storedProgressOrNull},
    CASE WHEN j.updated_at = ? AND ${storedProgressOrNull} IS ? THEN NULL ELSE ${snapshotText} END
  FROM jobs j WHERE j.id = ?`;

interface Held {
  updatedAt: number;
  progress: string | null;
  json: string;
}

/**
 * The snapshots last written for status polls, by job id, so that a poll of an unchanged job
 * only checks its version (about half the read). Bounded by total text size; the oldest go first.
 */
export class SnapshotCache {
  private readonly held = new Map<string, Held>();
  private chars = 0;

  constructor(
    private readonly maxChars = 8 * 1024 * 1024,
    private readonly maxEntryChars = 64 * 1024,
  ) {}

  get(id: string): Held | undefined {
    return this.held.get(id);
  }

  set(id: string, entry: Held): void {
    this.delete(id);
    if (entry.json.length > this.maxEntryChars) return;
    this.held.set(id, entry);
    this.chars += entry.json.length;
    for (const [oldest, e] of this.held) {
      if (this.chars <= this.maxChars) break;
      this.held.delete(oldest);
      this.chars -= e.json.length;
    }
  }

  delete(id: string): void {
    const e = this.held.get(id);
    if (!e) return;
    this.held.delete(id);
    this.chars -= e.json.length;
  }
}
