/**
 * How job rows are read: one select list (JOB_COLUMNS; `worker_cycle`'s claimed rows, after their
 * `applied` column, are the same columns in the same order less what the claim set), read in array mode, and turned into JobRecords here. JSON columns are read as text
 * and parsed here, so that a caller's client with its own type parsers (transactional enqueue)
 * reads the same values; bigints arrive as strings.
 */
import type { JobError } from '../../core/errors.js';
import { type JobRecord, priorityName, type TransitionEntry } from '../../core/job.js';
import { EMPTY_PROGRESS, type Progress } from '../../core/progress.js';
import type { JobState } from '../../core/states.js';
import type { WorkflowState } from '../../core/workflow.js';
import { JOB_COLUMNS, parseCheckpoint, parseJson, readWait } from '../job-row.js';

const COLUMNS = JOB_COLUMNS;
const JSON_COLUMNS = new Set(['input', 'metadata', 'result', 'error', 'checkpoint', 'workflow']);

/** Where each column sits in a row (-1: not in it), and the progress after the columns. */
type Index = Record<(typeof COLUMNS)[number] | 'progress', number>;

function indexOf(columns: readonly string[]): Index {
  const ix = Object.fromEntries(COLUMNS.map((c) => [c, columns.indexOf(c)])) as Index;
  ix.progress = columns.length;
  return ix;
}

const FULL = indexOf(COLUMNS);

/**
 * What a claimed row of worker_cycle leaves out (migrations/0001_baseline.sql): what the
 * claim set (running, the worker, started and heartbeat at the claim's time, not stalled) and a
 * waiting job's wait. The other columns come in JOB_COLUMNS order.
 */
const CLAIM_SETS = new Set<string>(['state', 'worker_id', 'stalled', 'started_at', 'heartbeat_at', 'wait_kind', 'wait_name', 'wait_fail_fast']);
const CLAIMED = indexOf(COLUMNS.filter((c) => !CLAIM_SETS.has(c)));

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

/** The job in row `r` from value `at` on, its columns where `ix` says; `claim`: a claimed row's. */
function toJob(r: unknown[], at: number, ix: Index, claim: { workerId: string; now: number } | null): JobRecord {
  const v = (i: number) => r[at + i];
  const state = claim ? 'running' : (v(ix.state) as JobState);
  return {
    id: v(ix.id) as string,
    tenant: v(ix.tenant) as string,
    type: v(ix.type) as string,
    state,
    priority: priorityName(Number(v(ix.priority))),
    input: parseJson(v(ix.input), null),
    metadata: parseJson(v(ix.metadata), null),
    result: parseJson(v(ix.result), null),
    error: parseJson<JobError | null>(v(ix.error), null),
    attempts: Number(v(ix.attempts)),
    maxAttempts: Number(v(ix.max_attempts)),
    lease: Number(v(ix.lease)),
    workerId: claim ? claim.workerId : str(v(ix.worker_id)),
    cancelRequested: v(ix.cancel_requested) === true,
    cancelReason: str(v(ix.cancel_reason)),
    cancelRequestedAt: num(v(ix.cancel_requested_at)),
    stalled: claim ? false : v(ix.stalled) === true,
    parentId: str(v(ix.parent_id)),
    createdAt: Number(v(ix.created_at)),
    startedAt: claim ? claim.now : num(v(ix.started_at)),
    finishedAt: num(v(ix.finished_at)),
    updatedAt: Number(v(ix.updated_at)),
    runAt: Number(v(ix.run_at)),
    expiresAt: num(v(ix.expires_at)),
    heartbeatAt: claim ? claim.now : num(v(ix.heartbeat_at)),
    timeoutMs: num(v(ix.timeout_ms)),
    heartbeatTimeoutMs: Number(v(ix.heartbeat_timeout_ms)),
    stallTimeoutMs: num(v(ix.stall_timeout_ms)),
    resultTtlMs: Number(v(ix.result_ttl_ms)),
    checkpoint: parseCheckpoint(v(ix.checkpoint)),
    idempotencyKey: str(v(ix.idempotency_key)),
    progress: parseJson<Progress>(v(ix.progress), EMPTY_PROGRESS),
    workflow: parseJson<WorkflowState | null>(v(ix.workflow), null),
    wait: claim ? null : readWait(state, v(ix.wait_kind), v(ix.wait_name), v(ix.wait_fail_fast)),
    childrenTotal: Number(v(ix.children_total)),
  };
}

/** A row of JOB_SELECT values starting at `at`. */
export function rowToJob(r: unknown[], at = 0): JobRecord {
  return toJob(r, at, FULL, null);
}

/** A job claimed by `workerId` at `now`, as worker_cycle returns it (from value `at` on: 1). */
export function claimedRowToJob(r: unknown[], at: number, workerId: string, now: number): JobRecord {
  return toJob(r, at, CLAIMED, { workerId, now });
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

