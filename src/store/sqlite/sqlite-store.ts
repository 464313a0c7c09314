/**
 * The embedded store: one SQLite file through better-sqlite3, in WAL mode.
 *
 * Durability: WAL with synchronous=NORMAL. A committed transaction is in the WAL before the
 * call returns, so it survives `kill -9` of any process; only an OS crash or power loss can
 * drop the last transactions (use `synchronous: 'full'` to rule that out too).
 *
 * Several processes may share one file: every write is an IMMEDIATE transaction (one writer
 * at a time, waiting up to busyTimeoutMs), so claims and per-type concurrency limits are
 * exact across processes.
 */
import Database from 'better-sqlite3';
import type { JobError } from '../../core/errors.js';
import { uuidv7Floor } from '../../core/ids.js';
import { type Checkpoint, type JobRecord, priorityName, priorityRank, type TransitionEntry } from '../../core/job.js';
import { EMPTY_PROGRESS, type Progress } from '../../core/progress.js';
import { assertTransition, JOB_STATES, type JobState } from '../../core/states.js';
import type {
  Activity,
  ActivityParams,
  ClaimParams,
  GetJobParams,
  HeartbeatResult,
  InsertJobParams,
  InsertResult,
  JobPage,
  JobPatch,
  LeaseRef,
  ListJobsParams,
  NewJob,
  Store,
  SweepParams,
  TransitionParams,
} from '../store.js';
import { MIGRATIONS } from './schema.js';

export interface SqliteStoreOptions {
  /** File path, or ':memory:' (single process only). */
  path: string;
  busyTimeoutMs?: number;
  synchronous?: 'normal' | 'full';
}

/** Job rows are read in raw (array) mode: building a 33-property object per row costs twice the query. */
const COLUMNS = [
  'id',
  'tenant',
  'type',
  'state',
  'priority',
  'input',
  'metadata',
  'result',
  'error',
  'attempts',
  'max_attempts',
  'lease',
  'worker_id',
  'cancel_requested',
  'cancel_reason',
  'cancel_requested_at',
  'stalled',
  'parent_id',
  'created_at',
  'started_at',
  'finished_at',
  'updated_at',
  'run_at',
  'expires_at',
  'heartbeat_at',
  'timeout_ms',
  'heartbeat_timeout_ms',
  'stall_timeout_ms',
  'result_ttl_ms',
  'checkpoint',
  'idempotency_key',
  'request_hash',
] as const;
const C = Object.fromEntries(COLUMNS.map((c, i) => [c, i])) as Record<(typeof COLUMNS)[number], number>;
const PROGRESS = COLUMNS.length;
const JOB_COLUMNS = `${COLUMNS.map((c) => `j.${c}`).join(', ')}, (SELECT p.data FROM job_progress p WHERE p.job_id = j.id) AS progress`;

/**
 * A job's visible change sequence (SSE ids) is max(updated_at, progress time): every write
 * moves updated_at strictly past both, so two changes of one job never share a sequence.
 */
const NEXT_UPDATED_AT = 'max(@at, updated_at + 1, coalesce((SELECT p.updated_at FROM job_progress p WHERE p.job_id = jobs.id), 0) + 1)';

/** Appends one entry to the JSON array in `log` by string surgery (json_insert would re-parse the whole log). */
function logEntrySql(from: string, to: string, attempt: string, reason: string, worker: string): string {
  return `substr(log, 1, length(log) - 1) || CASE WHEN log = '[]' THEN '' ELSE ',' END
    || json_object('from', ${from}, 'to', ${to}, 'at', @at, 'reason', ${reason}, 'attempt', ${attempt}, 'workerId', ${worker}) || ']'`;
}

function json(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value);
}

function parseJson<T>(text: unknown, fallback: T): T {
  if (typeof text !== 'string') return fallback;
  return JSON.parse(text) as T;
}

function parseCheckpoint(text: unknown): Checkpoint | null {
  if (typeof text !== 'string') return null;
  try {
    const value = JSON.parse(text) as { version?: unknown; data?: unknown };
    if (typeof value !== 'object' || value === null || typeof value.version !== 'number') return { version: Number.NaN, data: null, corrupt: true };
    return { version: value.version, data: value.data };
  } catch {
    return { version: Number.NaN, data: null, corrupt: true };
  }
}

