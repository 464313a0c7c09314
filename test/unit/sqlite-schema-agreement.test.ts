/**
 * The SQLite schema (src/store/sqlite/migrations/*.sql) is plain SQL, never built from
 * TypeScript values; where it must agree with TypeScript, this test reads both and compares:
 * - every job state the SQL names is one of core/states.ts JOB_STATES, and each state list of
 *   a partial index is the TypeScript set it stands for (and the runtime statements that must
 *   read that index name the same list);
 * - the run-time buckets the triggers write are core/stats-window.ts durationBucket's
 *   (BUCKETS_PER_OCTAVE), and the states with a run time are stats-batch.ts TIMED_ENDS;
 * - the reasons the reap trigger counts are core/transitions.ts ZOMBIE_REASONS;
 * - the NEVER of the comments is core/workflow.ts NEVER.
 * The triggers are checked by running them on a database made from the files, not only by
 * reading their text. When a TypeScript constant changes, this fails: the SQL needs a new
 * migration file that changes it too.
 */
import assert from 'node:assert/strict';
import { DatabaseSync } from 'node:sqlite';
import { describe, it } from 'node:test';
import { BACKLOG_STATES, canTransition, JOB_STATES, TERMINAL_STATES } from '../../src/core/states.js';
import { BUCKETS_PER_OCTAVE, durationBucket } from '../../src/core/stats-window.js';
import { ZOMBIE_REASONS } from '../../src/core/transitions.js';
import { NEVER } from '../../src/core/workflow.js';
import { readMigrationFiles } from '../../src/store/migration-files.js';
import { TIMED_ENDS } from '../../src/store/sqlite/stats-batch.js';
import { TENANT_BACKLOG_SQL } from '../../src/store/sqlite/submit-ops.js';
import { FAILED_CHILD_SQL, OPEN_CHILD_SQL } from '../../src/store/sqlite/workflow-ops.js';

const files = readMigrationFiles(new URL('../../src/store/sqlite/migrations/', import.meta.url));
const text = files.map((f) => f.sql).join('\n');
const code = text.replace(/--[^\n]*/g, '');

/** A database made from the files, as migrate() makes it (without the bookkeeping table). */
function schemaDb(): DatabaseSync {
  const db = new DatabaseSync(':memory:');
  for (const f of files) db.exec(f.sql);
  return db;
}

/** The current definition of an index or trigger, from sqlite_master (what every later file left). */
function definition(db: DatabaseSync, name: string): string {
  const row = db.prepare('SELECT sql FROM sqlite_master WHERE name = ?').get(name) as { sql: string } | undefined;
  assert.ok(row, `${name} is in the schema`);
  return row.sql.replace(/--[^\n]*/g, '');
}

/** The quoted strings of a list `(...)` right after `what IN`. */
function listAfter(sql: string, what: RegExp): string[][] {
  const out: string[][] = [];
  for (const m of sql.matchAll(new RegExp(`${what.source}\\s+IN\\s*\\(((?:'(?:[^']|'')*'|[^')])*)\\)`, 'g'))) {
    out.push([...(m[1] as string).matchAll(/'((?:[^']|'')*)'/g)].map((x) => (x[1] as string).replaceAll("''", "'")));
  }
  return out;
}

const sorted = (xs: Iterable<string>) => [...xs].sort();

/** The one state list of an index's WHERE. */
function indexStates(db: DatabaseSync, index: string): string[] {
  const lists = listAfter(definition(db, index), /\bstate/);
  assert.equal(lists.length, 1, `${index}: one state list`);
  return sorted(lists[0] as string[]);
}

