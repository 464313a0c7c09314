/**
 * core/stats-window.ts: run-time buckets (the same in TypeScript and in both stores' SQL, checked
 * by test/unit/sqlite-schema-agreement.test.ts and postgres-schema-agreement.test.ts) and
 * percentiles from them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bucketValue, durationBucket, durationPercentiles } from '../../src/core/stats-window.js';

describe('stats window', () => {
  it('a bucket stands for every run time in it within 5 % or 1 ms', () => {
    for (let ms = 20; ms < 5_000_000; ms = Math.ceil(ms * 1.03)) {
      const v = bucketValue(durationBucket(ms));
      assert.ok(Math.abs(v - ms) <= Math.max(1, 0.05 * ms), `${ms} ms → ${v}`);
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
