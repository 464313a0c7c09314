/**
 * Compare-and-swap transitions: one UPDATE per shape of TransitionParams (which patch fields
 * and expectations it carries), compiled once per shape and cached by a bit mask.
 */
import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite';
import { assertTransition } from '../../core/states.js';
import { endsRecordedAttempt } from '../../core/transitions.js';
import type { TransitionParams } from '../store.js';
import { type Compiled, compile, logEntrySql, NEXT_UPDATED_AT } from './sql.js';
import type { StatsBatch } from './stats-batch.js';

const RUN_AT = 1;
const RESULT = 2;
const ERROR = 4;
const FINISHED_AT = 8;
const EXPIRES_AT = 16;
const RESET_ATTEMPTS = 32;
const REFUND_ATTEMPT = 64;
const CLEAR_CHECKPOINT = 128;
const CANCEL_SET = 256;
const CANCEL_CLEAR = 512;
const STALLED = 1024;
const EXPECT_LEASE = 2048;
const EXPECT_CANCEL = 4096;
/** A running job's transition counts itself (stats-batch.ts): it marks the row and returns what the stats need. */
const OWN_STATS = 8192;
/** Applied to the children of the job `@id` that no worker holds, each from its own state (applyToIdleChildren). */
const IDLE_CHILDREN = 16384;

/** The states of a child that no worker holds, which applyToIdleChildren writes. */
const IDLE_STATES = ['pending', 'queued', 'retrying', 'waiting'] as const;

function shapeOf(p: TransitionParams): number {
  let shape = (p.lease !== undefined ? EXPECT_LEASE : 0) | (p.cancelRequested !== undefined ? EXPECT_CANCEL : 0) | (p.from === 'running' ? OWN_STATS : 0);
  const patch = p.patch;
  if (patch === undefined) return shape;
  if (patch.runAt !== undefined) shape |= RUN_AT;
  if (patch.result !== undefined) shape |= RESULT;
  if (patch.error !== undefined) shape |= ERROR;
  if (patch.finishedAt !== undefined) shape |= FINISHED_AT;
  if (patch.expiresAt !== undefined) shape |= EXPIRES_AT;
  if (patch.resetAttempts) shape |= RESET_ATTEMPTS;
  else if (patch.refundAttempt) shape |= REFUND_ATTEMPT;
  if (patch.clearCheckpoint) shape |= CLEAR_CHECKPOINT;
  if (patch.cancelRequest) shape |= CANCEL_SET;
  else if (patch.cancelRequest === false) shape |= CANCEL_CLEAR;
  if (patch.stalled !== undefined) shape |= STALLED;
  return shape;
}

function json(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value);
}

/** Every parameter a transition statement may use; a shape's statement binds only those it names. */
const PARAMS: Readonly<Record<string, (p: TransitionParams) => SQLInputValue>> = {
  id: (p) => p.id,
  from: (p) => p.from,
  to: (p) => p.to,
  at: (p) => p.at,
  reason: (p) => p.reason,
  worker: (p) => p.workerId ?? null,
  runAt: (p) => p.patch?.runAt ?? null,
  result: (p) => json(p.patch?.result),
  error: (p) => json(p.patch?.error),
  errorCode: (p) => p.patch?.error?.code ?? null,
  finishedAt: (p) => p.patch?.finishedAt ?? null,
  expiresAt: (p) => p.patch?.expiresAt ?? null,
  cancelReason: (p) => (p.patch?.cancelRequest ? p.patch.cancelRequest.reason : null),
  stalled: (p) => (p.patch?.stalled ? 1 : 0),
  lease: (p) => p.lease ?? null,
  expectCancel: (p) => (p.cancelRequested ? 1 : 0),
};