function num(v: unknown): number | null {
  return v === null || v === undefined ? null : Number(v);
}

export function rowToJob(r: unknown[]): JobRecord {
  return {
    id: r[C.id] as string,
    tenant: r[C.tenant] as string,
    type: r[C.type] as string,
    state: r[C.state] as JobState,
    priority: priorityName(Number(r[C.priority])),
    input: parseJson(r[C.input], null),
    metadata: parseJson(r[C.metadata], null),
    result: parseJson(r[C.result], null),
    error: parseJson<JobError | null>(r[C.error], null),
    attempts: Number(r[C.attempts]),
    maxAttempts: Number(r[C.max_attempts]),
    lease: Number(r[C.lease]),
    workerId: (r[C.worker_id] as string | null) ?? null,
    cancelRequested: Number(r[C.cancel_requested]) === 1,
    cancelReason: (r[C.cancel_reason] as string | null) ?? null,
    cancelRequestedAt: num(r[C.cancel_requested_at]),
    stalled: Number(r[C.stalled]) === 1,
    parentId: (r[C.parent_id] as string | null) ?? null,
    createdAt: Number(r[C.created_at]),
    startedAt: num(r[C.started_at]),
    finishedAt: num(r[C.finished_at]),
    updatedAt: Number(r[C.updated_at]),
    runAt: Number(r[C.run_at]),
    expiresAt: num(r[C.expires_at]),
    heartbeatAt: num(r[C.heartbeat_at]),
    timeoutMs: num(r[C.timeout_ms]),
    heartbeatTimeoutMs: Number(r[C.heartbeat_timeout_ms]),
    stallTimeoutMs: num(r[C.stall_timeout_ms]),
    resultTtlMs: Number(r[C.result_ttl_ms]),
    checkpoint: parseCheckpoint(r[C.checkpoint]),
    idempotencyKey: (r[C.idempotency_key] as string | null) ?? null,
    progress: parseJson<Progress>(r[PROGRESS], EMPTY_PROGRESS),
  };
}

function encodeCursor(id: string): string {
  return Buffer.from(id, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): string {
  const id = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!/^[0-9a-f-]{36}$/.test(id)) throw new Error('invalid cursor');
  return id;
}

export class SqliteStore implements Store {
  readonly dialect = 'sqlite' as const;
  readonly db: Database.Database;
  private readonly statements = new Map<string, Database.Statement>();
  private readonly jobStatements = new Map<string, Database.Statement>();
  private readonly transitionStatements = new Map<string, Database.Statement>();
  private lastDataVersion = -1;

  constructor(readonly options: SqliteStoreOptions) {
    this.db = new Database(options.path);
    this.db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 10_000}`);
    if (options.path !== ':memory:') this.db.pragma('journal_mode = WAL');
    this.db.pragma(`synchronous = ${options.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
    this.db.pragma('foreign_keys = ON');
    // A 64 MiB page cache and memory-mapped reads: without them every statement pays read() syscalls.
    this.db.pragma('cache_size = -65536');
    this.db.pragma('mmap_size = 268435456');
    this.db.pragma('temp_store = MEMORY');
    this.tx = this.db.transaction((fn: () => unknown) => fn());
  }

  /** A cached prepared statement; SQL shapes that vary are cached per shape. */
  private stmt(sql: string): Database.Statement {
    let s = this.statements.get(sql);
    if (!s) {
      s = this.db.prepare(sql);
      this.statements.set(sql, s);
    }
    return s;
  }

  /** One wrapper made once: db.transaction() compiles a new function on every call. */
  private readonly tx: Database.Transaction<(fn: () => unknown) => unknown>;

  /** A cached statement returning job rows as arrays (see COLUMNS). */
  private jobStmt(sql: string): Database.Statement {
    let st = this.jobStatements.get(sql);
    if (!st) {
      st = this.db.prepare(sql).raw(true);
      this.jobStatements.set(sql, st);
    }
    return st;
  }

  private write<T>(fn: () => T): T {
    return this.tx.immediate(fn) as T;
  }

