/**
 * The distributed store: PostgreSQL through a `pg` Pool, shared by any number of API servers
 * and worker processes on any number of machines.
 *
 * - Round trips: a worker's cycle (its completions, then a claim) is one call of the SQL
 *   function `worker_cycle` (migrations/0001_baseline.sql), one round trip and one
 *   transaction whatever the batch size;
 *   `transition` is one call of `apply_transitions`; every other operation is one statement.
 *   Fixed statements are prepared once per connection (named statements).
 * - Claims take rows with FOR UPDATE SKIP LOCKED in queue order (priority, runAt, id).
 *   Per-type `concurrency` holds exactly across all workers: claims of a limited type take a
 *   transaction-level advisory lock on the type and count its running jobs after getting it
 *   (see migrations/0001_baseline.sql, "The claim"). Unlimited types never wait for each other.
 * - Every transition is a compare-and-swap on (id, state[, lease][, cancel flag]) and appends
 *   its log row in the same statement. Progress lives in its own (UNLOGGED) table: saving
 *   progress never writes a new version of the job row.
 * - Change signal: writers NOTIFY `<schema>_wake` when jobs may have become claimable;
 *   `pollChanges()` reads the wake-up channel on the process's LISTEN connection (see
 *   wake-listener.ts and listen-connection.ts).
 * - The sweeper is elected with a session advisory lock (`tryAcquireSweeperLock`).
 * - Connection loss: errors of idle pooled clients are logged, never thrown; a query that
 *   fails because the server went away rejects, and the next one opens a new connection.
 */
import pg from 'pg';
import { isUuid } from '../../core/ids.js';
import type { JobRecord, TransitionEntry } from '../../core/job.js';
import { DEFAULT_PRIORITY_AGING_MS } from '../../core/claim-plan.js';
import type {
  ClaimCycle,
  JobQueueStore,
  ClaimParams,
  GetJobParams,
  JobPage,
  ListJobsParams,
  MigrationResult,
  ResultFileStore,
  Store,
  SweepParams,
  ScheduleStore,
  RetentionStore,
  DeadLetterStore,
  WorkflowStore,
  TransitionParams,
  WebhookOutboxStore,
  StoreCapabilities,
} from '../store.js';
import { claimedRowToJob, JOB_SELECT, parseLog, rowToJob } from './rows.js';
import { STORE_TYPES } from './type-parsers.js';
import { checkTransition, endedArrays, encodeTransitions } from './transitions.js';
import { PgSubmitOps } from './submit-ops.js';
import { PgScheduleOps } from './schedule-ops.js';
import { PgWorkflowOps } from './workflow-ops.js';
import { PgRetentionOps } from './retention-ops.js';
import { PgDeadLetterOps } from './dead-letter-ops.js';
import { PgStatsOps } from './stats-ops.js';
import { PgLeaseOps } from './lease-ops.js';
import { PgResultFileOps } from './result-file-ops.js';
import { PgWebhookOps } from './webhook-ops.js';
import { PgApiKeyOps } from './api-key-ops.js';
import type { ApiKeyStore } from '../api-key-store.js';
import { applyMigrations, channelName, migrationFiles, SCHEMA_NAME } from './schema.js';
import { pendingClaim } from './log-sql.js';
import { SessionLock } from './session-lock.js';
import { LISTEN_NAME_SUFFIX, ListenConnection, type ListenLogger } from './listen-connection.js';
import { POSTGRES_NOTIFY, type PostgresNotifyShare } from './notify-share.js';
import { WakeListener } from './wake-listener.js';
import { claimTypes, capArrays } from './claim-args.js';
import { encodeJobCursor } from '../job-cursor.js';
import { listJobsSql } from './list-sql.js';

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database` (or `postgresql://`). */
  connectionString: string;
  /**
   * Connections in the query pool. Default 10: a process's worker loop, heartbeats, cancel
   * polling, progress and checkpoint writes and API reads each hold one only for a statement.
   * The store opens up to two more, outside the pool: the LISTEN connection (on the first
   * pollChanges, or when the NOTIFY event relay that Longhaul.open puts on it subscribes) and
   * the sweeper-lock connection (on the first tryAcquireSweeperLock).
   */
  poolSize?: number;
  /** Schema that holds Longhaul's tables. Default `longhaul`. */
  schema?: string;
  /** Where connection problems are reported (pino-compatible). */
  logger?: ListenLogger;
  /** Name the connections carry in pg_stat_activity. Default `longhaul`. */
  applicationName?: string;
}

