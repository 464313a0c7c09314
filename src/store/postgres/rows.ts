/**
 * How job rows are read: one select list (the same columns, in the same order, as the rows
 * `worker_cycle` returns after its `applied` column), read in array mode, and turned into
 * JobRecords here. JSON columns are read as text and parsed here, so that a caller's client with
 * its own type parsers (transactional enqueue) reads the same values; bigints arrive as strings.
 */
import type { JobError } from '../../core/errors.js';
import { type JobRecord, priorityName, type TransitionEntry } from '../../core/job.js';
import { EMPTY_PROGRESS, type Progress } from '../../core/progress.js';
import type { JobState } from '../../core/states.js';
import type { WorkflowState } from '../../core/workflow.js';
import { JOB_COLUMNS, parseCheckpoint, parseJson, readWait } from '../job-row.js';

const COLUMNS = JOB_COLUMNS;
const JSON_COLUMNS = new Set(['input', 'metadata', 'result', 'error', 'checkpoint', 'workflow']);
const C = Object.fromEntries(COLUMNS.map((c, i) => [c, i])) as Record<(typeof COLUMNS)[number], number>;
const PROGRESS = COLUMNS.length;

/** Select list over `jobs j LEFT JOIN progress p ON p.job_id = j.id`. */
export const JOB_SELECT = `${COLUMNS.map((c) => (JSON_COLUMNS.has(c) ? `j.${c}::text` : `j.${c}`)).join(', ')}, p.data::text`;

/** Number of values JOB_SELECT yields per row. */
export const JOB_WIDTH = COLUMNS.length + 1;

function num(v: unknown): number | null {
  return v === null || v === undefined ? null : Number(v);
}

function str(v: unknown): string | null {
  return v === null || v === undefined ? null : String(v);
}

/** A row of JOB_SELECT values starting at `at` (rows of worker_cycle start at 1). */
export function rowToJob(r: unknown[], at = 0): JobRecord {
  const v = (i: number) => r[at + i];
  return {
    id: v(C.id) as string,
    tenant: v(C.tenant) as string,
    type: v(C.type) as string,
    state: v(C.state) as JobState,
    priority: priorityName(Number(v(C.priority))),
    input: parseJson(v(C.input), null),
    metadata: parseJson(v(C.metadata), null),
    result: parseJson(v(C.result), null),
    error: parseJson<JobError | null>(v(C.error), null),
    attempts: Number(v(C.attempts)),
    maxAttempts: Number(v(C.max_attempts)),
    lease: Number(v(C.lease)),
    workerId: str(v(C.worker_id)),
    cancelRequested: v(C.cancel_requested) === true,
    cancelReason: str(v(C.cancel_reason)),
    cancelRequestedAt: num(v(C.cancel_requested_at)),
    stalled: v(C.stalled) === true,
    parentId: str(v(C.parent_id)),
    createdAt: Number(v(C.created_at)),
    startedAt: num(v(C.started_at)),
    finishedAt: num(v(C.finished_at)),
    updatedAt: Number(v(C.updated_at)),
    runAt: Number(v(C.run_at)),
    expiresAt: num(v(C.expires_at)),
    heartbeatAt: num(v(C.heartbeat_at)),
    timeoutMs: num(v(C.timeout_ms)),
    heartbeatTimeoutMs: Number(v(C.heartbeat_timeout_ms)),
    stallTimeoutMs: num(v(C.stall_timeout_ms)),
    resultTtlMs: Number(v(C.result_ttl_ms)),
    checkpoint: parseCheckpoint(v(C.checkpoint)),
    idempotencyKey: str(v(C.idempotency_key)),
    progress: parseJson<Progress>(v(PROGRESS), EMPTY_PROGRESS),
    workflow: parseJson<WorkflowState | null>(v(C.workflow), null),
    wait: readWait(v(C.state) as JobState, v(C.wait_kind), v(C.wait_name), v(C.wait_fail_fast)),
    childrenTotal: Number(v(C.children_total)),
  };
}

/** A jobs row's log as JSON array text ([[from, to, at, reason, attempt, workerId], ...]) as entries. */
export function parseLog(text: string): TransitionEntry[] {
  return (JSON.parse(text) as unknown[][]).map((e) => ({
    from: (e[0] as JobState | null) ?? null,
    to: e[1] as JobState,
    at: Number(e[2]),
    reason: e[3] as string,
    attempt: Number(e[4]),
    workerId: str(e[5]),
  }));
}