  async migrate(): Promise<void> {
    this.write(() => {
      this.db.exec('CREATE TABLE IF NOT EXISTS longhaul_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)');
      const row = this.db.prepare("SELECT value FROM longhaul_meta WHERE key = 'schema_version'").get() as { value: string } | undefined;
      const current = row ? Number(row.value) : 0;
      if (current > MIGRATIONS.length) {
        throw new Error(`database schema version ${current} is newer than this Longhaul (${MIGRATIONS.length}); upgrade Longhaul`);
      }
      for (let v = current; v < MIGRATIONS.length; v++) this.db.exec(MIGRATIONS[v] as string);
      this.db
        .prepare("INSERT INTO longhaul_meta (key, value) VALUES ('schema_version', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        .run(String(MIGRATIONS.length));
    });
  }

  async schemaVersion(): Promise<number> {
    const row = this.db.prepare("SELECT value FROM longhaul_meta WHERE key = 'schema_version'").get() as { value: string } | undefined;
    return row ? Number(row.value) : 0;
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }

  // ---- submit -------------------------------------------------------------------------

  private insertOne(job: NewJob, maxBacklog: number | undefined): InsertResult {
    if (job.idempotencyKey !== null) {
      const existing = this.jobStmt(`SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.tenant = ? AND j.idempotency_key = ?`).get(job.tenant, job.idempotencyKey) as
        | unknown[]
        | undefined;
      if (existing) {
        return { kind: existing[C.request_hash] === job.requestHash ? 'existing' : 'conflict', job: rowToJob(existing) };
      }
    }
    if (maxBacklog !== undefined) {
      const backlog = this.stmt("SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE state IN ('pending', 'queued', 'retrying') LIMIT ?)").get(maxBacklog) as {
        n: number;
      };
      if (backlog.n >= maxBacklog) return { kind: 'full', backlog: backlog.n };
    }
    const log = JSON.stringify([{ from: null, to: job.state, at: job.createdAt, reason: 'submitted', attempt: 0, workerId: null }]);
    this.stmt(
      `INSERT INTO jobs (id, tenant, type, state, priority, input, metadata, max_attempts, run_at, created_at, updated_at,
        timeout_ms, heartbeat_timeout_ms, stall_timeout_ms, result_ttl_ms, parent_id, idempotency_key, request_hash, log)
       VALUES (@id, @tenant, @type, @state, @priority, @input, @metadata, @maxAttempts, @runAt, @createdAt, @createdAt,
        @timeoutMs, @heartbeatTimeoutMs, @stallTimeoutMs, @resultTtlMs, @parentId, @idempotencyKey, @requestHash, @log)`,
    ).run({
      id: job.id,
      tenant: job.tenant,
      type: job.type,
      state: job.state,
      priority: priorityRank(job.priority),
      input: json(job.input),
      metadata: json(job.metadata),
      maxAttempts: job.maxAttempts,
      runAt: job.runAt,
      createdAt: job.createdAt,
      timeoutMs: job.timeoutMs,
      heartbeatTimeoutMs: job.heartbeatTimeoutMs,
      stallTimeoutMs: job.stallTimeoutMs,
      resultTtlMs: job.resultTtlMs,
      parentId: job.parentId,
      idempotencyKey: job.idempotencyKey,
      requestHash: job.requestHash,
      log,
    });
    // The record as getJob reads it: NewJob's requestHash is stored but not part of a JobRecord.
    const { requestHash: _requestHash, ...fields } = job;
    return {
      kind: 'created',
      job: {
        ...fields,
        result: null,
        error: null,
        attempts: 0,
        lease: 0,
        workerId: null,
        cancelRequested: false,
        cancelReason: null,
        cancelRequestedAt: null,
        stalled: false,
        startedAt: null,
        finishedAt: null,
        updatedAt: job.createdAt,
        expiresAt: null,
        heartbeatAt: null,
        checkpoint: null,
        progress: EMPTY_PROGRESS,
      },
    };
  }

  async insertJob(params: InsertJobParams): Promise<InsertResult> {
    return this.write(() => this.insertOne(params.job, params.maxBacklog));
  }

  async insertJobs(params: { jobs: NewJob[]; maxBacklog?: number }): Promise<InsertResult[]> {
    return this.write(() => params.jobs.map((job) => this.insertOne(job, params.maxBacklog)));
  }

  // ---- reads --------------------------------------------------------------------------

  async getJob(params: GetJobParams): Promise<JobRecord | null> {
    const row = this.jobStmt(`SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = ?`).get(params.id) as unknown[] | undefined;
    if (!row || (params.tenant !== undefined && row[C.tenant] !== params.tenant)) return null;
    return rowToJob(row);
  }

  async getTransitions(params: GetJobParams): Promise<TransitionEntry[] | null> {
    const row = this.stmt('SELECT tenant, log FROM jobs WHERE id = ?').get(params.id) as { tenant: string; log: string } | undefined;
    if (!row || (params.tenant !== undefined && row.tenant !== params.tenant)) return null;
    return JSON.parse(row.log) as TransitionEntry[];
  }

  async listJobs(params: ListJobsParams): Promise<JobPage> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (params.tenant !== undefined) {
      where.push('j.tenant = ?');
      args.push(params.tenant);
    }
    if (params.cursor) {
      where.push('j.id < ?');
      args.push(decodeCursor(params.cursor));
    }
    if (params.states && params.states.length > 0) {
      where.push('j.state IN (SELECT value FROM json_each(?))');
      args.push(JSON.stringify(params.states));
    }
    if (params.type !== undefined) {
      where.push('j.type = ?');
      args.push(params.type);
    }
    const limit = Math.max(1, Math.min(params.limit, 1000));
    const sql = `SELECT ${JOB_COLUMNS} FROM jobs j ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY j.id DESC LIMIT ?`;
    const rows = this.jobStmt(sql).all(...args, limit + 1) as unknown[][];
    const items = rows.slice(0, limit).map(rowToJob);
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > limit && last ? encodeCursor(last.id) : null };
  }

  async countByState(params: { tenant?: string }): Promise<Record<JobState, number>> {
    const rows = (
      params.tenant === undefined
        ? this.stmt('SELECT state, count(*) AS n FROM jobs GROUP BY state').all()
        : this.stmt('SELECT state, count(*) AS n FROM jobs WHERE tenant = ? GROUP BY state').all(params.tenant)
    ) as { state: JobState; n: number }[];
    const out = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    for (const r of rows) out[r.state] = r.n;
    return out;
  }

  async activity(params: ActivityParams): Promise<Activity> {
    const tenantSql = params.tenant === undefined ? '' : 'AND tenant = @tenant';
    const args = { tenant: params.tenant, since: params.since, sinceId: uuidv7Floor(params.since), dsince: params.durationsSince, limit: params.limit };
    // Ids are UUIDv7, ordered by creation time: the primary key answers "created since".
    const submitted = this.stmt(`SELECT count(*) AS n FROM jobs WHERE id >= @sinceId ${tenantSql}`).get(args) as { n: number };
    const finished = this.stmt(`SELECT count(*) AS n FROM jobs WHERE finished_at >= @since ${tenantSql}`).get(args) as { n: number };
    const durations = this.stmt(
      `SELECT type, finished_at - started_at AS ms FROM jobs
       WHERE finished_at >= @dsince AND started_at IS NOT NULL AND state IN ('succeeded', 'failed', 'expired') ${tenantSql}
       ORDER BY finished_at DESC LIMIT @limit`,
    ).all(args) as { type: string; ms: number }[];
    return { submitted: submitted.n, finished: finished.n, durations };
  }

  // ---- claims -------------------------------------------------------------------------

  // SQLite plans `LIMIT ?` inside these statements far worse than a literal limit (≈70 µs
  // against ≈4 µs per call here), so limits are literals and statements are cached per limit.

  private promoteDueSync(now: number, limit: number): number {
    const n = Math.max(1, Math.floor(limit));
    const due = this.stmt(`SELECT id FROM jobs WHERE state IN ('pending', 'retrying') AND run_at <= ? ORDER BY run_at LIMIT ${n}`)
      .pluck()
      .all(now) as string[];
    if (due.length === 0) return 0;
    const update = this.stmt(
      `UPDATE jobs SET state = 'queued', updated_at = ${NEXT_UPDATED_AT}, log = ${logEntrySql('state', "'queued'", 'attempts', "'due'", 'NULL')}
       WHERE id = @id AND state IN ('pending', 'retrying')`,
    );
    let changed = 0;
    for (const id of due) changed += update.run({ id, at: now }).changes;
    return changed;
  }

  async promoteDue(params: { now: number; limit: number }): Promise<number> {
    return this.write(() => this.promoteDueSync(params.now, params.limit));
  }

  /**
   * Inside one write transaction: promote due jobs, pick candidates per type in queue order
   * (each walks its index, no sort), honour per-type concurrency by counting running jobs of
   * limited types, then claim each chosen job with a fenced update that returns its row.
   */
  async claimJobs(params: ClaimParams): Promise<JobRecord[]> {
    if (params.limit <= 0 || params.types.length === 0) return [];
    return this.write(() => this.claimSync(params));
  }

  async completeAndClaim(params: { complete: TransitionParams[]; claim: ClaimParams }): Promise<{ applied: boolean[]; jobs: JobRecord[] }> {
    for (const p of params.complete) SqliteStore.checkTransition(p);
    return this.write(() => ({
      applied: params.complete.map((p) => this.transitionSync(p)),
      jobs: params.claim.limit > 0 && params.claim.types.length > 0 ? this.claimSync(params.claim) : [],
    }));
  }

  /**
   * Inside the caller's write transaction: promote due jobs, read candidate rows per type in
   * queue order (each walks its index: no sort), honour per-type concurrency by counting the
   * running jobs of limited types, then claim each chosen job with a fenced update.
   */
  private claimSync(params: ClaimParams): JobRecord[] {
    this.promoteDueSync(params.now, 1000);
    let candidates: unknown[][] = [];
    for (const t of params.types) {
      let room = params.limit;
      if (t.concurrency !== undefined && t.concurrency > 0) {
        const running = this.stmt("SELECT count(*) FROM jobs WHERE state = 'running' AND type = ?").pluck().get(t.type) as number;
        room = Math.min(room, t.concurrency - running);
      }
      if (room <= 0) continue;
      const rows = this.jobStmt(`SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.state = 'queued' AND j.type = ? ORDER BY j.priority, j.run_at, j.id LIMIT ${room}`).all(
        t.type,
      ) as unknown[][];
      candidates = candidates.length === 0 ? rows : candidates.concat(rows);
    }
    if (candidates.length === 0) return [];
    if (params.types.length > 1) {
      candidates.sort(
        (a, b) =>
          (a[C.priority] as number) - (b[C.priority] as number) || (a[C.run_at] as number) - (b[C.run_at] as number) || ((a[C.id] as string) < (b[C.id] as string) ? -1 : 1),
      );
    }
    const claim = this.stmt(
      `UPDATE jobs SET state = 'running', lease = lease + 1, attempts = attempts + 1, worker_id = @worker,
         started_at = @at, heartbeat_at = @at, updated_at = ${NEXT_UPDATED_AT}, stalled = 0,
         log = ${logEntrySql("'queued'", "'running'", 'attempts + 1', "'claimed'", '@worker')}
       WHERE id = @id AND state = 'queued'`,
    );
    const jobs: JobRecord[] = [];
    const n = Math.min(params.limit, candidates.length);
    for (let i = 0; i < n; i++) {
      const row = candidates[i] as unknown[];
      if (claim.run({ id: row[C.id], worker: params.workerId, at: params.now }).changes !== 1) continue;
      const job = rowToJob(row);
      // The row was read just before the update in the same transaction: apply the update's effects.
      job.state = 'running';
      job.lease += 1;
      job.attempts += 1;
      job.workerId = params.workerId;
      job.startedAt = params.now;
      job.heartbeatAt = params.now;
      job.updatedAt = Math.max(params.now, job.updatedAt + 1);
      job.stalled = false;
      jobs.push(job);
    }
    return jobs;
  }

  // ---- transitions --------------------------------------------------------------------

  /** The statement for a transition's shape (which patch fields and expectations it has), built once per shape. */
  private transitionStatement(p: TransitionParams): Database.Statement {
    const patch: JobPatch = p.patch ?? {};
    const shape =
      (patch.runAt !== undefined ? 'r' : '') +
      (patch.result !== undefined ? 'R' : '') +
      (patch.error !== undefined ? 'e' : '') +
      (patch.finishedAt !== undefined ? 'f' : '') +
      (patch.expiresAt !== undefined ? 'x' : '') +
      (patch.resetAttempts ? 'A' : patch.refundAttempt ? 'a' : '') +
      (patch.clearCheckpoint ? 'c' : '') +
      (patch.cancelRequest ? 'C' : patch.cancelRequest === false ? 'n' : '') +
      (patch.stalled !== undefined ? 's' : '') +
      (p.lease !== undefined ? 'L' : '') +
      (p.cancelRequested !== undefined ? 'q' : '');
    let st = this.transitionStatements.get(shape);
    if (st) return st;
    const sets = ['state = @to', `updated_at = ${NEXT_UPDATED_AT}`];
    let attempt = 'attempts';
    if (patch.runAt !== undefined) sets.push('run_at = @runAt');
    if (patch.result !== undefined) sets.push('result = @result');
    if (patch.error !== undefined) sets.push('error = @error');
    if (patch.finishedAt !== undefined) sets.push('finished_at = @finishedAt');
    if (patch.expiresAt !== undefined) sets.push('expires_at = @expiresAt');
    if (patch.resetAttempts) {
      sets.push('attempts = 0');
      attempt = '0';
    } else if (patch.refundAttempt) {
      sets.push('attempts = max(attempts - 1, 0)');
      attempt = 'max(attempts - 1, 0)';
    }
    if (patch.clearCheckpoint) sets.push('checkpoint = NULL');
    if (patch.cancelRequest) sets.push('cancel_requested = 1', 'cancel_reason = @cancelReason', 'cancel_requested_at = @at');
    else if (patch.cancelRequest === false) sets.push('cancel_requested = 0', 'cancel_reason = NULL', 'cancel_requested_at = NULL');
    if (patch.stalled !== undefined) sets.push('stalled = @stalled');
    sets.push(`log = ${logEntrySql('@from', '@to', attempt, '@reason', '@worker')}`);
    const where = ['id = @id', 'state = @from'];
    if (p.lease !== undefined) where.push('lease = @lease');
    if (p.cancelRequested !== undefined) where.push('cancel_requested = @expectCancel');
    st = this.db.prepare(`UPDATE jobs SET ${sets.join(', ')} WHERE ${where.join(' AND ')}`);
    this.transitionStatements.set(shape, st);
    return st;
  }

  private static transitionArgs(p: TransitionParams): Record<string, unknown> {
    const patch: JobPatch = p.patch ?? {};
    const args: Record<string, unknown> = { id: p.id, from: p.from, to: p.to, at: p.at, reason: p.reason, worker: p.workerId ?? null };
    if (patch.runAt !== undefined) args.runAt = patch.runAt;
    if (patch.result !== undefined) args.result = json(patch.result);
    if (patch.error !== undefined) args.error = json(patch.error);
    if (patch.finishedAt !== undefined) args.finishedAt = patch.finishedAt;
    if (patch.expiresAt !== undefined) args.expiresAt = patch.expiresAt;
    if (patch.cancelRequest) args.cancelReason = patch.cancelRequest.reason;
    if (patch.stalled !== undefined) args.stalled = patch.stalled ? 1 : 0;
    if (p.lease !== undefined) args.lease = p.lease;
    if (p.cancelRequested !== undefined) args.expectCancel = p.cancelRequested ? 1 : 0;
    return args;
  }

  private static checkTransition(p: TransitionParams): void {
    assertTransition(p.from, p.to);
    if (p.to === 'running' && p.from !== 'running') throw new Error('a job enters running only through claimJobs');
  }

  private transitionSync(p: TransitionParams): boolean {
    const applied = this.transitionStatement(p).run(SqliteStore.transitionArgs(p)).changes === 1;
    if (applied && p.to === 'expired') this.stmt('DELETE FROM job_progress WHERE job_id = ?').run(p.id);
    return applied;
  }

  async transition(params: { items: TransitionParams[] }): Promise<boolean[]> {
    for (const p of params.items) SqliteStore.checkTransition(p);
    if (params.items.length === 0) return [];
    return this.write(() => params.items.map((p) => this.transitionSync(p)));
  }


  // ---- lease-holder writes ------------------------------------------------------------

  async heartbeat(params: { items: LeaseRef[]; now: number }): Promise<HeartbeatResult[]> {
    if (params.items.length === 0) return [];
    return this.write(() =>
      params.items.map((ref) => {
        const row = this.stmt(
          "UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND lease = ? AND state = 'running' RETURNING cancel_requested, cancel_reason",
        ).get(params.now, ref.id, ref.lease) as { cancel_requested: number; cancel_reason: string | null } | undefined;
        return row
          ? { id: ref.id, ok: true, cancelRequested: row.cancel_requested === 1, cancelReason: row.cancel_reason }
          : { id: ref.id, ok: false, cancelRequested: false, cancelReason: null };
      }),
    );
  }

  async leaseStatus(params: { items: LeaseRef[] }): Promise<HeartbeatResult[]> {
    if (params.items.length === 0) return [];
    const rows = this.stmt(`SELECT id, lease, state, cancel_requested, cancel_reason FROM jobs WHERE id IN (SELECT value FROM json_each(?))`).all(
      JSON.stringify(params.items.map((i) => i.id)),
    ) as { id: string; lease: number; state: string; cancel_requested: number; cancel_reason: string | null }[];
    const byId = new Map(rows.map((r) => [r.id, r]));
    return params.items.map((ref) => {
      const r = byId.get(ref.id);
      const ok = r !== undefined && r.state === 'running' && r.lease === ref.lease;
      return { id: ref.id, ok, cancelRequested: ok && r.cancel_requested === 1, cancelReason: ok ? r.cancel_reason : null };
    });
  }

  async saveProgress(params: LeaseRef & { progress: Progress; now: number }): Promise<boolean> {
    return this.write(() => {
      const held = this.stmt("SELECT stalled FROM jobs WHERE id = ? AND lease = ? AND state = 'running'").get(params.id, params.lease) as
        | { stalled: number }
        | undefined;
      if (!held) return false;
      this.stmt(
        `INSERT INTO job_progress (job_id, data, updated_at) VALUES (?, ?, ?)
         ON CONFLICT(job_id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
      ).run(params.id, JSON.stringify(params.progress), params.now);
      if (held.stalled === 1) {
        this.stmt(
          `UPDATE jobs SET stalled = 0, updated_at = ${NEXT_UPDATED_AT}, log = ${logEntrySql("'running'", "'running'", 'attempts', "'progress resumed'", 'worker_id')} WHERE id = @id`,
        ).run({ id: params.id, at: params.now });
      }
      return true;
    });
  }

  async saveCheckpoint(params: LeaseRef & { checkpoint: Checkpoint; now: number }): Promise<boolean> {
    return this.write(
      () =>
        this.stmt("UPDATE jobs SET checkpoint = ? WHERE id = ? AND lease = ? AND state = 'running'").run(
          JSON.stringify({ version: params.checkpoint.version, data: params.checkpoint.data }),
          params.id,
          params.lease,
        ).changes === 1,
    );
  }

  // ---- sweeper ------------------------------------------------------------------------

  async sweepCandidates(params: SweepParams): Promise<JobRecord[]> {
    const conditions: Record<SweepParams['kind'], string> = {
      stale: "j.state = 'running' AND j.heartbeat_at < @now - j.heartbeat_timeout_ms",
      'timed-out': "j.state = 'running' AND j.timeout_ms IS NOT NULL AND j.cancel_requested = 0 AND j.started_at + j.timeout_ms < @now",
      drained: "j.state = 'running' AND j.cancel_requested = 1 AND j.cancel_requested_at + @drain < @now",
      stalled: `j.state = 'running' AND j.stalled = 0 AND j.stall_timeout_ms IS NOT NULL AND j.heartbeat_at >= @now - j.heartbeat_timeout_ms
        AND max(coalesce((SELECT p.updated_at FROM job_progress p WHERE p.job_id = j.id), 0), j.started_at) + j.stall_timeout_ms < @now`,
      expired: "j.state = 'succeeded' AND j.expires_at IS NOT NULL AND j.expires_at < @now",
    };
    const rows = this.jobStmt(`SELECT ${JOB_COLUMNS} FROM jobs j WHERE ${conditions[params.kind]} LIMIT @limit`).all({
      now: params.now,
      limit: params.limit,
      drain: params.drainMs ?? 0,
    }) as unknown[][];
    return rows.map(rowToJob);
  }

  async pollChanges(): Promise<boolean> {
    const v = this.stmt('PRAGMA data_version').pluck().get() as number;
    const changed = v !== this.lastDataVersion;
    this.lastDataVersion = v;
    return changed;
  }
}
