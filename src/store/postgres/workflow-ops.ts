/**
 * PostgresStore's part of the workflow contract (WorkflowStore in ../store.ts): suspending a
 * running job, waking it again, signals and children.
 *
 * Several processes write at once, so each operation that reads a job and then writes it is one
 * transaction that first locks the job row (FOR UPDATE): a suspend and a signal for the same job
 * are serialised, so a signal is either seen by the suspend (consumed at once) or sees the wait
 * (wakes the job), never neither. State changes go through apply_transitions, the store's
 * compare-and-swap with its log entry and its wake-up of idle workers (migrations/0001_baseline.sql), and children
 * through the store's bulk insert, on the same transaction.
 */
import type pg from 'pg';
import { isUuid } from '../../core/ids.js';
import { JOB_STATES, type JobState, TERMINAL_STATES } from '../../core/states.js';
import type { WorkflowState } from '../../core/workflow.js';
import { CHILD_FAILED, siblingFailedReason, stopSibling } from '../fail-fast.js';
import { parseJson } from '../job-row.js';
import type { InsertResult, LeaseRef, NewJob, ResumedJob, SignalResult, StoppedSibling, SuspendParams, SuspendResult, TransitionParams } from '../store.js';
import { checkSuspend } from '../suspend-check.js';
import { encodeTransitions } from './transitions.js';

/** What the operations need of the store: its pool, schema, transactions and bulk insert. */
export interface PgWorkflowHost {
  pool: pg.Pool;
  /** The quoted schema. */
  s: string;
  inTransaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T>;
  /** The store's insert of many jobs on `client` (idempotency keys honoured, no backlog limit). */
  insertOn(jobs: NewJob[], client: pg.PoolClient): Promise<InsertResult[]>;
}

const OPEN_STATES_SQL = "('pending', 'queued', 'running', 'retrying', 'waiting')";

/** waiting → queued for a parent or a signalled job: a compare-and-swap on the state, like any transition. */
function resumeWrite(id: string, at: number, reason: string): TransitionParams {
  return { id, from: 'waiting', to: 'queued', reason, at, patch: { runAt: at } };
}

async function rows(client: pg.ClientBase | pg.Pool, text: string, values: unknown[]): Promise<unknown[][]> {
  return (await client.query({ text, values, rowMode: 'array' })).rows as unknown[][];
}

export class PgWorkflowOps {
  private readonly sql: ReturnType<typeof statements>;

  constructor(private readonly host: PgWorkflowHost) {
    this.sql = statements(host.s);
  }

  /** Applies `items` (checked, distinct ids) with apply_transitions on `client`; the ids that applied. */
  private async apply(client: pg.ClientBase, items: TransitionParams[]): Promise<Set<string>> {
    const { json, rounds } = encodeTransitions(items);
    if (rounds === 0) return new Set();
    const [row] = await rows(client, this.sql.apply, [json, rounds]);
    // A negative ordinal: applied by deleting the job (deleteOnEnd).
    return new Set(((row?.[0] as number[] | null) ?? []).map((o) => (items[Math.abs(o) - 1] as TransitionParams).id));
  }

  async suspend(params: SuspendParams): Promise<SuspendResult> {
    const { write, wait } = params;
    const children = params.children ?? [];
    checkSuspend(params);
    if (!isUuid(write.id)) return { kind: 'lost' };
    const journal = JSON.stringify(params.workflow);
    return this.host.inTransaction(async (client): Promise<SuspendResult> => {
      const [held] = await rows(client, this.sql.lockRunning, [write.id, write.lease]);
      if (!held) return { kind: 'lost' };
      if (wait.kind === 'signal') {
        const [sent] = await rows(client, this.sql.consumeOldest, [write.id, wait.name, wait.key]);
        if (sent) {
          // The signal came first: this wait consumes it and the handler goes on, still running.
          await client.query(this.sql.saveJournal, [write.id, journal]);
          return { kind: 'signalled', payload: parseJson(sent[0], null) };
        }
      }
      // The row is locked and running under this lease: the compare-and-swap applies.
      if (!(await this.apply(client, [write])).has(write.id)) return { kind: 'lost' };
      let created = 0;
      if (children.length > 0) for (const r of await this.host.insertOn(children, client)) if (r.kind === 'created') created++;
      await client.query(this.sql.setWait, [
        write.id,
        journal,
        wait.kind,
        wait.kind === 'signal' ? wait.name : null,
        wait.kind === 'signal' ? wait.key : null,
        wait.kind === 'children' && wait.failFast,
        created,
      ]);
      return { kind: 'suspended' };
    });
  }

  async saveWorkflow(params: LeaseRef & { workflow: WorkflowState; now: number }): Promise<boolean> {
    if (!isUuid(params.id)) return false;
    const res = await this.host.pool.query(this.sql.saveWorkflow, [params.id, params.lease, JSON.stringify(params.workflow)]);
    return res.rowCount === 1;
  }

