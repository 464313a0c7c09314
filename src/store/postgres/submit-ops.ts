/**
 * PostgresStore's submission (insertJob, insertJobs of the JobQueueStore in ../store.ts): one
 * statement for a batch without idempotency keys or tenant limits; otherwise a transaction (the
 * store's, or the caller's `tx`) that reads the stored keys, counts the limited tenants under an
 * advisory lock, and inserts the rest in one statement. An insert of queued jobs NOTIFYs the
 * wake-up channel in the same statement. The workflow ops insert a job's children through
 * `insertMany` on their own transaction.
 */
import pg from 'pg';
import { InvalidOptionsError } from '../../core/errors.js';
import { type JobRecord, priorityRank } from '../../core/job.js';
import { keyReusable } from '../../core/retention.js';
import { insertedRecord, type InsertJobParams, type InsertJobsParams, type InsertResult, type NewJob, type SqlTransaction } from '../store.js';
import { batchRefusal, countCap, limitOf, refuseBatch, type TenantRoom, takeRoom, tenantRoom } from '../tenant-room.js';
import { JOB_SELECT, JOB_WIDTH, rowToJob } from './rows.js';

type Client = pg.ClientBase;
type Queryable = Pick<pg.ClientBase, 'query'>;
/** The store's rows in array mode; a named (prepared) statement unless it runs on a caller's client. */
type Rows = (name: string, text: string, values: unknown[], client?: Queryable) => Promise<unknown[][]>;

/** What the operations need of the store: its schema, wake-up channel, statements and transactions. */
export interface PgSubmitHost {
  /** The quoted schema. */
  s: string;
  /** The schema's name (the key of the tenant advisory locks). */
  schema: string;
  /** The LISTEN/NOTIFY channel of wake-ups. */
  channel: string;
  rows: Rows;
  inTransaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T>;
}

/** The limits an insert keeps (InsertJobParams); none for the jobs a job spawns. */
type InsertLimits = Pick<InsertJobsParams, 'maxBacklog' | 'idempotencyTtlMs' | 'maxTenantBacklog' | 'wholeBatch'>;

const BACKLOG_STATES_SQL = "('pending', 'queued', 'retrying')";

/** The backlogs (pending, queued, retrying) of tenants $1, each counted up to its cap in $2: rows (tenant, count). */
export function tenantBacklogSql(s: string): string {
  return `SELECT t.tenant, (SELECT count(*)::integer FROM (SELECT 1 FROM ${s}.jobs j
      WHERE j.tenant = t.tenant AND j.state IN ${BACKLOG_STATES_SQL} LIMIT t.cap) b)
    FROM unnest($1::text[], $2::integer[]) AS t(tenant, cap)`;
}

/** The caller's client for a transactional enqueue, checked as far as we can. */
function transactionClient(tx: SqlTransaction): Client {
  const candidate = tx as unknown as { query?: unknown; totalCount?: unknown; idleCount?: unknown };
  if (typeof candidate !== 'object' || candidate === null || typeof candidate.query !== 'function') {
    throw new InvalidOptionsError('tx must be a pg client (a Client, or a PoolClient from pool.connect()) with an open transaction');
  }
  if (tx instanceof pg.Pool || (typeof candidate.totalCount === 'number' && typeof candidate.idleCount === 'number')) {
    throw new InvalidOptionsError('tx must be a client in an open transaction (from pool.connect()), not the pool itself');
  }
  return tx as unknown as Client;
}

/** A job as a JSON object for json_to_recordset (`source` in statements() below). */
function jobJson(job: NewJob, o: number): Record<string, unknown> {
  return {
    o,
    id: job.id,
    tenant: job.tenant,
    type: job.type,
    state: job.state,
    priority: priorityRank(job.priority),
    input: job.input ?? null,
    metadata: job.metadata ?? null,
    max_attempts: job.maxAttempts,
    run_at: job.runAt,
    created_at: job.createdAt,
    timeout_ms: job.timeoutMs,
    heartbeat_timeout_ms: job.heartbeatTimeoutMs,
    stall_timeout_ms: job.stallTimeoutMs,
    result_ttl_ms: job.resultTtlMs,
    parent_id: job.parentId,
    idempotency_key: job.idempotencyKey,
    request_hash: job.requestHash,
    ckey: job.concurrencyKey ?? null,
    trace_parent: job.traceParent ?? null,
  };
}

