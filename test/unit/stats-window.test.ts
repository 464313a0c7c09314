/** core/stats-window.ts: run-time buckets (the same in TypeScript and in both stores' SQL, each store's stats-schema.ts) and percentiles from them. */
import assert from 'node:assert/strict';
import { DatabaseSync } from 'node:sqlite';
import { describe, it } from 'node:test';
import pg from 'pg';
import { createTestDatabase } from '../support/postgres.js';
import { bucketValue, durationBucket, durationPercentiles } from '../../src/core/stats-window.js';
import { durationBucketSql as postgresBucketSql } from '../../src/store/postgres/stats-schema.js';
import { durationBucketSql as sqliteBucketSql } from '../../src/store/sqlite/stats-schema.js';

const SAMPLES = [0, 1, 2, 3, 7, 8, 15, 16, 100, 250, 999, 1000, 1023, 4095, 65_535, 3_600_000, 86_400_000, -5];

describe('stats window', () => {
  it('a bucket stands for every run time in it within 5 % or 1 ms', () => {
    for (let ms = 20; ms < 5_000_000; ms = Math.ceil(ms * 1.03)) {
      const v = bucketValue(durationBucket(ms));
      assert.ok(Math.abs(v - ms) <= Math.max(1, 0.05 * ms), `${ms} ms → ${v}`);
    }
  });

  it('SQLite computes the same buckets as TypeScript', () => {
    const db = new DatabaseSync(':memory:');
    for (const ms of SAMPLES) {
      const row = db.prepare(`SELECT ${sqliteBucketSql('?')} AS b`).get(ms) as { b: number };
      assert.equal(row.b, durationBucket(ms), `${ms} ms`);
    }
  });

  it('PostgreSQL computes the same buckets as TypeScript', async () => {
    const db = await createTestDatabase('lh_statswin');
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      for (const ms of SAMPLES) {
        const res = await c.query(`SELECT ${postgresBucketSql('$1::bigint')} AS b`, [ms]);
        assert.equal(res.rows[0].b, durationBucket(ms), `${ms} ms`);
      }
    } finally {
      await c.end();
      await db.drop();
    }
  });

  it('percentiles pick the bucket of the q-th run time, per type', () => {
    const times = Array.from({ length: 100 }, (_, i) => (i + 1) * 10);
    const counts = new Map<number, number>();
    for (const t of times) counts.set(durationBucket(t), (counts.get(durationBucket(t)) ?? 0) + 1);
    const buckets = [...counts].map(([bucket, count]) => ({ type: 'x', bucket, count }));
    const p = durationPercentiles([...buckets, { type: 'y', bucket: durationBucket(42), count: 3 }]);
    assert.equal(p.x?.count, 100);
    for (const [q, exact] of [
      ['p50', 500],
      ['p95', 950],
      ['p99', 990],
    ] as const) {
      const got = p.x?.[q] as number;
      assert.ok(Math.abs(got - exact) / exact < 0.05, `${q}: ${got} for ${exact}`);
    }
    assert.deepEqual(p.y, { count: 3, p50: bucketValue(durationBucket(42)), p95: bucketValue(durationBucket(42)), p99: bucketValue(durationBucket(42)) });
    assert.deepEqual(durationPercentiles([]), {});
  });
});