  async resumeParents(params: { parents: ReadonlyArray<{ id: string; childFailed: boolean }>; at: number }): Promise<ResumedJob[]> {
    const failed = new Map<string, boolean>();
    for (const p of params.parents) if (isUuid(p.id)) failed.set(p.id, (failed.get(p.id) ?? false) || p.childFailed);
    if (failed.size === 0) return [];
    // Locked, the parents cannot be resumed, claimed and suspended again by anyone else between
    // reading why they may resume and the compare-and-swap; a second caller waits for the lock,
    // then finds them queued.
    const childFailed = [...failed].filter(([, f]) => f).map(([id]) => id);
    return this.resume(this.sql.lockParents, [[...failed.keys()], childFailed], params.at);
  }

  async resumeStrandedParents(params: { at: number; limit: number }): Promise<ResumedJob[]> {
    const limit = Math.max(0, Math.floor(params.limit));
    if (limit === 0) return [];
    return this.resume(this.sql.lockStranded, [limit], params.at);
  }

  /**
   * Locks parents with `lockSql` (rows: id, tenant, type, reason or null) and queues those with a
   * reason; those queued for 'child failed' have their open children stopped in the same
   * apply_transitions call (store/fail-fast.ts), whatever their number: one statement to read and
   * lock them, none per child. A parent that is itself stopped as a sibling is not queued, and its
   * own children are left to the caller's cascade (as SQLite leaves them).
   */
  private resume(lockSql: string, values: unknown[], at: number): Promise<ResumedJob[]> {
    return this.host.inTransaction(async (client) => {
      let found = (await rows(client, lockSql, values)).filter((r) => r[3] !== null);
      if (found.length === 0) return [];
      const failing = found.filter((r) => r[3] === CHILD_FAILED).map((r) => r[0] as string);
      const stopped = failing.length > 0 ? await this.openSiblings(client, failing, at) : new Map<string, StoppedSibling[]>();
      const stoppedIds = new Set<string>();
      for (const list of stopped.values()) for (const s of list) stoppedIds.add(s.job.id);
      if (stoppedIds.size > 0) {
        found = found.filter((r) => !stoppedIds.has(r[0] as string));
        for (const id of stopped.keys()) if (stoppedIds.has(id)) stopped.delete(id);
      }
      const siblings = [...stopped.values()].flat();
      const applied = await this.apply(client, [...found.map((r) => resumeWrite(r[0] as string, at, r[3] as string)), ...siblings.map((s) => s.write)]);
      return found
        .filter((r) => applied.has(r[0] as string))
        .map((r) => {
          const id = r[0] as string;
          const resumed: ResumedJob = { id, tenant: r[1] as string, type: r[2] as string, reason: r[3] as string };
          const mine = stopped.get(id)?.filter((s) => applied.has(s.job.id));
          if (mine && mine.length > 0) resumed.stopped = mine;
          return resumed;
        });
    });
  }

  /** Reads and locks the open children of `parents` (each with a failed child), and builds the writes that stop them, by parent. */
  private async openSiblings(client: pg.ClientBase, parents: string[], at: number): Promise<Map<string, StoppedSibling[]>> {
    const out = new Map<string, StoppedSibling[]>();
    for (const r of await rows(client, this.sql.lockSiblings, [parents])) {
      const [id, tenant, type, state, lease, cancelRequested, childrenTotal, parentId, failedId, failedState] = r as [
        string,
        string,
        string,
        JobState,
        number,
        boolean,
        number,
        string,
        string,
        string,
      ];
      const s = stopSibling({ id, tenant, type, parentId, state, lease, cancelRequested, childrenTotal }, at, siblingFailedReason({ id: failedId, state: failedState }));
      if (!s) continue;
      const list = out.get(parentId);
      if (list) list.push(s);
      else out.set(parentId, [s]);
    }
    return out;
  }

  async sendSignal(params: { id: string; tenant?: string; name: string; payload: unknown; at: number }): Promise<SignalResult> {
    if (!isUuid(params.id)) return { kind: 'not-found' };
    return this.host.inTransaction(async (client): Promise<SignalResult> => {
      const [job] = await rows(client, this.sql.lockForSignal, [params.id]);
      if (!job || (params.tenant !== undefined && job[0] !== params.tenant)) return { kind: 'not-found' };
      const [tenant, type, state, waitKind, waitName, waitKey] = job as [string, string, JobState, string | null, string | null, string | null];
      if (TERMINAL_STATES.has(state)) return { kind: 'ended', state };
      const reason = `signal ${params.name}`;
      // Waiting for this very signal: consumed by that wait now. Otherwise (not waiting, waiting
      // for something else, or a wait that already timed out and was queued) kept for the next wait.
      const resumes = state === 'waiting' && waitKind === 'signal' && waitName === params.name;
      await client.query(this.sql.insertSignal, [params.id, params.name, JSON.stringify(params.payload ?? null), params.at, resumes ? waitKey : null]);
      // The row is locked: the compare-and-swap applies (and wakes idle workers).
      if (resumes) await this.apply(client, [resumeWrite(params.id, params.at, reason)]);
      return { kind: 'accepted', job: { id: params.id, tenant, type }, resumed: resumes, reason };
    });
  }

