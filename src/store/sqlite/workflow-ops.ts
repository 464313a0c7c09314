/**
 * SqliteStore's part of the workflow contract (WorkflowStore in ../store.ts): suspending a
 * running job, waking it again, signals and children. Every write is one IMMEDIATE transaction
 * of the store (one writer at a time), so reading a row and then writing it is safe without row
 * locks; state changes go through the store's compare-and-swap transitions (transitions.ts) and
 * children through its insert, so each carries its log entry exactly as any other write does.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { JOB_STATES, type JobState, TERMINAL_STATES } from '../../core/states.js';
import type { WorkflowState } from '../../core/workflow.js';
import { CHILD_FAILED, siblingFailedReason, stopSibling } from '../fail-fast.js';
import { parseJson } from '../job-row.js';
import type { InsertResult, LeaseRef, NewJob, ResumedJob, SignalResult, StoppedSibling, SuspendParams, SuspendResult, TransitionParams } from '../store.js';
import { checkSuspend } from '../suspend-check.js';
import { arrays, statementCache } from './sql.js';
import type { Transitions } from './transitions.js';

/** States in which a child still counts as open: its parent waits for it. */
export const OPEN_STATES_SQL = "('pending', 'queued', 'running', 'retrying', 'waiting')";

/** The store's IMMEDIATE transaction (`rows`: about how many rows it writes, for the checkpointer). */
type Write = <T>(fn: () => T, rows?: number) => T;

function json(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value);
}

/** waiting → queued for a parent or a signalled job: a compare-and-swap on the state, like any transition. */
function resumeWrite(id: string, at: number, reason: string): TransitionParams {
  return { id, from: 'waiting', to: 'queued', reason, at, patch: { runAt: at } };
}

// Both the open-child probe and the stranded-parent scan name the partial indexes' exact
// conditions: SQLite uses a partial index only when the query repeats its WHERE terms.
export const OPEN_CHILD_SQL = `SELECT 1 FROM jobs c WHERE c.parent_id = ? AND c.state IN ${OPEN_STATES_SQL} LIMIT 1`;

/**
 * The child whose failure woke a fail-fast parent: the last of its children to end failed or
 * cancelled (few by nature: the partial index jobs_failed_children, then a sort of those).
 */
export const FAILED_CHILD_SQL = `SELECT id, state FROM jobs WHERE parent_id = ? AND state IN ('failed', 'cancelled') ORDER BY +finished_at DESC, id DESC LIMIT 1`;

/** A parent's open children, to stop them (the partial index jobs_open_children). */
export const OPEN_SIBLINGS_SQL = `SELECT id, tenant, type, state, lease, cancel_requested, children_total FROM jobs WHERE parent_id = ? AND state IN ${OPEN_STATES_SQL}`;

/** Waiting parents that can be resumed, with the reason: a failFast wait with a failed child, or no open child left. */
export const STRANDED_PARENTS_SQL = `
  SELECT id, tenant, type, reason FROM (
    SELECT p.id, p.tenant, p.type,
      CASE
        WHEN p.wait_fail_fast = 1 AND EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = p.id AND c.state IN ('failed', 'cancelled')) THEN 'child failed'
        WHEN NOT EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = p.id AND c.state IN ${OPEN_STATES_SQL}) THEN 'children done'
      END AS reason
    FROM jobs p WHERE p.state = 'waiting' AND p.wait_kind = 'children'
  ) WHERE reason IS NOT NULL LIMIT ?`;

export class SqliteWorkflowOps {
  /** The store's statement cache (same connection). */
  private readonly stmt: (sql: string) => StatementSync;

  constructor(
    db: DatabaseSync,
    private readonly transitions: Transitions,
    private readonly write: Write,
    /** The store's insert of one job (idempotency keys honoured; no backlog limit for children). */
    private readonly insert: (job: NewJob) => InsertResult,
  ) {
    this.stmt = statementCache(db);
  }

