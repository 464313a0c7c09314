/**
 * The embedded store: one SQLite file through Node's built-in `node:sqlite`, in WAL mode.
 *
 * Durability: WAL with synchronous=NORMAL. A committed transaction is in the WAL before the
 * call returns, so it survives `kill -9` of any process; only an OS crash or power loss can
 * drop the last transactions (use `synchronous: 'full'` to rule that out too).
 *
 * Several processes may share one file: every write is an IMMEDIATE transaction (one writer
 * at a time, waiting up to busyTimeoutMs), so claims and per-type concurrency limits are
 * exact across processes.
 *
 * The worker's cycle (completeAndClaim) is the hot path: positional parameters throughout
 * (sql.ts), one UPDATE ... RETURNING per claimed type, rows read as one JSON array each
 * (rows.ts), and WAL checkpoints on a helper thread (checkpointer.ts).
 *
 * Statements that return one column are set to return arrays (`setReturnArrays`), and the
 * value is read as `row[0]`: node:sqlite has no `pluck`, and an array per row costs less than
 * an object with a named property.
 *
 * The schema is the SQL files of migrations/ (0001_baseline.sql, then one file per change),
 * applied by migrate() and recorded in the table longhaul_migrations.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { JobRecord, TransitionEntry } from '../../core/job.js';
import type { JobState } from '../../core/states.js';
import type {
  ClaimCycle,
  ClaimParams,
  JobQueueStore,
  GetJobParams,
  JobPage,
  ListJobsParams,
  MigrationResult,
  ResultFileStore,
  SnapshotJson,
  Store,
  ScheduleStore,
  RetentionStore,
  DeadLetterStore,
  WorkflowStore,
  SweepParams,
  TransitionParams,
  WebhookOutboxStore,
  StoreCapabilities,
} from '../store.js';
import { WalCheckpointer } from './checkpointer.js';
import { enterWal, openDatabase } from './open-database.js';
import { jobFromJson, jobJson, jobsFromRows } from './rows.js';
import { SqliteClaimOps } from './claim-ops.js';
import { SNAPSHOT_JSON_SQL, SnapshotCache } from './snapshot-json.js';
import { arrays, type Compiled, compile, logEntrySql, NEXT_UPDATED_AT, statementCache } from './sql.js';
import { StatsBatch } from './stats-batch.js';
import { checkTransition, Transitions } from './transitions.js';
import { SqliteSubmitOps } from './submit-ops.js';
import { SqliteScheduleOps } from './schedule-ops.js';
import { SqliteWorkflowOps } from './workflow-ops.js';
import { SqliteRetentionOps } from './retention-ops.js';
import { SqliteDeadLetterOps } from './dead-letter-ops.js';
import { SqliteStatsOps } from './stats-ops.js';
import { SqliteLeaseOps } from './lease-ops.js';
import { SqliteApiKeyOps } from './api-key-ops.js';
import type { ApiKeyStore } from '../api-key-store.js';
import { SqliteResultFileOps } from './result-file-ops.js';
import { SqliteWebhookOps } from './webhook-ops.js';
import { encodeJobCursor } from '../job-cursor.js';
import { listJobsSql } from './list-sql.js';
import { applyMigrations, appliedVersion, migrationFiles } from './schema.js';

export interface SqliteStoreOptions {
  /** File path, or ':memory:' (single process only). */
  path: string;
  busyTimeoutMs?: number;
  synchronous?: 'normal' | 'full';
  /**
   * 'background' (default for files): WAL checkpoints run on a helper thread, see
   * checkpointer.ts. 'inline': SQLite's automatic checkpoints inside commits.
   */
  checkpoints?: 'background' | 'inline';
}

const JOB_ROW = jobJson('j');

interface HotStatements {
  promote: Compiled<{ id: string; at: number }>;
  getJob: StatementSync;
  snapshotJson: StatementSync;
}

// LIMIT takes literals, with one statement per value: with a bound LIMIT, a SQLite built with
// STAT4 (better-sqlite3's was; Node's is not) re-prepares the statement on every run to plan
// for the value. Literals keep every build on one plan per statement.