  async consumedSignal(params: { id: string; key: string }): Promise<{ payload: unknown } | null> {
    if (!isUuid(params.id)) return null;
    const [row] = await rows(this.host.pool, this.sql.consumed, [params.id, params.key]);
    return row ? { payload: parseJson(row[0], null) } : null;
  }

  async countChildren(params: { id: string }): Promise<Record<JobState, number>> {
    const out = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    for (const [state, n] of await rows(this.host.pool, this.sql.countChildren, [params.id])) out[state as JobState] = Number(n);
    return out;
  }
}

function statements(s: string) {
  const openChild = (parent: string) => `EXISTS (SELECT 1 FROM ${s}.jobs c WHERE c.parent_id = ${parent}::text AND c.state IN ${OPEN_STATES_SQL})`;
  const failedChild = (parent: string) => `EXISTS (SELECT 1 FROM ${s}.jobs c WHERE c.parent_id = ${parent}::text AND c.state IN ('failed', 'cancelled'))`;
  return {
    apply: `SELECT ${s}.apply_transitions($1::json, $2)`,
    lockRunning: `SELECT 1 FROM ${s}.jobs WHERE id = $1 AND lease = $2 AND state = 'running' FOR UPDATE`,
    consumeOldest: `UPDATE ${s}.job_signals SET consumed_by = $3
      WHERE seq = (SELECT seq FROM ${s}.job_signals WHERE job_id = $1 AND name = $2 AND consumed_by IS NULL ORDER BY seq LIMIT 1)
      RETURNING payload::text`,
    saveJournal: `UPDATE ${s}.jobs SET workflow = $2::json WHERE id = $1`,
    setWait: `UPDATE ${s}.jobs SET workflow = $2::json, wait_kind = $3, wait_name = $4, wait_key = $5, wait_fail_fast = $6,
      children_total = children_total + $7 WHERE id = $1`,
    saveWorkflow: `UPDATE ${s}.jobs SET workflow = $3::json WHERE id = $1 AND lease = $2 AND state = 'running'`,
    // Parents listed by the caller ($2: those one of whose children just failed), each found by
    // its id (an index probe), with the reason to resume it, or null (an open child left: one
    // probe of the open-children index).
    lockParents: `SELECT p.id::text, p.tenant, p.type,
        CASE
          WHEN p.wait_fail_fast AND p.id = ANY($2::uuid[]) THEN 'child failed'
          WHEN NOT ${openChild('p.id')} THEN 'children done'
        END
      FROM ${s}.jobs p
      WHERE p.id = ANY($1::uuid[]) AND p.state = 'waiting' AND p.wait_kind = 'children'
      ORDER BY p.id
      FOR UPDATE OF p`,
    // Any parent in that case; one another transaction is resuming is skipped (it is being resumed).
    lockStranded: `SELECT p.id::text, p.tenant, p.type,
        CASE WHEN p.wait_fail_fast AND ${failedChild('p.id')} THEN 'child failed' ELSE 'children done' END
      FROM ${s}.jobs p
      WHERE p.state = 'waiting' AND p.wait_kind = 'children' AND ((p.wait_fail_fast AND ${failedChild('p.id')}) OR NOT ${openChild('p.id')})
      LIMIT $1
      FOR UPDATE OF p SKIP LOCKED`,
    // The open children of the parents $1 (woken by a failed child), locked in id order (as
    // apply_transitions locks), each with the child whose failure woke its parent: the last to
    // end failed or cancelled (jobs_failed_children). A parent with no such child (retried since)
    // has none stopped.
    lockSiblings: `WITH failed AS (
        SELECT DISTINCT ON (f.parent_id) f.parent_id, f.id, f.state FROM ${s}.jobs f
        WHERE f.parent_id = ANY($1::text[]) AND f.state IN ('failed', 'cancelled')
        ORDER BY f.parent_id, f.finished_at DESC NULLS LAST, f.id DESC
      )
      SELECT c.id::text, c.tenant, c.type, c.state, c.lease, c.cancel_requested, c.children_total, c.parent_id, failed.id::text, failed.state
      FROM failed JOIN ${s}.jobs c ON c.parent_id = failed.parent_id AND c.state IN ${OPEN_STATES_SQL}
      ORDER BY c.id
      FOR UPDATE OF c`,
    lockForSignal: `SELECT tenant, type, state, wait_kind, wait_name, wait_key FROM ${s}.jobs WHERE id = $1 FOR UPDATE`,
    insertSignal: `INSERT INTO ${s}.job_signals (job_id, name, payload, sent_at, consumed_by) VALUES ($1, $2, $3::json, $4, $5)`,
    consumed: `SELECT payload::text FROM ${s}.job_signals WHERE job_id = $1 AND consumed_by = $2 LIMIT 1`,
    countChildren: `SELECT state, count(*)::integer FROM ${s}.jobs WHERE parent_id = $1 GROUP BY state`,
  };
}