/** An ordinal apply_transitions answered: applied, and deleted with it when negative (`deleteOnEnd`). */
function markApplied(ordinal: number, applied: boolean[], deleted?: boolean[]): void {
  const i = Math.abs(ordinal) - 1;
  applied[i] = true;
  if (ordinal < 0 && deleted) deleted[i] = true;
}

type Queryable = Pick<pg.ClientBase, 'query'>;

const DEFAULT_POOL_SIZE = 10;

export class PostgresStore implements Store {
  readonly capabilities: StoreCapabilities;
  readonly pool: pg.Pool;
  readonly schema: string;
  /** The LISTEN/NOTIFY channel of wake-ups. */
  readonly channel: string;
  private readonly s: string;
  /**
   * The process's one LISTEN connection, opened on first use: the store's wake-ups, and the
   * NOTIFY event relay when Longhaul.open creates it (see PostgresNotifyChannel's `listen`).
   */
  readonly listenConnection: ListenConnection;
  private readonly listener: WakeListener;
  private readonly sweeperLock: SessionLock;
  private closing: Promise<void> | null = null;
  private readonly sql: ReturnType<PostgresStore['statements']>;
  private readonly submit: PgSubmitOps;
  private readonly workflow: PgWorkflowOps;
  private readonly schedules: PgScheduleOps;
  private readonly retention: PgRetentionOps;
  private readonly deadLetters: PgDeadLetterOps;
  private readonly stats: PgStatsOps;
  private readonly leases: PgLeaseOps;
  private readonly resultFiles: PgResultFileOps;
  private readonly webhooks: PgWebhookOps;
  private readonly apiKeys: PgApiKeyOps;

  constructor(readonly options: PostgresStoreOptions) {
    this.schema = options.schema ?? 'longhaul';
    if (!SCHEMA_NAME.test(this.schema)) throw new Error(`invalid PostgreSQL schema name "${this.schema}": use lower-case letters, digits and _ (at most 40)`);
    const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
    if (!Number.isInteger(poolSize) || poolSize < 1) throw new Error('poolSize must be a positive integer');
    this.s = `"${this.schema}"`;
    this.channel = channelName(this.schema);
    const base: pg.ClientConfig = {
      connectionString: options.connectionString,
      application_name: options.applicationName ?? 'longhaul',
      keepAlive: true,
    };
    this.pool = new pg.Pool({ ...base, max: poolSize, idleTimeoutMillis: 30_000, connectionTimeoutMillis: 10_000, types: STORE_TYPES });
    // An idle client whose connection dies emits 'error' on the pool; unhandled, it would
    // crash the process. The pool drops that client and the next query connects anew.
    this.pool.on('error', (err) => options.logger?.warn({ err }, 'PostgreSQL connection lost (idle pooled client); it will be replaced'));
    // pg-pool leaves a checked-out client without a lasting 'error' listener: a connection that
    // dies at the wrong moment (server restart) would crash the process with an unhandled
    // 'error' event. The statement in flight rejects anyway and the pool drops broken clients.
    this.pool.on('connect', (client) => client.on('error', () => undefined));
    this.listenConnection = new ListenConnection({ ...base, application_name: `${base.application_name}${LISTEN_NAME_SUFFIX}` }, options.logger);
    this.listener = new WakeListener(this.listenConnection, this.channel);
    this.sweeperLock = new SessionLock({ ...base, application_name: `${base.application_name}:sweeper` }, `${this.schema}:sweeper`, options.logger);
    this.sql = this.statements();
    const host = { pool: this.pool, s: this.s, inTransaction: this.inTransaction.bind(this) };
    const rows = this.rows.bind(this);
    this.submit = new PgSubmitOps({ ...host, schema: this.schema, channel: this.channel, rows });
    this.workflow = new PgWorkflowOps({ ...host, insertOn: (jobs, client) => this.submit.insertMany(jobs, {}, client) });
    this.schedules = new PgScheduleOps(this.pool, this.s);
    this.retention = new PgRetentionOps(this.pool, this.s);
    this.deadLetters = new PgDeadLetterOps(this.pool, this.s);
    this.stats = new PgStatsOps(this.pool, this.s, rows);
    this.leases = new PgLeaseOps(this.pool, this.s, rows);
    this.resultFiles = new PgResultFileOps(this.pool, this.s, rows);
    this.webhooks = new PgWebhookOps(this.pool, this.s, rows);
    this.apiKeys = new PgApiKeyOps(this.pool, this.s);
    this.capabilities = {
      transactionalEnqueue: true,
      claimDepth: 2,
      notify: {
        kind: POSTGRES_NOTIFY,
        connectionString: options.connectionString,
        channel: `${this.schema}_events`,
        shared: { pool: this.pool, listen: this.listenConnection } satisfies PostgresNotifyShare,
      },
    };
  }