export class SqliteStore implements Store {
  readonly capabilities: StoreCapabilities = { transactionalEnqueue: false, claimDepth: 1, notify: null };
  readonly db: DatabaseSync;
  /** A cached prepared statement; SQL shapes that vary are cached per shape. */
  private readonly stmt: (sql: string) => StatementSync;
  private readonly arrayStatements = new Map<string, StatementSync>();
  /** Status-poll snapshots by job id, re-sent while their version is current (see snapshot-json.ts). */
  private readonly snapshots = new SnapshotCache();
  private readonly transitions: Transitions;
  /** What the worker's own writes count themselves (claims, ends of running jobs), written at each write's commit. */
  private readonly statsBatch: StatsBatch;
  private readonly submit: SqliteSubmitOps;
  private readonly workflow: SqliteWorkflowOps;
  private readonly schedules: SqliteScheduleOps;
  private readonly retention: SqliteRetentionOps;
  private readonly deadLetters: SqliteDeadLetterOps;
  private readonly stats: SqliteStatsOps;
  private readonly leases: SqliteLeaseOps;
  private readonly resultFiles: SqliteResultFileOps;
  private readonly webhooks: SqliteWebhookOps;
  private readonly apiKeys: SqliteApiKeyOps;
  private readonly checkpointer: WalCheckpointer | null;
  private readonly beginStmt: StatementSync;
  private readonly commitStmt: StatementSync;
  private readonly rollbackStmt: StatementSync;
  private prepared: HotStatements | null = null;
  private claimOps: SqliteClaimOps | null = null;
  private lastDataVersion = -1;

