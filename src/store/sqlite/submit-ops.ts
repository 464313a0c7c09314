/**
 * SqliteStore's submission (insertJob, insertJobs of the JobQueueStore in ../store.ts). Every
 * insert runs in one IMMEDIATE transaction of the store: the write lock keeps the backlog and
 * tenant counts true until commit, and a batch refused as a whole (`wholeBatch`) is rolled
 * back. The workflow ops insert a job's children through `insertOne`, inside their own write.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { priorityRank } from '../../core/job.js';
import { keyReusable } from '../../core/retention.js';
import { insertedRecord, type InsertJobParams, type InsertJobsParams, type InsertResult, type NewJob } from '../store.js';
import { batchRefusal, refuseBatch, type TenantRoom, takeRoom, tenantRoom } from '../tenant-room.js';
import { jobFromJson, jobJson } from './rows.js';
import { type Compiled, compile, statementCache } from './sql.js';

/** The store's IMMEDIATE transaction (`rows`: about how many rows it writes, for the checkpointer). */
type Write = <T>(fn: () => T, rows?: number) => T;

const JOB_ROW = jobJson('j');

/** A tenant's backlog (pending, queued, retrying), counted up to a cap: (tenant, cap). */
export const TENANT_BACKLOG_SQL = "SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE tenant = ? AND state IN ('pending', 'queued', 'retrying') LIMIT ?)";

function json(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value);
}

const INSERT_PARAMS = {
  id: (j: NewJob) => j.id,
  tenant: (j: NewJob) => j.tenant,
  type: (j: NewJob) => j.type,
  state: (j: NewJob) => j.state,
  priority: (j: NewJob) => priorityRank(j.priority),
  input: (j: NewJob) => json(j.input),
  metadata: (j: NewJob) => json(j.metadata),
  maxAttempts: (j: NewJob) => j.maxAttempts,
  runAt: (j: NewJob) => j.runAt,
  createdAt: (j: NewJob) => j.createdAt,
  timeoutMs: (j: NewJob) => j.timeoutMs,
  heartbeatTimeoutMs: (j: NewJob) => j.heartbeatTimeoutMs,
  stallTimeoutMs: (j: NewJob) => j.stallTimeoutMs,
  resultTtlMs: (j: NewJob) => j.resultTtlMs,
  parentId: (j: NewJob) => j.parentId,
  idempotencyKey: (j: NewJob) => j.idempotencyKey,
  requestHash: (j: NewJob) => j.requestHash,
  ckey: (j: NewJob) => j.concurrencyKey ?? null,
  log: (j: NewJob) => JSON.stringify([{ from: null, to: j.state, at: j.createdAt, reason: 'submitted', attempt: 0, workerId: null }]),
};

export class SqliteSubmitOps {
  private readonly stmt: (sql: string) => StatementSync;
  private insertCompiled: Compiled<NewJob> | null = null;

  constructor(
    private readonly db: DatabaseSync,
    private readonly write: Write,
    /** The store's cache of statements whose rows come as arrays (job rows: `[json]`, see rows.ts). */
    private readonly arrayStmt: (sql: string) => StatementSync,
  ) {
    this.stmt = statementCache(db);
  }

  /** The insert, prepared on first use (the tables exist only after migrate). */
  private get insertStatement(): Compiled<NewJob> {
    this.insertCompiled ??= compile(
      this.db,
      `INSERT INTO jobs (id, tenant, type, state, priority, input, metadata, max_attempts, run_at, created_at, updated_at,
          timeout_ms, heartbeat_timeout_ms, stall_timeout_ms, result_ttl_ms, parent_id, idempotency_key, request_hash, ckey, log)
         VALUES (@id, @tenant, @type, @state, @priority, @input, @metadata, @maxAttempts, @runAt, @createdAt, @createdAt,
          @timeoutMs, @heartbeatTimeoutMs, @stallTimeoutMs, @resultTtlMs, @parentId, @idempotencyKey, @requestHash, @ckey, @log)`,
      INSERT_PARAMS,
    );
    return this.insertCompiled;
  }

  insertOne(job: NewJob, maxBacklog: number | undefined, idempotencyTtlMs?: number, tenants?: TenantRoom): InsertResult {
    if (job.idempotencyKey !== null) {
      const existing = this.arrayStmt(`SELECT ${JOB_ROW}, j.request_hash FROM jobs j WHERE j.tenant = ? AND j.idempotency_key = ?`).get(
        job.tenant,
        job.idempotencyKey,
      ) as unknown as [string, string | null] | undefined;
      if (existing) {
        const held = jobFromJson(existing[0]);
        if (!keyReusable(held, job.createdAt, idempotencyTtlMs)) return { kind: existing[1] === job.requestHash ? 'existing' : 'conflict', job: held };
        // The key moves to the new job (the old one keeps its row, without a key): one statement of this transaction.
        this.stmt('UPDATE jobs SET idempotency_key = NULL WHERE id = ?').run(held.id);
      }
    }
    if (maxBacklog !== undefined) {
      // LIMIT as a literal, as the store's other counts (see the note on LIMIT in sqlite-store.ts).
      const cap = Math.max(0, Math.ceil(maxBacklog));
      const backlog = this.stmt(`SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE state IN ('pending', 'queued', 'retrying') LIMIT ${cap})`).get() as {
        n: number;
      };
      if (backlog.n >= maxBacklog) return { kind: 'full', backlog: backlog.n };
    }
    // The write lock keeps the tenant's count true until commit.
    if (tenants) {
      const refused = takeRoom(tenants, job.tenant, (t, cap) => this.tenantBacklog(t, cap));
      if (refused) return refused;
    }
    const insert = this.insertStatement;
    insert.stmt.run(...insert.args(job));
    // Its own statement, so that the insert names no column an older schema lacks unless tracing is on.
    if (job.traceParent) this.stmt('UPDATE jobs SET trace_parent = ? WHERE id = ?').run(job.traceParent, job.id);
    return { kind: 'created', job: insertedRecord(job) };
  }

  /** A tenant's stored backlog, counted up to `cap` (index jobs_tenant_backlog: O(cap) at most). */
  private tenantBacklog(tenant: string, cap: number): number {
    return (this.stmt(TENANT_BACKLOG_SQL).get(tenant, cap) as { n: number }).n;
  }

  async insertJob(params: InsertJobParams): Promise<InsertResult> {
    const tenants = tenantRoom(params.maxTenantBacklog);
    return this.write(() => this.insertOne(params.job, params.maxBacklog, params.idempotencyTtlMs, tenants));
  }

  async insertJobs(params: InsertJobsParams): Promise<InsertResult[]> {
    const tenants = tenantRoom(params.maxTenantBacklog);
    const insertAll = () => params.jobs.map((job) => this.insertOne(job, params.maxBacklog, params.idempotencyTtlMs, tenants));
    if (!params.wholeBatch || !tenants) return this.write(insertAll, params.jobs.length);
    let refused: InsertResult[] | null = null;
    try {
      return this.write(() => {
        const results = insertAll();
        const refusal = batchRefusal(results, tenants);
        if (refusal === null) return results;
        // A tenant over its limit refuses the batch: the rollback undoes the jobs inserted before it.
        refused = refuseBatch(results, refusal);
        throw new Error('batch refused');
      }, params.jobs.length);
    } catch (err) {
      if (refused === null) throw err;
      return refused;
    }
  }
}
