/**
 * The PostgreSQL migration files hold values that TypeScript holds too: the job states, the patch
 * mask of apply_transitions's items, the reasons of a zombie reap, the run-time buckets. No
 * migration text is built from TypeScript, so this test reads both and compares: a change on
 * one side alone fails here (and the fix is a new migration, never an edit of a released one).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { durationBucket } from '../../src/core/stats-window.js';
import { JOB_STATES } from '../../src/core/states.js';
import { ZOMBIE_REASONS } from '../../src/core/transitions.js';
import { migrationFiles } from '../../src/store/postgres/schema.js';
import { PATCH } from '../../src/store/postgres/transitions.js';
import { createTestDatabase } from '../support/postgres.js';

/** Every migration file, in order: a later file's definition replaces an earlier one's. */
const sql = migrationFiles()
  .map((f) => f.sql)
  .join('\n');

/** The SQL string literals of a list `('a', 'b', ...)`. */
const literals = (list: string) => [...list.matchAll(/'((?:[^']|'')*)'/g)].map((m) => (m[1] as string).replaceAll("''", "'"));

/** The last match of `re` in the migrations (the current definition). */
function last(re: RegExp): RegExpMatchArray {
  const all = [...sql.matchAll(new RegExp(re.source, `${re.flags.replace('g', '')}g`))];
  assert.ok(all.length > 0, `no match for ${re} in the PostgreSQL migrations`);
  return all.at(-1) as RegExpMatchArray;
}

describe('PostgreSQL migrations agree with TypeScript', () => {
  it("the jobs table's state check lists core/states.ts JOB_STATES", () => {
    const check = last(/state text NOT NULL CHECK \(state IN \(([^)]*)\)\)/);
    assert.deepEqual(literals(check[1] as string), [...JOB_STATES]);
  });

  it('the patch mask table and every use of a bit name the bits of transitions.ts PATCH', () => {
    const table = last(/-- The patch mask \(item key m\)[^\n]*\n((?:--\s+\d+\s+\w+[^\n]*\n)+)/);
    const rows = [...(table[1] as string).matchAll(/--\s+(\d+)\s+(\w+)/g)].map((m) => [m[2], Number(m[1])]);
    assert.deepEqual(Object.fromEntries(rows), PATCH);
    // Each test of a bit in the SQL says which bit it means: `i.m & 1024 /* stalled */`.
    const uses = [...sql.matchAll(/\.m & (\d+)(?: \/\* (\w+) \*\/)?/g)];
    assert.ok(uses.length >= 20, 'the mask is tested in apply_transitions');
    for (const [text, bit, name] of uses) {
      assert.ok(name, `${text}: name the bit in a comment`);
      assert.equal(PATCH[name as keyof typeof PATCH], Number(bit), text);
    }
    // A literal mask (end_succeeded's items) is the sum of the bits it names.
    for (const [text, value, names] of sql.matchAll(/'m', (\d+) \/\* ([\w |]+) \*\//g)) {
      const sum = (names as string).split('|').reduce((n, x) => n + (PATCH[x.trim() as keyof typeof PATCH] ?? Number.NaN), 0);
      assert.equal(sum, Number(value), text);
    }
  });

  it("the reap trigger's reasons are core/transitions.ts ZOMBIE_REASONS", () => {
    const trigger = last(/CREATE TRIGGER job_attempts_reaped[\s\S]*?WHEN \(NEW\.reason IN \(([^\n]*)\)\)\n/);
    assert.deepEqual(literals(trigger[1] as string), [...ZOMBIE_REASONS]);
  });

  it('the statistics triggers compute the run-time buckets of core/stats-window.ts', async () => {
    // The bucket expression as the triggers write it, over a run time; evaluated by PostgreSQL.
    const forms = new Set([...sql.matchAll(/floor\((\d+) \* log\(2, greatest\((\w+)\.finished_at - \2\.started_at, 0\)::numeric \+ 1\)\)::integer/g)].map((m) => m[1]));
    assert.deepEqual([...forms], ['8'], 'one bucket scheme in every trigger');
    const expr = `floor(${[...forms][0]} * log(2, greatest($1::bigint, 0)::numeric + 1))::integer`;
    const db = await createTestDatabase('lh_pgagree');
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      for (const ms of [0, 1, 2, 3, 7, 8, 15, 16, 100, 250, 999, 1000, 1023, 4095, 65_535, 3_600_000, 86_400_000, -5]) {
        const res = await c.query(`SELECT ${expr} AS b`, [ms]);
        assert.equal(res.rows[0].b, durationBucket(ms), `${ms} ms`);
      }
    } finally {
      await c.end();
      await db.drop();
    }
  });
});