function sqlOf(shape: number): string {
  const sets = ['state = @to', `updated_at = ${NEXT_UPDATED_AT}`];
  let attempt = 'attempts';
  if (shape & RUN_AT) sets.push('run_at = @runAt');
  if (shape & RESULT) sets.push('result = @result');
  if (shape & ERROR) sets.push('error = @error', 'error_code = @errorCode');
  if (shape & FINISHED_AT) sets.push('finished_at = @finishedAt');
  if (shape & EXPIRES_AT) sets.push('expires_at = @expiresAt');
  if (shape & RESET_ATTEMPTS) {
    sets.push('attempts = 0');
    attempt = '0';
  } else if (shape & REFUND_ATTEMPT) {
    sets.push('attempts = max(attempts - 1, 0)');
    attempt = 'max(attempts - 1, 0)';
  }
  if (shape & CLEAR_CHECKPOINT) sets.push('checkpoint = NULL');
  if (shape & CANCEL_SET) sets.push('cancel_requested = 1', 'cancel_reason = @cancelReason', 'cancel_requested_at = @at');
  else if (shape & CANCEL_CLEAR) sets.push('cancel_requested = 0', 'cancel_reason = NULL', 'cancel_requested_at = NULL');
  if (shape & STALLED) sets.push('stalled = @stalled');
  // (A SET expression reads the row as it was: `state` is each child's own state before the write.)
  sets.push(`log = ${logEntrySql(shape & IDLE_CHILDREN ? 'state' : '@from', '@to', attempt, '@reason', '@worker')}`);
  if (shape & OWN_STATS) sets.push('stats_seq = stats_seq + 1');
  const where = shape & IDLE_CHILDREN ? ['parent_id = @id', `state IN (${IDLE_STATES.map((x) => `'${x}'`).join(', ')})`] : ['id = @id', 'state = @from'];
  if (shape & EXPECT_LEASE) where.push('lease = @lease');
  if (shape & EXPECT_CANCEL) where.push('cancel_requested = @expectCancel');
  return `UPDATE jobs SET ${sets.join(', ')} WHERE ${where.join(' AND ')}${shape & OWN_STATS ? ' RETURNING tenant, type, started_at' : ''}`;
}

/** Refuses what core does not allow; stores call this for every item before writing any. */
export function checkTransition(p: TransitionParams): void {
  assertTransition(p.from, p.to);
  if (p.to === 'running' && p.from !== 'running') throw new Error('a job enters running only through claimJobs');
}

/**
 * A job ended by a `deleteOnEnd` write is deleted instead of updated (the same compare-and-swap)
 * when it owns nothing the eraser must handle: no result files, no webhook target or deliveries,
 * no parent, no children. Each NOT EXISTS is one index probe.
 */
export const DELETE_ON_END_SQL = `DELETE FROM jobs
  WHERE id = ? AND state = ? AND (? IS NULL OR lease = ?) AND (? IS NULL OR cancel_requested = ?) AND parent_id IS NULL
    AND NOT EXISTS (SELECT 1 FROM job_results r WHERE r.job_id = jobs.id)
    AND NOT EXISTS (SELECT 1 FROM job_webhooks w WHERE w.job_id = jobs.id)
    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.job_id = jobs.id)
    AND NOT EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = jobs.id)`;

const ENDS = new Set(['succeeded', 'failed', 'cancelled']);

export class Transitions {
  private readonly byShape = new Map<number, Compiled<TransitionParams>>();
  private dropProgress: StatementSync | null = null;
  private deleteOnEnd: StatementSync | null = null;
  private deleteDependents: StatementSync[] | null = null;
  private recordAttempt: StatementSync | null = null;

  /** Statements are prepared on first use: the tables exist only once the store migrated. */
  constructor(
    private readonly db: DatabaseSync,
    private readonly stats: StatsBatch,
  ) {}

  private compiled(shape: number): Compiled<TransitionParams> {
    let compiled = this.byShape.get(shape);
    if (!compiled) {
      compiled = compile(this.db, sqlOf(shape), PARAMS);
      this.byShape.set(shape, compiled);
    }
    return compiled;
  }