  async suspend(params: SuspendParams): Promise<SuspendResult> {
    const { write, wait } = params;
    const children = params.children ?? [];
    checkSuspend(params);
    const journal = JSON.stringify(params.workflow);
    return this.write(() => {
      if (!this.stmt("SELECT 1 FROM jobs WHERE id = ? AND lease = ? AND state = 'running'").get(write.id, write.lease as number)) return { kind: 'lost' };
      if (wait.kind === 'signal') {
        const sent = this.stmt('SELECT seq, payload FROM job_signals WHERE job_id = ? AND name = ? AND consumed_by IS NULL ORDER BY seq LIMIT 1').get(
          write.id,
          wait.name,
        ) as { seq: number; payload: string | null } | undefined;
        if (sent) {
          // The signal came first: this wait consumes it and the handler goes on, still running.
          this.stmt('UPDATE job_signals SET consumed_by = ? WHERE seq = ?').run(wait.key, sent.seq);
          this.stmt('UPDATE jobs SET workflow = ? WHERE id = ?').run(journal, write.id);
          return { kind: 'signalled', payload: parseJson(sent.payload, null) };
        }
      }
      if (!this.transitions.apply(write)) return { kind: 'lost' };
      let created = 0;
      for (const child of children) if (this.insert(child).kind === 'created') created++;
      this.stmt(
        'UPDATE jobs SET workflow = ?, wait_kind = ?, wait_name = ?, wait_key = ?, wait_fail_fast = ?, children_total = children_total + ? WHERE id = ?',
      ).run(
        journal,
        wait.kind,
        wait.kind === 'signal' ? wait.name : null,
        wait.kind === 'signal' ? wait.key : null,
        wait.kind === 'children' && wait.failFast ? 1 : 0,
        created,
        write.id,
      );
      return { kind: 'suspended' };
    }, 2 + children.length);
  }

  async saveWorkflow(params: LeaseRef & { workflow: WorkflowState; now: number }): Promise<boolean> {
    return this.write(
      () =>
        this.stmt("UPDATE jobs SET workflow = ? WHERE id = ? AND lease = ? AND state = 'running'").run(JSON.stringify(params.workflow), params.id, params.lease)
          .changes === 1,
    );
  }

  async resumeParents(params: { parents: ReadonlyArray<{ id: string; childFailed: boolean }>; at: number }): Promise<ResumedJob[]> {
    if (params.parents.length === 0) return [];
    // A parent listed twice is read once, woken for a failed child if either entry says so.
    let failed: Map<string, boolean> | null = null;
    if (params.parents.length > 1) {
      failed = new Map();
      for (const p of params.parents) failed.set(p.id, (failed.get(p.id) ?? false) || p.childFailed);
    }
    const listed = failed ? [...failed].map(([id, childFailed]) => ({ id, childFailed })) : params.parents;
    return this.write(() => {
      const found: Omit<ResumedJob, 'stopped'>[] = [];
      for (const { id, childFailed } of listed) {
        const parent = this.stmt("SELECT tenant, type, wait_fail_fast FROM jobs WHERE id = ? AND state = 'waiting' AND wait_kind = 'children'").get(id) as
          | { tenant: string; type: string; wait_fail_fast: number }
          | undefined;
        if (!parent) continue;
        let reason: string | null = null;
        if (parent.wait_fail_fast === 1 && childFailed) reason = CHILD_FAILED;
        else if (this.stmt(OPEN_CHILD_SQL).get(id) === undefined) reason = 'children done';
        if (reason !== null) found.push({ id, tenant: parent.tenant, type: parent.type, reason });
      }
      return this.resume(found, params.at);
    }, params.parents.length);
  }

  async resumeStrandedParents(params: { at: number; limit: number }): Promise<ResumedJob[]> {
    const limit = Math.max(0, Math.floor(params.limit));
    if (limit === 0) return [];
    return this.write(() => this.resume(this.stmt(STRANDED_PARENTS_SQL).all(limit) as { id: string; tenant: string; type: string; reason: string }[], params.at));
  }

  /**
   * Inside the write: queues the `found` parents again; those queued for 'child failed' have
   * their open children stopped too (store/fail-fast.ts). As on PostgreSQL, the siblings are read
   * first: a parent that is itself stopped as a sibling is not queued, and its own children are
   * left to the caller's cascade. One writer at a time: what was just read still holds, so each
   * compare-and-swap applies.
   */
  private resume(found: readonly Omit<ResumedJob, 'stopped'>[], at: number): ResumedJob[] {
    let stopped: Map<string, StoppedSibling[]> | null = null;
    const stoppedIds = new Set<string>();
    for (const p of found) {
      if (p.reason !== CHILD_FAILED) continue;
      const list = this.openSiblings(p.id, at);
      if (list.length === 0) continue;
      stopped ??= new Map();
      stopped.set(p.id, list);
      for (const s of list) stoppedIds.add(s.job.id);
    }
    const resumed: ResumedJob[] = [];
    for (const p of found) {
      if (stoppedIds.has(p.id) || !this.transitions.apply(resumeWrite(p.id, at, p.reason))) continue;
      const list = stopped?.get(p.id);
      if (list) this.stop(p.id, list);
      resumed.push(list ? { ...p, stopped: list } : p);
    }
    return resumed;
  }