/** Statement texts, built once with the schema filled in. */
function statements(s: string, schema: string, channel: string) {
  const from = `FROM ${s}.jobs j LEFT JOIN ${s}.progress p ON p.job_id = j.id`;
  const source = `json_to_recordset($1::json) AS x(o integer, id uuid, tenant text, type text, state text, priority smallint, input json,
      metadata json, max_attempts integer, run_at bigint, created_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
      stall_timeout_ms bigint, result_ttl_ms bigint, parent_id text, idempotency_key text, request_hash text, ckey text, trace_parent text)`;
  // `traced`: the jobs carry a trace context. Only then does the insert name trace_parent, so a
  // store of this version still inserts into a schema migrated by an older one.
  const insert = (backlog: boolean, traced = false) => `
      WITH src AS (SELECT * FROM ${source}),
      ${backlog ? `backlog AS (SELECT count(*)::integer AS n FROM (SELECT 1 FROM ${s}.jobs WHERE state IN ${BACKLOG_STATES_SQL} LIMIT $2) b),` : ''}
      ins AS (
        INSERT INTO ${s}.jobs (id, tenant, type, state, priority, input, metadata, max_attempts, run_at, created_at, updated_at,
          timeout_ms, heartbeat_timeout_ms, stall_timeout_ms, result_ttl_ms, parent_id, idempotency_key, request_hash, ckey, log${traced ? ', trace_parent' : ''})
        SELECT src.id, src.tenant, src.type, src.state, src.priority, src.input, src.metadata, src.max_attempts, src.run_at, src.created_at,
          src.created_at, src.timeout_ms, src.heartbeat_timeout_ms, src.stall_timeout_ms, src.result_ttl_ms, src.parent_id,
          src.idempotency_key, src.request_hash, src.ckey, json_build_array(NULL::text, src.state, src.created_at, 'submitted', 0, NULL::text)::text${traced ? ', src.trace_parent' : ''}
        FROM src
        ${backlog ? 'WHERE src.o <= $2 - (SELECT n FROM backlog)' : ''}
        ORDER BY src.o
        ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, state
      ), wake AS (
        SELECT pg_notify('${channel}', '') FROM (SELECT 1 FROM ins WHERE ins.state = 'queued' LIMIT 1) one
      )
      SELECT ins.id::text, (SELECT count(*) FROM wake) FROM ins`;
  return {
    insert: insert(false),
    insertWithBacklog: insert(true),
    insertTraced: insert(false, true),
    insertWithBacklogTraced: insert(true, true),
    byKeys: `SELECT ${JOB_SELECT}, j.request_hash ${from}
        WHERE (j.tenant, j.idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
    backlog: `SELECT count(*)::integer FROM (SELECT 1 FROM ${s}.jobs WHERE state IN ${BACKLOG_STATES_SQL} LIMIT $1) b`,
    // Locks first, counts in a statement of their own: under READ COMMITTED a statement's
    // snapshot is taken when it starts, so a count made in the statement that waited for a
    // lock would miss the jobs the lock's previous holder committed.
    lockTenants: `SELECT count(pg_advisory_xact_lock(hashtext('${schema}:tenant-backlog'), hashtext(t))), current_setting('transaction_isolation')
        FROM unnest($1::text[]) AS t`,
    tenantBacklog: tenantBacklogSql(s),
  };
}

export class PgSubmitOps {
  private readonly s: string;
  private readonly rows: Rows;
  private readonly sql: ReturnType<typeof statements>;

  constructor(private readonly host: PgSubmitHost) {
    this.s = host.s;
    this.rows = host.rows;
    this.sql = statements(host.s, host.schema, host.channel);
  }

  async insertJob(params: InsertJobParams): Promise<InsertResult> {
    const client = params.tx === undefined ? undefined : transactionClient(params.tx);
    const [result] = await this.insertMany([params.job], params, client);
    return result as InsertResult;
  }

  async insertJobs(params: InsertJobsParams): Promise<InsertResult[]> {
    const client = params.tx === undefined ? undefined : transactionClient(params.tx);
    if (params.jobs.length === 0) return [];
    return this.insertMany(params.jobs, params, client);
  }

  async insertMany(jobs: NewJob[], limits: InsertLimits, client: Client | undefined): Promise<InsertResult[]> {
    const { maxBacklog } = limits;
    // Keys to look up, or tenant limits to count under a lock: a transaction of a few statements.
    if (limits.maxTenantBacklog !== undefined || jobs.some((j) => j.idempotencyKey !== null)) {
      return client ? this.insertKeyed(jobs, limits, client) : this.host.inTransaction((c) => this.insertKeyed(jobs, limits, c));
    }
    // No idempotency keys: one statement inserts the jobs that fit under the backlog limit.
    const json = JSON.stringify(jobs.map((j, i) => jobJson(j, i + 1)));
    const traced = jobs.some((j) => j.traceParent);
    const rows =
      maxBacklog === undefined
        ? traced
          ? await this.rows('insert_traced', this.sql.insertTraced, [json], client)
          : await this.rows('insert', this.sql.insert, [json], client)
        : traced
          ? await this.rows('insert_backlog_traced', this.sql.insertWithBacklogTraced, [json, Math.max(0, Math.floor(maxBacklog))], client)
          : await this.rows('insert_backlog', this.sql.insertWithBacklog, [json, Math.max(0, Math.floor(maxBacklog))], client);
    return jobs.map((job, i) => (i < rows.length ? { kind: 'created', job: insertedRecord(job) } : { kind: 'full', backlog: maxBacklog ?? 0 }));
  }

  /**
   * The stored backlogs of the limited tenants among `jobs`, each counted up to its limit after
   * taking a transaction-level advisory lock on the tenant (in a fixed order: no deadlock between
   * two batches). A concurrent insert for the same tenant waits for this transaction to end, and
   * its own count (a new statement: a new snapshot under READ COMMITTED) then sees these jobs.
   */
  private async countTenants(jobs: NewJob[], room: TenantRoom, client: Client): Promise<Map<string, number>> {
    const tenants = [...new Set(jobs.map((j) => j.tenant))].filter((t) => limitOf(room, t) !== undefined).sort();
    const counts = new Map<string, number>();
    if (tenants.length === 0) return counts;
    const caps = tenants.map((t) => countCap(limitOf(room, t) as number));
    const [locked] = await this.rows('lock_tenants', this.sql.lockTenants, [tenants], client);
    // A snapshot per transaction (a caller's REPEATABLE READ or SERIALIZABLE tx) would count
    // without the jobs committed while the lock was awaited: the limit could be passed.
    if (locked?.[1] !== 'read committed') {
      throw new InvalidOptionsError(`tenant quotas need the transaction at READ COMMITTED isolation (it is ${String(locked?.[1])}): its count of the tenant's jobs would miss concurrent submissions`, 'tx');
    }
    const rows = await this.rows('tenant_backlog', this.sql.tenantBacklog, [tenants, caps], client);
    for (const r of rows) counts.set(r[0] as string, Number(r[1]));
    return counts;
  }

  /**
   * Jobs with idempotency keys, inside a transaction (ours or the caller's): keys already
   * stored answer existing/conflict, the rest is inserted in one statement, and a key that a
   * concurrent transaction inserted first (ON CONFLICT DO NOTHING) is read back and answered
   * as existing/conflict too.
   */
  private async insertKeyed(jobs: NewJob[], limits: InsertLimits, client: Client): Promise<InsertResult[]> {
    const { maxBacklog, idempotencyTtlMs } = limits;
    const keyOf = (tenant: string, key: string) => `${tenant}\u0000${key}`;
    const keyed = jobs.filter((j) => j.idempotencyKey !== null);
    const readKeys = async (list: NewJob[]) => {
      const found = new Map<string, { job: JobRecord; hash: string | null }>();
      if (list.length === 0) return found;
      const rows = await this.rows('by_keys', this.sql.byKeys, [list.map((j) => j.tenant), list.map((j) => j.idempotencyKey as string)], client);
      for (const r of rows) {
        const job = rowToJob(r);
        found.set(keyOf(job.tenant, job.idempotencyKey as string), { job, hash: (r[JOB_WIDTH] as string | null) ?? null });
      }
      return found;
    };
    const stored = await readKeys(keyed);
    // Keys whose job failed, was cancelled or outlived the key's lifetime move to the new job:
    // the old job keeps its row without a key (a concurrent transaction doing the same finds the
    // key free too, and then one insert wins ON CONFLICT and the other answers with its job).
    const released: string[] = [];
    for (const job of keyed) {
      const k = keyOf(job.tenant, job.idempotencyKey as string);
      const held = stored.get(k);
      if (held && keyReusable(held.job, job.createdAt, idempotencyTtlMs)) {
        released.push(held.job.id);
        stored.delete(k);
      }
    }
    if (released.length > 0) await client.query(`UPDATE ${this.s}.jobs SET idempotency_key = NULL WHERE id = ANY($1::uuid[])`, [released]);
    let backlog = 0;
    if (maxBacklog !== undefined) {
      const [row] = await this.rows('backlog', this.sql.backlog, [Math.max(0, Math.floor(maxBacklog))], client);
      backlog = Number(row?.[0] ?? 0);
    }
    const room = tenantRoom(limits.maxTenantBacklog);
    const tenantBacklogs = room ? await this.countTenants(jobs, room, client) : null;
    const results: (InsertResult | null)[] = jobs.map(() => null);
    const planned = new Set<string>(); // keys of the jobs planned for insert
    const duplicates: number[] = []; // jobs whose key an earlier job of the batch is inserting
    const toInsert: number[] = [];
    const answer = (job: NewJob, existing: { job: JobRecord; hash: string | null }): InsertResult => ({
      kind: existing.hash === job.requestHash ? 'existing' : 'conflict',
      job: existing.job,
    });
    jobs.forEach((job, i) => {
      const k = job.idempotencyKey === null ? null : keyOf(job.tenant, job.idempotencyKey);
      if (k !== null) {
        const existing = stored.get(k);
        if (existing) {
          results[i] = answer(job, existing);
          return;
        }
        if (planned.has(k)) {
          duplicates.push(i);
          return;
        }
      }
      if (maxBacklog !== undefined && backlog >= maxBacklog) {
        results[i] = { kind: 'full', backlog: maxBacklog };
        return;
      }
      const refused = room ? takeRoom(room, job.tenant, (t) => tenantBacklogs?.get(t) ?? 0) : null;
      if (refused) {
        results[i] = refused;
        return;
      }
      backlog++;
      toInsert.push(i);
      if (k !== null) planned.add(k);
    });
    const refusal = room && limits.wholeBatch ? batchRefusal(results, room) : null;
    if (refusal) return refuseBatch(results, refusal);
    // Who owns each planned key once the insert is done: our job, or a concurrent winner's.
    const owners = new Map<string, { job: JobRecord; hash: string | null }>();
    if (toInsert.length > 0) {
      const json = JSON.stringify(toInsert.map((i) => jobJson(jobs[i] as NewJob, i + 1)));
      const rows = toInsert.some((i) => jobs[i]?.traceParent)
        ? await this.rows('insert_traced', this.sql.insertTraced, [json], client)
        : await this.rows('insert', this.sql.insert, [json], client);
      const inserted = new Set(rows.map((r) => r[0] as string));
      const lost: NewJob[] = [];
      for (const i of toInsert) {
        const job = jobs[i] as NewJob;
        if (!inserted.has(job.id)) {
          lost.push(job);
          continue;
        }
        const record = insertedRecord(job);
        results[i] = { kind: 'created', job: record };
        if (job.idempotencyKey !== null) owners.set(keyOf(job.tenant, job.idempotencyKey), { job: record, hash: job.requestHash });
      }
      if (lost.length > 0) {
        // Another transaction inserted these keys since we looked: answer with its job.
        const winners = await readKeys(lost);
        for (const job of lost) {
          const k = keyOf(job.tenant, job.idempotencyKey as string);
          const winner = winners.get(k);
          if (!winner) throw new Error(`idempotency key "${job.idempotencyKey}" is being used by a concurrent transaction; retry the submission`);
          owners.set(k, winner);
          results[jobs.indexOf(job)] = answer(job, winner);
        }
      }
    }
    for (const i of duplicates) {
      const job = jobs[i] as NewJob;
      results[i] = answer(job, owners.get(keyOf(job.tenant, job.idempotencyKey as string)) as { job: JobRecord; hash: string | null });
    }
    return results as InsertResult[];
  }
}