describe('the SQLite schema agrees with the TypeScript it stands beside', () => {
  it('every state the SQL compares a state column with is one of JOB_STATES', () => {
    const named = new Set<string>();
    for (const list of listAfter(code, /\bstate/)) for (const s of list) named.add(s);
    for (const m of code.matchAll(/\bstate\s*(?:=|<>|!=)\s*'([^']*)'/g)) named.add(m[1] as string);
    assert.ok(named.size >= 5, `found the state lists (${[...named]})`);
    for (const s of named) assert.ok((JOB_STATES as readonly string[]).includes(s), `'${s}' is not a state of core/states.ts JOB_STATES`);
  });

  it("each partial index's state list is the TypeScript set it stands for, as the statements that read it name it", () => {
    const db = schemaDb();
    const open = JOB_STATES.filter((s) => !TERMINAL_STATES.has(s));
    assert.deepEqual(indexStates(db, 'jobs_open_children'), sorted(open), 'jobs_open_children: JOB_STATES not in TERMINAL_STATES');
    assert.deepEqual(sorted(listAfter(OPEN_CHILD_SQL, /\bstate/)[0] ?? []), sorted(open), 'workflow-ops.ts OPEN_CHILD_SQL');
    assert.deepEqual(indexStates(db, 'jobs_ended'), sorted(TERMINAL_STATES), 'jobs_ended: TERMINAL_STATES');
    assert.deepEqual(indexStates(db, 'jobs_tenant_backlog'), sorted(BACKLOG_STATES), 'jobs_tenant_backlog: BACKLOG_STATES');
    assert.deepEqual(sorted(listAfter(TENANT_BACKLOG_SQL, /\bstate/)[0] ?? []), sorted(BACKLOG_STATES), 'submit-ops.ts TENANT_BACKLOG_SQL');
    // Due at run_at: the open states a job leaves for queued when its time comes.
    const due = JOB_STATES.filter((s) => !TERMINAL_STATES.has(s) && canTransition(s, 'queued'));
    assert.deepEqual(indexStates(db, 'jobs_due'), sorted(due), 'jobs_due: open states that move to queued');
    // The children a failFast parent fails for: ended, but not as succeeded (nor its expiry).
    const failedChildren = [...TERMINAL_STATES].filter((s) => s !== 'succeeded' && s !== 'expired');
    assert.deepEqual(indexStates(db, 'jobs_failed_children'), sorted(failedChildren), 'jobs_failed_children');
    assert.deepEqual(sorted(listAfter(FAILED_CHILD_SQL, /\bstate/)[0] ?? []), sorted(failedChildren), 'workflow-ops.ts FAILED_CHILD_SQL');
    db.close();
  });

  it('the triggers bucket run times as durationBucket does (BUCKETS_PER_OCTAVE), for the states of TIMED_ENDS', () => {
    const db = schemaDb();
    // The literal the comments and the expression carry.
    assert.match(code, new RegExp(`CAST\\(${BUCKETS_PER_OCTAVE} \\* log2\\(`), `the bucket expression multiplies by BUCKETS_PER_OCTAVE (${BUCKETS_PER_OCTAVE})`);
    for (const trigger of ['jobs_stats_insert_ended', 'jobs_stats_ended']) {
      const lists = listAfter(definition(db, trigger), /NEW\.state/);
      assert.deepEqual(lists.map(sorted), [sorted(TIMED_ENDS)], `${trigger}: the states with a run time are stats-batch.ts TIMED_ENDS`);
    }
    const samples = [0, 1, 2, 3, 7, 8, 15, 16, 100, 250, 999, 1000, 1023, 4095, 65_535, 3_600_000, 86_400_000, -5];
    const insert = db.prepare(
      `INSERT INTO jobs (id, tenant, type, state, priority, max_attempts, run_at, created_at, updated_at, started_at, finished_at, heartbeat_timeout_ms, result_ttl_ms, log)
       VALUES (?, 't', ?, 'running', 2, 3, 0, 0, 0, ?, NULL, 30000, 60000, '[]')`,
    );
    const end = db.prepare("UPDATE jobs SET state = 'succeeded', finished_at = ? WHERE id = ?");
    const minute = 120_000_000; // one minute of end for every sample: the bucket tells them apart by type
    samples.forEach((ms, i) => {
      insert.run(`j${i}`, `type${i}`, minute - ms);
      end.run(minute, `j${i}`);
    });
    // An insert already ended goes through the other trigger.
    db.prepare(
      `INSERT INTO jobs (id, tenant, type, state, priority, max_attempts, run_at, created_at, updated_at, started_at, finished_at, heartbeat_timeout_ms, result_ttl_ms, log)
       VALUES ('ins', 't', 'inserted', 'failed', 2, 3, 0, 0, 0, ?, ?, 30000, 60000, '[]')`,
    ).run(minute - 4095, minute);
    const rows = db.prepare('SELECT type, bucket, n FROM job_durations').all() as { type: string; bucket: number; n: number }[];
    const got = new Map(rows.map((r) => [r.type, r.bucket]));
    for (const [i, ms] of samples.entries()) assert.equal(got.get(`type${i}`), durationBucket(ms), `a run of ${ms} ms`);
    assert.equal(got.get('inserted'), durationBucket(4095), 'inserted ended');
    db.close();
  });

  it('the reap trigger counts the attempts whose reason is one of ZOMBIE_REASONS, and no other', () => {
    const db = schemaDb();
    const lists = listAfter(definition(db, 'job_attempts_reaped'), /NEW\.reason/);
    assert.deepEqual(lists, [[...ZOMBIE_REASONS]], 'the trigger lists core/transitions.ts ZOMBIE_REASONS, in order');
    db.prepare(
      `INSERT INTO jobs (id, tenant, type, state, priority, max_attempts, run_at, created_at, updated_at, heartbeat_timeout_ms, result_ttl_ms, log)
       VALUES ('j', 'acme', 't', 'retrying', 2, 3, 0, 0, 0, 30000, 60000, '[]')`,
    ).run();
    const attempt = db.prepare("INSERT INTO job_attempts (job_id, lease, attempt, ended_at, outcome, reason) VALUES ('j', ?, 1, 60000, 'x', ?)");
    let lease = 0;
    for (const reason of ZOMBIE_REASONS) attempt.run(++lease, reason);
    for (const reason of ['timeout', 'cancelled', 'failed: boom', 'heartbeat lost']) attempt.run(++lease, reason);
    assert.deepEqual({ ...db.prepare('SELECT tenant, minute, n FROM job_reaps').get() }, { tenant: 'acme', minute: 1, n: ZOMBIE_REASONS.length });
    db.close();
  });

  it("the comments' NEVER is core/workflow.ts NEVER", () => {
    const m = /core\/workflow\.ts NEVER \((\d+)\)/.exec(text);
    assert.ok(m, 'the schema says what NEVER is');
    assert.equal(Number(m[1]), NEVER);
  });
});