  /**
   * Writes `list`, the siblings just read under `parentId`: those no worker holds in one
   * statement (they share one write but for their state), running ones one by one (a cancel
   * request under each one's lease; a parent has few running children).
   */
  private stop(parentId: string, list: readonly StoppedSibling[]): void {
    let idle: StoppedSibling | undefined;
    let idleCount = 0;
    for (const s of list) {
      if (s.write.from !== 'running') {
        idle ??= s;
        idleCount++;
      } else if (!this.transitions.apply(s.write)) throw new Error(`fail-fast: the running child ${s.job.id} changed within the write`);
    }
    if (idle === undefined) return;
    const changed = this.transitions.applyToIdleChildren(parentId, idle.write);
    // One writer at a time: the rows just read are the rows written. Anything else is a bug, and rolls back.
    if (changed !== idleCount) throw new Error(`fail-fast: ${changed} children of ${parentId} cancelled, ${idleCount} expected`);
  }

  /** The writes that stop the open children of `parentId` (a running one: a cancel request), naming the child that failed. */
  private openSiblings(parentId: string, at: number): StoppedSibling[] {
    const failed = this.stmt(FAILED_CHILD_SQL).get(parentId) as { id: string; state: string } | undefined;
    if (!failed) return []; // retried since: nothing failed any more
    const reason = siblingFailedReason(failed);
    const rows = arrays(this.stmt(OPEN_SIBLINGS_SQL)).all(parentId) as unknown as [string, string, string, JobState, number, number, number][];
    const out: StoppedSibling[] = [];
    for (const [id, tenant, type, state, lease, cancelRequested, childrenTotal] of rows) {
      const s = stopSibling({ id, tenant, type, parentId, state, lease, cancelRequested: cancelRequested === 1, childrenTotal }, at, reason);
      if (s) out.push(s);
    }
    return out;
  }

  async sendSignal(params: { id: string; tenant?: string; name: string; payload: unknown; at: number }): Promise<SignalResult> {
    return this.write((): SignalResult => {
      const job = this.stmt('SELECT tenant, type, state, wait_kind, wait_name, wait_key FROM jobs WHERE id = ?').get(params.id) as
        | { tenant: string; type: string; state: JobState; wait_kind: string | null; wait_name: string | null; wait_key: string | null }
        | undefined;
      if (!job || (params.tenant !== undefined && job.tenant !== params.tenant)) return { kind: 'not-found' };
      if (TERMINAL_STATES.has(job.state)) return { kind: 'ended', state: job.state };
      const reason = `signal ${params.name}`;
      // Waiting for this very signal: consumed by that wait now. Otherwise (not waiting, waiting
      // for something else, or a wait that already timed out and was queued) kept for the next wait.
      const resumes = job.state === 'waiting' && job.wait_kind === 'signal' && job.wait_name === params.name;
      this.stmt('INSERT INTO job_signals (job_id, name, payload, sent_at, consumed_by) VALUES (?, ?, ?, ?, ?)').run(
        params.id,
        params.name,
        json(params.payload),
        params.at,
        resumes ? job.wait_key : null,
      );
      // One writer at a time: the state just read still holds, the CAS cannot lose.
      if (resumes) this.transitions.apply(resumeWrite(params.id, params.at, reason));
      return { kind: 'accepted', job: { id: params.id, tenant: job.tenant, type: job.type }, resumed: resumes, reason };
    });
  }

  async consumedSignal(params: { id: string; key: string }): Promise<{ payload: unknown } | null> {
    const row = this.stmt('SELECT payload FROM job_signals WHERE job_id = ? AND consumed_by = ? LIMIT 1').get(params.id, params.key) as
      | { payload: string | null }
      | undefined;
    return row ? { payload: parseJson(row.payload, null) } : null;
  }

  async countChildren(params: { id: string }): Promise<Record<JobState, number>> {
    const rows = arrays(this.stmt('SELECT state, count(*) FROM jobs WHERE parent_id = ? GROUP BY state')).all(params.id) as unknown as [JobState, number][];
    const out = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    for (const [state, n] of rows) out[state] = n;
    return out;
  }
}
