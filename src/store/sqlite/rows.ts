/**
 * How SqliteStore reads job rows: SQLite builds one JSON array per row (`jobJson`), which
 * `jobFromJson` parses once and turns into a JobRecord. Handing the driver one string per
 * row costs about half of what reading 33 columns into a JavaScript array does (measured with
 * better-sqlite3, before the move to node:sqlite); the JSON
 * columns (input, metadata, ...) travel inside it as strings and are parsed here.
 */
import type { JobError } from '../../core/errors.js';
import { type JobRecord, priorityName, priorityRank } from '../../core/job.js';
import { compareIds } from '../../core/ids.js';
import { EMPTY_PROGRESS, type Progress } from '../../core/progress.js';
import type { JobState } from '../../core/states.js';
import type { WorkflowState } from '../../core/workflow.js';
import { JOB_COLUMNS, parseCheckpoint, parseJson, readWait } from '../job-row.js';

const COLUMNS = JOB_COLUMNS;
const PROGRESS = COLUMNS.length;

/**
 * The SQL expression for one job row as a JSON array, over the table or alias `t` (`j` in a
 * SELECT, `jobs` in an UPDATE's RETURNING clause).
 */
export function jobJson(t: string): string {
  return `json_array(${COLUMNS.map((c) => `${t}.${c}`).join(', ')}, (SELECT p.data FROM job_progress p WHERE p.job_id = ${t}.id))`;
}

/** A row built by `jobJson`. */
export function jobFromJson(text: string): JobRecord {
  const r = JSON.parse(text) as unknown[];
  return {
    id: r[0] as string,
    tenant: r[1] as string,
    type: r[2] as string,
    state: r[3] as JobState,
    priority: priorityName(r[4] as number),
    input: parseJson(r[5], null),
    metadata: parseJson(r[6], null),
    result: parseJson(r[7], null),
    error: parseJson<JobError | null>(r[8], null),
    attempts: r[9] as number,
    maxAttempts: r[10] as number,
    lease: r[11] as number,
    workerId: r[12] as string | null,
    cancelRequested: r[13] === 1,
    cancelReason: r[14] as string | null,
    cancelRequestedAt: r[15] as number | null,
    stalled: r[16] === 1,
    parentId: r[17] as string | null,
    createdAt: r[18] as number,
    startedAt: r[19] as number | null,
    finishedAt: r[20] as number | null,
    updatedAt: r[21] as number,
    runAt: r[22] as number,
    expiresAt: r[23] as number | null,
    heartbeatAt: r[24] as number | null,
    timeoutMs: r[25] as number | null,
    heartbeatTimeoutMs: r[26] as number,
    stallTimeoutMs: r[27] as number | null,
    resultTtlMs: r[28] as number,
    checkpoint: parseCheckpoint(r[29]),
    idempotencyKey: r[30] as string | null,
    progress: parseJson<Progress>(r[PROGRESS], EMPTY_PROGRESS),
    workflow: parseJson<WorkflowState | null>(r[31], null),
    wait: readWait(r[3] as JobState, r[32], r[33], r[34]),
    childrenTotal: r[35] as number,
  };
}

/** Rows of a statement that selects `jobJson` alone and returns arrays (`[text]` each). */
export function jobsFromRows(rows: readonly unknown[]): JobRecord[] {
  const jobs = new Array<JobRecord>(rows.length);
  for (let i = 0; i < rows.length; i++) jobs[i] = jobFromJson((rows[i] as [string])[0]);
  return jobs;
}

/** Queue order: priority rank, then runAt, then id (UUIDv7: submission order). */
export function queueOrder(a: JobRecord, b: JobRecord): number {
  if (a.priority !== b.priority) return priorityRank(a.priority) - priorityRank(b.priority);
  if (a.runAt !== b.runAt) return a.runAt - b.runAt;
  return compareIds(a.id, b.id);
}