  /** Statement texts, built once with the schema filled in. */
  private statements() {
    const s = this.s;
    const from = `FROM ${s}.jobs j LEFT JOIN ${s}.progress p ON p.job_id = j.id`;
    const sweep = (where: string) => `SELECT ${JOB_SELECT} ${from} WHERE ${where} LIMIT $2`;
    return {
      getJob: `SELECT ${JOB_SELECT} ${from} WHERE j.id = $1`,
      getJobs: `SELECT ${JOB_SELECT} ${from} WHERE j.id = ANY($1::uuid[])`,
      // (A claim's entry waits in the row until the job's next change: see "Wire formats" in migrations/0001_baseline.sql.)
      transitions: `SELECT j.tenant, '[' || j.log || ${pendingClaim('j')} || ']' FROM ${s}.jobs j WHERE j.id = $1`,
      // (The worker's cycle: migrations/0001_baseline.sql, "The claim".)
      cycle: `SELECT * FROM ${s}.worker_cycle($1::uuid[], $2::integer[], $3::integer[], $4::bigint[], $5::bigint[], $6::text[],
        $7::json, $8, $9, $10::text[], $11::integer[], $12, $13, $14::integer[], $15::integer[], $16::bigint[], $17, $18::text[], $19::integer[], $20)`,
      apply: `SELECT ${s}.apply_transitions($1::json, $2)`,
      promote: `SELECT ${s}.promote_due($1, $2)`,
      sweep: {
        stale: sweep("j.state = 'running' AND j.heartbeat_at < $1 - j.heartbeat_timeout_ms"),
        'timed-out': sweep("j.state = 'running' AND j.timeout_ms IS NOT NULL AND NOT j.cancel_requested AND j.started_at + j.timeout_ms < $1"),
        drained: sweep("j.state = 'running' AND j.cancel_requested AND j.cancel_requested_at + $3 < $1"),
        stalled: sweep(`j.state = 'running' AND NOT j.stalled AND j.stall_timeout_ms IS NOT NULL AND j.heartbeat_at >= $1 - j.heartbeat_timeout_ms
          AND greatest(coalesce(p.updated_at, 0), j.started_at) + j.stall_timeout_ms < $1`),
        expired: sweep("j.state = 'succeeded' AND j.expires_at IS NOT NULL AND j.expires_at < $1"),
      } satisfies Record<SweepParams['kind'], string>,
    };
  }