  /**
   * Applies `p` to every child of `parentId` that no worker holds (pending, queued, retrying,
   * waiting), in one statement, inside the caller's write transaction: each child's log entry
   * comes from its own state, whatever `p.from` says. For writes that end no attempt and need no
   * lease (a fail-fast parent's siblings cancelled: store/fail-fast.ts). Returns how many changed.
   */
  applyToIdleChildren(parentId: string, p: TransitionParams): number {
    for (const from of IDLE_STATES) assertTransition(from, p.to);
    if (p.to === 'running' || p.to === 'expired' || p.lease !== undefined || p.cancelRequested !== undefined || p.deleteOnEnd) {
      throw new Error('applyToIdleChildren writes no lease-holder transition, claim, expiry or deletion');
    }
    const compiled = this.compiled(shapeOf(p) | IDLE_CHILDREN);
    return Number(compiled.stmt.run(...compiled.args({ ...p, id: parentId })).changes);
  }

  /** Applies one checked transition inside the caller's write transaction; false when the CAS lost. */
  apply(p: TransitionParams): boolean {
    const shape = shapeOf(p);
    const compiled = this.compiled(shape);
    let applied: boolean;
    if (shape & OWN_STATS) {
      const row = compiled.stmt.get(...compiled.args(p)) as { tenant: string; type: string; started_at: number | null } | undefined;
      applied = row !== undefined;
      if (row) {
        this.stats.moved(row.tenant, row.type, p.from, p.to);
        // A running job's finished_at is NULL (the claim clears it): setting one is an end.
        const finishedAt = p.patch?.finishedAt;
        if (finishedAt !== undefined && finishedAt !== null) this.stats.ended(row.tenant, row.type, p.to, finishedAt, row.started_at === null ? null : Number(row.started_at));
      }
    } else applied = compiled.stmt.run(...compiled.args(p)).changes === 1;
    if (applied && p.to === 'expired') {
      this.dropProgress ??= this.db.prepare('DELETE FROM job_progress WHERE job_id = ?');
      this.dropProgress.run(p.id);
    }
    if (applied && endsRecordedAttempt(p)) this.attemptEnded(p);
    return applied;
  }

  /**
   * Applies a `deleteOnEnd` write by deleting the job (see DELETE_ON_END_SQL) when it may be:
   * true when it was; false when the write is to be applied as usual (`apply`), because the CAS
   * lost or the job owns rows the eraser must handle. Its dependents go with `dropDependents`.
   */
  tryDelete(p: TransitionParams): boolean {
    if (!p.deleteOnEnd || !ENDS.has(p.to)) return false;
    this.deleteOnEnd ??= this.db.prepare(DELETE_ON_END_SQL);
    const lease = p.lease ?? null;
    const cancel = p.cancelRequested === undefined ? null : p.cancelRequested ? 1 : 0;
    return this.deleteOnEnd.run(p.id, p.from, lease, lease, cancel, cancel).changes === 1;
  }

  /** The progress, signals and attempt history of jobs deleted on their end (they have no other rows: see tryDelete). */
  dropDependents(ids: readonly string[]): void {
    if (ids.length === 0) return;
    this.deleteDependents ??= [
      this.db.prepare('DELETE FROM job_progress WHERE job_id IN (SELECT value FROM json_each(?))'),
      this.db.prepare('DELETE FROM job_signals WHERE job_id IN (SELECT value FROM json_each(?))'),
      this.db.prepare('DELETE FROM job_attempts WHERE job_id IN (SELECT value FROM json_each(?))'),
    ];
    const json = JSON.stringify(ids);
    for (const st of this.deleteDependents) st.run(json);
  }

  /**
   * Records the attempt `p` ended (the attempt history, DeadLetterStore), in the same transaction.
   * Read from the row just updated: its lease, worker and start are the attempt's; a refunded
   * attempt (a hand-back, a wait) keeps its number.
   */
  private attemptEnded(p: TransitionParams): void {
    this.recordAttempt ??= this.db.prepare(
      `INSERT INTO job_attempts (job_id, lease, attempt, worker_id, started_at, ended_at, outcome, reason, error, stack)
       SELECT id, lease, attempts + ?, worker_id, started_at, ?, ?, ?, ?, ? FROM jobs WHERE id = ?
       ON CONFLICT DO NOTHING`,
    );
    const patch = p.patch;
    this.recordAttempt.run(patch?.refundAttempt ? 1 : 0, p.at, p.to, p.reason, json(patch?.error), patch?.stack ?? null, p.id);
  }
}