  constructor(readonly options: SqliteStoreOptions) {
    this.db = openDatabase(options.path);
    this.stmt = statementCache(this.db);
    const file = options.path !== ':memory:';
    const busyTimeoutMs = options.busyTimeoutMs ?? 10_000;
    this.db.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
    if (file) {
      try {
        enterWal(this.db, busyTimeoutMs); // the first statement that reads the file
      } catch (err) {
        this.db.close();
        throw new Error(`cannot use the SQLite database ${options.path}: ${(err as Error).message}`);
      }
    }
    this.db.exec(`PRAGMA synchronous = ${options.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
    this.db.exec('PRAGMA foreign_keys = ON');
    // The page cache stays at SQLite's default 2 MiB: every commit walks the cache's hash table
    // (pcache1TruncateUnsafe), so a 64 MiB cache made each commit several times slower once the
    // file outgrew a few MiB.
    this.db.exec('PRAGMA cache_size = -2000');
    // No memory map: every page read through it stays in the process's RSS while mapped, so RSS
    // grew with the file, up to the map's size (by 4.7-4.9 MiB a minute at 100 jobs/s in
    // bench/soak.ts), although the pages are the OS page cache's, which holds them either way.
    this.db.exec('PRAGMA mmap_size = 0');
    this.db.exec('PRAGMA temp_store = MEMORY');
    // After a burst, a WAL that grew is cut back to this size when it restarts.
    this.db.exec('PRAGMA journal_size_limit = 67108864');
    this.checkpointer = file && options.checkpoints !== 'inline' ? new WalCheckpointer(this.db, options.path) : null;
    // With the checkpointer, SQLite's own automatic checkpoint is only a backstop.
    if (this.checkpointer) this.db.exec('PRAGMA wal_autocheckpoint = 16384');
    this.beginStmt = this.db.prepare('BEGIN IMMEDIATE');
    this.commitStmt = this.db.prepare('COMMIT');
    this.rollbackStmt = this.db.prepare('ROLLBACK');
    this.statsBatch = new StatsBatch(this.db);
    this.transitions = new Transitions(this.db, this.statsBatch);
    this.submit = new SqliteSubmitOps(this.db, (fn, rows) => this.write(fn, rows), (sql) => this.arrayStmt(sql));
    this.workflow = new SqliteWorkflowOps(this.db, this.transitions, (fn, rows) => this.write(fn, rows), (job) => this.submit.insertOne(job, undefined));
    this.schedules = new SqliteScheduleOps(this.db, (fn, rows) => this.write(fn, rows));
    this.retention = new SqliteRetentionOps(this.db, (fn, rows) => this.write(fn, rows));
    this.deadLetters = new SqliteDeadLetterOps(this.db);
    this.stats = new SqliteStatsOps(this.db, (fn, rows) => this.write(fn, rows));
    this.leases = new SqliteLeaseOps(this.db, (fn, rows) => this.write(fn, rows));
    this.resultFiles = new SqliteResultFileOps(this.db, (fn, rows) => this.write(fn, rows));
    this.webhooks = new SqliteWebhookOps(this.db, (fn, rows) => this.write(fn, rows));
    this.apiKeys = new SqliteApiKeyOps(this.db, (fn, rows) => this.write(fn, rows));
  }


  /** A cached statement whose rows come as arrays (job rows: `[json]`, see rows.ts). */
  private arrayStmt(sql: string): StatementSync {
    let st = this.arrayStatements.get(sql);
    if (!st) {
      st = arrays(this.db.prepare(sql));
      this.arrayStatements.set(sql, st);
    }
    return st;
  }

  /** The hot statements, prepared on first use (the tables exist only after migrate). */
  private get hot(): HotStatements {
    if (this.prepared) return this.prepared;
    const db = this.db;
    this.prepared = {
      getJob: arrays(db.prepare(`SELECT ${JOB_ROW} FROM jobs j WHERE j.id = ?`)),
      snapshotJson: arrays(db.prepare(SNAPSHOT_JSON_SQL)),
      promote: compile(
        db,
        `UPDATE jobs SET state = 'queued', updated_at = ${NEXT_UPDATED_AT},
           log = ${logEntrySql('state', "'queued'", 'attempts', "CASE state WHEN 'waiting' THEN 'wait over' ELSE 'due' END", 'NULL')}
         WHERE id = @id AND state IN ('pending', 'retrying', 'waiting')`,
        { id: (a: { id: string; at: number }) => a.id, at: (a: { id: string; at: number }) => a.at },
      ),
    };
    return this.prepared;
  }

  /**
   * One IMMEDIATE transaction. `rows` (about how many rows it writes) paces the background
   * checkpoints. Time-dependent writes read their `now` inside `fn`, after BEGIN has waited for
   * any other connection's write lock (up to busyTimeoutMs): a caller may pass it as a getter
   * (the worker does) so that a claim made after a long wait does not start in the past.
   */
  private write<T>(fn: () => T, rows: number | ((out: T) => number) = 1): T {
    this.beginStmt.run();
    let out: T;
    try {
      out = fn();
      this.statsBatch.flush();
      this.commitStmt.run();
    } catch (err) {
      this.statsBatch.discard();
      if (this.db.isTransaction) this.rollbackStmt.run();
      throw err;
    }
    this.checkpointer?.afterCommit(typeof rows === 'number' ? rows : rows(out));
    return out;
  }

  /** The version of the newest migration file (migrations/NNNN_name.sql) this code has. */
  static get latestVersion(): number {
    return migrationFiles().length;
  }

  /**
   * Applies the migration files the database has not applied yet (up to `to`, else all) in one
   * IMMEDIATE transaction (schema.ts applyMigrations).
   */
  async migrate(to?: number): Promise<MigrationResult> {
    return this.write(() => applyMigrations(this.db, this.options.path, to));
  }

  /** The schema version of the database: the newest migration file applied (0: none). */
  async schemaVersion(): Promise<number> {
    return appliedVersion(this.db, this.options.path);
  }

  async ping(): Promise<void> {
    this.stmt('SELECT 1 FROM longhaul_migrations LIMIT 1').get();
  }

  async close(): Promise<void> {
    await this.checkpointer?.close();
    if (this.db.isOpen) this.db.close();
  }

  // ---- submit: submit-ops.ts ------------------------------------------------------------

  insertJob: JobQueueStore['insertJob'] = (p) => this.submit.insertJob(p);
  insertJobs: JobQueueStore['insertJobs'] = (p) => this.submit.insertJobs(p);

  // ---- reads --------------------------------------------------------------------------

  async getJob(params: GetJobParams): Promise<JobRecord | null> {
    const row = this.hot.getJob.get(params.id) as unknown as [string] | undefined;
    if (row === undefined) return null;
    const job = jobFromJson(row[0]);
    return params.tenant !== undefined && job.tenant !== params.tenant ? null : job;
  }

  async getJobs(params: { ids: readonly string[] }): Promise<JobRecord[]> {
    if (params.ids.length === 0) return [];
    const rows = arrays(this.stmt(`SELECT ${JOB_ROW} FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?))`)).all(JSON.stringify(params.ids)) as unknown as [string][];
    return rows.map((r) => jobFromJson(r[0]));
  }

  async getSnapshotJson(params: GetJobParams): Promise<SnapshotJson | null> {
    const held = this.snapshots.get(params.id);
    const row = this.hot.snapshotJson.get(held?.updatedAt ?? -1, held?.progress ?? null, params.id) as unknown as
      | [string, JobState, number, number | null, number, number, string | null, string | null]
      | undefined;
    if (row === undefined) {
      if (held) this.snapshots.delete(params.id);
      return null;
    }
    if (params.tenant !== undefined && row[0] !== params.tenant) return null;
    if (row[4] !== 1) return { state: row[1], runAt: row[2], expiresAt: row[3], json: null };
    let json = row[7];
    if (json === null) json = (held as { json: string }).json;
    else this.snapshots.set(params.id, { updatedAt: row[5], progress: row[6], json });
    return { state: row[1], runAt: row[2], expiresAt: row[3], json };
  }

  async getTransitions(params: GetJobParams): Promise<TransitionEntry[] | null> {
    const row = this.stmt('SELECT tenant, log FROM jobs WHERE id = ?').get(params.id) as { tenant: string; log: string } | undefined;
    if (!row || (params.tenant !== undefined && row.tenant !== params.tenant)) return null;
    return JSON.parse(row.log) as TransitionEntry[];
  }

  async listJobs(params: ListJobsParams): Promise<JobPage> {
    const { text, args, limit } = listJobsSql(params);
    const rows = this.arrayStmt(text).all(...args);
    const items = jobsFromRows(rows.slice(0, limit));
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > limit && last ? encodeJobCursor(last.id) : null };
  }

  // ---- stats: stats-ops.ts (counters kept by the triggers of migrations/0001_baseline.sql) ---

  countByState: JobQueueStore['countByState'] = (p) => this.stats.countByState(p);
  countByTypeAndState: JobQueueStore['countByTypeAndState'] = (p) => this.stats.countByTypeAndState(p);
  activity: JobQueueStore['activity'] = (p) => this.stats.activity(p);
  sweepHealth: JobQueueStore['sweepHealth'] = (p) => this.stats.sweepHealth(p);
  compactStats: JobQueueStore['compactStats'] = (p) => this.stats.compactStats(p);

  async traceParents(params: { ids: readonly string[] }): Promise<Map<string, string>> {
    if (params.ids.length === 0) return new Map();
    const rows = this.stmt('SELECT id, trace_parent FROM jobs WHERE id IN (SELECT value FROM json_each(?)) AND trace_parent IS NOT NULL').all(
      JSON.stringify(params.ids),
    ) as { id: string; trace_parent: string }[];
    return new Map(rows.map((r) => [r.id, r.trace_parent]));
  }

  // ---- claims -------------------------------------------------------------------------

  private promoteDueSync(now: number, limit: number): number {
    const { promote } = this.hot;
    const n = Math.max(1, Math.floor(limit));
    const rows = this.arrayStmt(`SELECT id FROM jobs WHERE state IN ('pending', 'retrying', 'waiting') AND run_at <= ? ORDER BY run_at LIMIT ${n}`).all(
      now,
    ) as unknown as [string][];
    let changed = 0;
    for (const [id] of rows) changed += Number(promote.stmt.run(...promote.args({ id, at: now })).changes);
    return changed;
  }

  async promoteDue(params: { now: number; limit: number }): Promise<number> {
    return this.write(() => this.promoteDueSync(params.now, params.limit));
  }

  async claimJobs(params: ClaimParams): Promise<JobRecord[]> {
    if (params.limit <= 0 || params.types.length === 0) return [];
    return this.write(
      () => this.claimSync(params).jobs,
      (jobs) => jobs.length,
    );
  }

  async completeAndClaim(params: { complete: TransitionParams[]; claim: ClaimParams }): Promise<ClaimCycle> {
    const { complete, claim } = params;
    for (const p of complete) checkTransition(p);
    const claiming = claim.limit > 0 && claim.types.length > 0;
    if (complete.length === 0 && !claiming) return { applied: [], jobs: [], deleted: [] };
    return this.write(
      () => {
        const { applied, deleted } = this.applyAll(complete);
        if (!claiming) return { applied, deleted, jobs: [] };
        const { jobs, wakeAt } = this.claimSync(claim);
        return wakeAt === undefined ? { applied, deleted, jobs } : { applied, deleted, jobs, wakeAt };
      },
      // Rows written (they pace the checkpoints), not the claim's limit, which may be far more.
      (out) => out.applied.length + out.jobs.length,
    );
  }

  /**
   * Inside the caller's write transaction: promote due jobs, then claim (claim-ops.ts).
   * `params.now` is read once, here, inside the transaction (see write).
   */
  private claimSync(params: ClaimParams): { jobs: JobRecord[]; wakeAt: number | undefined } {
    const now = params.now;
    this.promoteDueSync(now, 1000);
    this.claimOps ??= new SqliteClaimOps(this.db, this.statsBatch);
    return this.claimOps.claim({ ...params, now });
  }

  // ---- transitions --------------------------------------------------------------------

  /** One checked transition inside the caller's write transaction (bench/store-split.ts drives it directly). */
  private transitionSync(p: TransitionParams): boolean {
    return this.transitions.apply(p);
  }

  /**
   * Checked transitions inside the caller's write transaction, in order. A `deleteOnEnd` write
   * deletes its job when it may (Transitions.tryDelete), else applies as usual; the deleted
   * jobs' progress and signals go in two statements for all of them.
   */
  private applyAll(items: readonly TransitionParams[]): { applied: boolean[]; deleted: boolean[] } {
    const applied = new Array<boolean>(items.length);
    const deleted = new Array<boolean>(items.length).fill(false);
    const gone: string[] = [];
    for (let i = 0; i < items.length; i++) {
      const p = items[i] as TransitionParams;
      if (p.deleteOnEnd && this.transitions.tryDelete(p)) {
        applied[i] = true;
        deleted[i] = true;
        gone.push(p.id);
      } else applied[i] = this.transitionSync(p);
    }
    this.transitions.dropDependents(gone);
    return { applied, deleted };
  }

  async transition(params: { items: TransitionParams[] }): Promise<boolean[]> {
    for (const p of params.items) checkTransition(p);
    if (params.items.length === 0) return [];
    return this.write(() => this.applyAll(params.items).applied, params.items.length);
  }

  // ---- lease-holder writes: lease-ops.ts ---------------------------------------------------

  heartbeat: JobQueueStore['heartbeat'] = (p) => this.leases.heartbeat(p);
  leaseStatus: JobQueueStore['leaseStatus'] = (p) => this.leases.leaseStatus(p);
  saveProgress: JobQueueStore['saveProgress'] = (p) => this.leases.saveProgress(p);
  saveCheckpoint: JobQueueStore['saveCheckpoint'] = (p) => this.leases.saveCheckpoint(p);

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
    const rows = this.arrayStmt(`SELECT ${JOB_ROW} FROM jobs j WHERE ${conditions[params.kind]} LIMIT @limit`).all(
      // Only the statement that uses @drain may be given it (see activity).
      params.kind === 'drained' ? { now: params.now, limit: params.limit, drain: params.drainMs ?? 0 } : { now: params.now, limit: params.limit },
    );
    return jobsFromRows(rows);
  }

  async pollChanges(): Promise<boolean> {
    const v = (this.arrayStmt('PRAGMA data_version').get() as unknown as [number])[0];
    const changed = v !== this.lastDataVersion;
    this.lastDataVersion = v;
    return changed;
  }

  // ---- workflows (WorkflowStore): workflow-ops.ts ----------------------------------------------

  suspend: WorkflowStore['suspend'] = (p) => this.workflow.suspend(p);
  saveWorkflow: WorkflowStore['saveWorkflow'] = (p) => this.workflow.saveWorkflow(p);
  resumeParents: WorkflowStore['resumeParents'] = (p) => this.workflow.resumeParents(p);
  resumeStrandedParents: WorkflowStore['resumeStrandedParents'] = (p) => this.workflow.resumeStrandedParents(p);
  sendSignal: WorkflowStore['sendSignal'] = (p) => this.workflow.sendSignal(p);
  consumedSignal: WorkflowStore['consumedSignal'] = (p) => this.workflow.consumedSignal(p);
  countChildren: WorkflowStore['countChildren'] = (p) => this.workflow.countChildren(p);

  // ---- schedules (ScheduleStore): schedule-ops.ts ---------------------------------------------

  insertSchedule: ScheduleStore['insertSchedule'] = (p) => this.schedules.insertSchedule(p);
  replaceSchedule: ScheduleStore['replaceSchedule'] = (p) => this.schedules.replaceSchedule(p);
  getSchedule: ScheduleStore['getSchedule'] = (p) => this.schedules.getSchedule(p);
  listSchedules: ScheduleStore['listSchedules'] = (p) => this.schedules.listSchedules(p);
  deleteSchedule: ScheduleStore['deleteSchedule'] = (p) => this.schedules.deleteSchedule(p);
  setSchedulePaused: ScheduleStore['setSchedulePaused'] = (p) => this.schedules.setSchedulePaused(p);
  recordScheduleRun: ScheduleStore['recordScheduleRun'] = (p) => this.schedules.recordScheduleRun(p);
  dueSchedules: ScheduleStore['dueSchedules'] = (p) => this.schedules.dueSchedules(p);
  advanceSchedule: ScheduleStore['advanceSchedule'] = (p) => this.schedules.advanceSchedule(p);
  // ---- retention (RetentionStore): retention-ops.ts -----------------------------------------------

  endedJobs: RetentionStore['endedJobs'] = (p) => this.retention.endedJobs(p);
  countOpenJobs: RetentionStore['countOpenJobs'] = (p) => this.retention.countOpenJobs(p);
  deleteJobs: RetentionStore['deleteJobs'] = (p) => this.retention.deleteJobs(p);

  // ---- dead letters (DeadLetterStore): dead-letter-ops.ts (attempts are written by transitions.ts) --

  listAttempts: DeadLetterStore['listAttempts'] = (p) => this.deadLetters.listAttempts(p);
  deadLetterGroups: DeadLetterStore['deadLetterGroups'] = (p) => this.deadLetters.deadLetterGroups(p);
  failedJobs: DeadLetterStore['failedJobs'] = (p) => this.deadLetters.failedJobs(p);

  // ---- result files (ResultFileStore): result-file-ops.ts -----------------------------------

  recordResult: ResultFileStore['recordResult'] = (p) => this.resultFiles.recordResult(p);
  unrecordResult: ResultFileStore['unrecordResult'] = (p) => this.resultFiles.unrecordResult(p);
  listResults: ResultFileStore['listResults'] = (p) => this.resultFiles.listResults(p);
  deleteResults: ResultFileStore['deleteResults'] = (p) => this.resultFiles.deleteResults(p);
  countDownload: ResultFileStore['countDownload'] = (p) => this.resultFiles.countDownload(p);

  // ---- the webhook outbox (WebhookOutboxStore): webhook-ops.ts --------------------------------

  saveWebhook: WebhookOutboxStore['saveWebhook'] = (p) => this.webhooks.saveWebhook(p);
  deleteWebhook: WebhookOutboxStore['deleteWebhook'] = (p) => this.webhooks.deleteWebhook(p);
  getWebhook: WebhookOutboxStore['getWebhook'] = (p) => this.webhooks.getWebhook(p);
  pendingWebhookEvents: WebhookOutboxStore['pendingWebhookEvents'] = (p) => this.webhooks.pendingWebhookEvents(p);
  markWebhookEvent: WebhookOutboxStore['markWebhookEvent'] = (p) => this.webhooks.markWebhookEvent(p);
  rearmWebhook: WebhookOutboxStore['rearmWebhook'] = (p) => this.webhooks.rearmWebhook(p);
  rearmWebhooks: WebhookOutboxStore['rearmWebhooks'] = (p) => this.webhooks.rearmWebhooks(p);
  recordWebhookDelivery: WebhookOutboxStore['recordWebhookDelivery'] = (p) => this.webhooks.recordWebhookDelivery(p);
  listWebhookDeliveries: WebhookOutboxStore['listWebhookDeliveries'] = (p) => this.webhooks.listWebhookDeliveries(p);

  // ---- API keys (ApiKeyStore): api-key-ops.ts --------------------------------------------------

  insertApiKey: ApiKeyStore['insertApiKey'] = (p) => this.apiKeys.insertApiKey(p);
  getApiKey: ApiKeyStore['getApiKey'] = (p) => this.apiKeys.getApiKey(p);
  listApiKeys: ApiKeyStore['listApiKeys'] = (p) => this.apiKeys.listApiKeys(p);
  revokeApiKey: ApiKeyStore['revokeApiKey'] = (p) => this.apiKeys.revokeApiKey(p);
  touchApiKey: ApiKeyStore['touchApiKey'] = (p) => this.apiKeys.touchApiKey(p);
  hasApiKeys: ApiKeyStore['hasApiKeys'] = () => this.apiKeys.hasApiKeys();
}