  /** Rows in array mode; a named (prepared) statement unless it runs on a caller's client. */
  private async rows(name: string, text: string, values: unknown[], client?: Queryable): Promise<unknown[][]> {
    const res = client ? await client.query({ text, values, rowMode: 'array' }) : await this.pool.query({ name: `lh_${name}`, text, values, rowMode: 'array' });
    return res.rows as unknown[][];
  }

  private async inTransaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken = false;
    // A checked-out client has no 'error' listener (the pool's is only on idle clients): a
    // connection lost mid-transaction (server restart) would crash the process. The query in
    // flight rejects anyway; the client is dropped instead of going back to the pool.
    const lost = () => {
      broken = true;
    };
    client.on('error', lost);
    try {
      await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
      throw err;
    } finally {
      client.removeListener('error', lost);
      client.release(broken);
    }
  }

  // ---- schema ---------------------------------------------------------------------------

  /**
   * Applies pending migrations (the files of migrations/, up to `to` or the latest) in one
   * transaction under an advisory lock (schema.ts applyMigrations): safe from several machines.
   */
  async migrate(to?: number): Promise<MigrationResult> {
    return this.inTransaction((client) => applyMigrations(client, this.schema, to));
  }

  async schemaVersion(): Promise<number> {
    const res = await this.pool.query<{ v: number }>(
      `SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE (SELECT coalesce(max(version), 0)::integer FROM ${this.s}.schema_migrations) END AS v`,
      [`${this.s}.schema_migrations`],
    );
    return res.rows[0]?.v ?? 0;
  }

  async ping(): Promise<void> {
    await this.rows('ping', `SELECT 1 FROM ${this.s}.schema_migrations LIMIT 1`, []);
  }

  /** Number of migrations this version of Longhaul knows. */
  static get latestVersion(): number {
    return migrationFiles().length;
  }

  async close(): Promise<void> {
    this.closing ??= (async () => {
      this.listener.close();
      await Promise.all([this.listenConnection.close(), this.sweeperLock.close()]);
      await this.pool.end();
    })();
    return this.closing;
  }

  // ---- submit: submit-ops.ts ----------------------------------------------------------------

  insertJob: JobQueueStore['insertJob'] = (p) => this.submit.insertJob(p);
  insertJobs: JobQueueStore['insertJobs'] = (p) => this.submit.insertJobs(p);

  // ---- reads ------------------------------------------------------------------------------

  async getJob(params: GetJobParams): Promise<JobRecord | null> {
    if (!isUuid(params.id)) return null;
    const [row] = await this.rows('get', this.sql.getJob, [params.id]);
    if (!row) return null;
    const job = rowToJob(row);
    return params.tenant !== undefined && job.tenant !== params.tenant ? null : job;
  }

  async getJobs(params: { ids: readonly string[] }): Promise<JobRecord[]> {
    const ids = params.ids.filter(isUuid);
    if (ids.length === 0) return [];
    return (await this.rows('get_many', this.sql.getJobs, [ids])).map((r) => rowToJob(r));
  }

  async getTransitions(params: GetJobParams): Promise<TransitionEntry[] | null> {
    if (!isUuid(params.id)) return null;
    const [row] = await this.rows('transitions', this.sql.transitions, [params.id]);
    if (!row || (params.tenant !== undefined && row[0] !== params.tenant)) return null;
    return parseLog(row[1] as string);
  }

  async listJobs(params: ListJobsParams): Promise<JobPage> {
    const { name, text, values, limit } = listJobsSql(this.s, params);
    const rows = await this.rows(name, text, values);
    const items = rows.slice(0, limit).map((r) => rowToJob(r));
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > limit && last ? encodeJobCursor(last.id) : null };
  }

  // ---- stats: stats-ops.ts (counters kept by the baseline's statistics triggers) -------------

  countByState: JobQueueStore['countByState'] = (p) => this.stats.countByState(p);
  countByTypeAndState: JobQueueStore['countByTypeAndState'] = (p) => this.stats.countByTypeAndState(p);
  activity: JobQueueStore['activity'] = (p) => this.stats.activity(p);
  sweepHealth: JobQueueStore['sweepHealth'] = (p) => this.stats.sweepHealth(p);
  compactStats: JobQueueStore['compactStats'] = (p) => this.stats.compactStats(p);

  async traceParents(params: { ids: readonly string[] }): Promise<Map<string, string>> {
    if (params.ids.length === 0) return new Map();
    const rows = await this.rows('trace_parents', `SELECT id::text, trace_parent FROM ${this.s}.jobs WHERE id = ANY($1::uuid[]) AND trace_parent IS NOT NULL`, [params.ids]);
    return new Map(rows.map((r) => [r[0] as string, r[1] as string]));
  }

  // ---- claims and transitions ---------------------------------------------------------------

  async claimJobs(params: ClaimParams): Promise<JobRecord[]> {
    if (params.limit <= 0 || params.types.length === 0) return [];
    return (await this.cycle([], params)).jobs;
  }

  async completeAndClaim(params: { complete: TransitionParams[]; claim: ClaimParams }): Promise<ClaimCycle> {
    for (const p of params.complete) checkTransition(p);
    return this.cycle(params.complete, params.claim);
  }

  private async cycle(complete: TransitionParams[], claim: ClaimParams): Promise<ClaimCycle> {
    const applied = complete.map(() => false);
    const deleted = complete.map(() => false);
    // Retention 0's successes as arrays (end_succeeded), the other completions as JSON.
    const ended = endedArrays(complete, claim.workerId);
    const { json, rounds } = encodeTransitions(complete, ended.skip);
    const limit = claim.types.length > 0 ? Math.max(0, Math.floor(claim.limit)) : 0;
    if (rounds === 0 && ended.count === 0 && limit === 0) return { applied, jobs: [], deleted };
    const { names, limits, keyLimits, rateMax, ratePer } = claimTypes(claim.types);
    const [capTenants, caps, capOthers] = capArrays(claim.tenantCaps);
    const aging = claim.agingMs === undefined ? DEFAULT_PRIORITY_AGING_MS : claim.agingMs;
    // Read once (a getter reading the clock): the claimed rows leave out the claim's time, which is this.
    const now = claim.now;
    const rows = await this.rows('cycle', this.sql.cycle, [
      ended.ids,
      ended.leases,
      ended.ords,
      ended.ats,
      ended.expires,
      ended.results,
      json,
      rounds,
      claim.workerId,
      names,
      limits,
      limit,
      now,
      keyLimits,
      rateMax,
      ratePer,
      aging,
      capTenants,
      caps,
      capOthers,
    ]);
    const jobs: JobRecord[] = [];
    let wakeAt: number | undefined;
    for (const r of rows) {
      // One row with every applied ordinal, then the claimed jobs (worker_cycle). The last column:
      // the wake row's time, or a job's claim time when a rate limit moved it past `now`.
      const last = r[r.length - 1];
      if (r[0] !== null) for (const o of r[0] as number[]) markApplied(o, applied, deleted);
      else if (r[1] === null) wakeAt = Number(last);
      else jobs.push(claimedRowToJob(r, 1, claim.workerId, last === null ? now : Number(last)));
    }
    return wakeAt === undefined ? { applied, jobs, deleted } : { applied, jobs, deleted, wakeAt };
  }

  async transition(params: { items: TransitionParams[] }): Promise<boolean[]> {
    for (const p of params.items) checkTransition(p);
    const applied = params.items.map(() => false);
    const { json, rounds } = encodeTransitions(params.items);
    if (rounds === 0) return applied;
    const [row] = await this.rows('apply', this.sql.apply, [json, rounds]);
    for (const o of (row?.[0] as number[] | null) ?? []) markApplied(o, applied);
    return applied;
  }

  async promoteDue(params: { now: number; limit: number }): Promise<number> {
    const [row] = await this.rows('promote', this.sql.promote, [params.now, Math.max(1, Math.floor(params.limit))]);
    return Number(row?.[0] ?? 0);
  }

  // ---- lease-holder writes: lease-ops.ts ------------------------------------------------------

  heartbeat: JobQueueStore['heartbeat'] = (p) => this.leases.heartbeat(p);
  leaseStatus: JobQueueStore['leaseStatus'] = (p) => this.leases.leaseStatus(p);
  saveProgress: JobQueueStore['saveProgress'] = (p) => this.leases.saveProgress(p);
  saveCheckpoint: JobQueueStore['saveCheckpoint'] = (p) => this.leases.saveCheckpoint(p);

  // ---- sweeper --------------------------------------------------------------------------------

  async sweepCandidates(params: SweepParams): Promise<JobRecord[]> {
    const values: unknown[] = [params.now, Math.max(0, Math.floor(params.limit))];
    if (params.kind === 'drained') values.push(params.drainMs ?? 0);
    const rows = await this.rows(`sweep_${params.kind}`, this.sql.sweep[params.kind], values);
    return rows.map((r) => rowToJob(r));
  }

  /**
   * Sweeper election: true while this store's process holds the cluster-wide sweeper lock
   * (a session advisory lock on a dedicated connection), otherwise one non-blocking try.
   * The lock is released by close(), or by PostgreSQL when this process's session ends.
   */
  tryAcquireSweeperLock(): Promise<boolean> {
    return this.sweeperLock.tryAcquire();
  }

  releaseSweeperLock(): Promise<void> {
    return this.sweeperLock.release();
  }

  async pollChanges(): Promise<boolean> {
    return this.listener.take();
  }

  onChanges(listener: () => void): () => void {
    return this.listener.subscribe(listener);
  }

  /** Whether the wake-up channel is listened to, and on which backend (tests, health checks). */
  get listenState(): { connected: boolean; backendPid: number | null } {
    return { connected: this.listener.connected, backendPid: this.listener.backendPid };
  }

  // ---- workflows (WorkflowStore): workflow-ops.ts ------------------------------------------------

  suspend: WorkflowStore['suspend'] = (p) => this.workflow.suspend(p);
  saveWorkflow: WorkflowStore['saveWorkflow'] = (p) => this.workflow.saveWorkflow(p);
  resumeParents: WorkflowStore['resumeParents'] = (p) => this.workflow.resumeParents(p);
  resumeStrandedParents: WorkflowStore['resumeStrandedParents'] = (p) => this.workflow.resumeStrandedParents(p);
  sendSignal: WorkflowStore['sendSignal'] = (p) => this.workflow.sendSignal(p);
  consumedSignal: WorkflowStore['consumedSignal'] = (p) => this.workflow.consumedSignal(p);
  countChildren: WorkflowStore['countChildren'] = (p) => this.workflow.countChildren(p);

  // ---- schedules (ScheduleStore): schedule-ops.ts -----------------------------------------------

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

  // ---- dead letters (DeadLetterStore): dead-letter-ops.ts (attempts are written by apply_transitions) --

  listAttempts: DeadLetterStore['listAttempts'] = (p) => this.deadLetters.listAttempts(p);
  deadLetterGroups: DeadLetterStore['deadLetterGroups'] = (p) => this.deadLetters.deadLetterGroups(p);
  failedJobs: DeadLetterStore['failedJobs'] = (p) => this.deadLetters.failedJobs(p);

  // ---- result files (ResultFileStore): result-file-ops.ts -------------------------------------

  recordResult: ResultFileStore['recordResult'] = (p) => this.resultFiles.recordResult(p);
  unrecordResult: ResultFileStore['unrecordResult'] = (p) => this.resultFiles.unrecordResult(p);
  listResults: ResultFileStore['listResults'] = (p) => this.resultFiles.listResults(p);
  deleteResults: ResultFileStore['deleteResults'] = (p) => this.resultFiles.deleteResults(p);
  countDownload: ResultFileStore['countDownload'] = (p) => this.resultFiles.countDownload(p);

  // ---- the webhook outbox (WebhookOutboxStore): webhook-ops.ts ----------------------------------

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
