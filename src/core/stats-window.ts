/**
 * The figures /v1/stats and /metrics report without counting the jobs table: what the stores
 * keep as jobs change (counts by tenant, type and state; submissions and ends per second;
 * run times per minute in log-scaled buckets), and how those are read back. Pure, and no SQL:
 * each store writes the same buckets in the triggers of its migration files, which
 * test/unit/{sqlite,postgres}-schema-agreement.test.ts check against `durationBucket`.
 */

/** Buckets per doubling of the run time: consecutive bounds differ by 2^(1/8), about 9 %. */
export const BUCKETS_PER_OCTAVE = 8;

/** How long rate and duration buckets are kept (the stats read the last minute and the last 15 minutes). */
export const STATS_WINDOW_MS = 16 * 60_000;

/** The window of `rates` (submitted/finished per minute). */
export const RATE_WINDOW_MS = 60_000;

/** The window of `durations` (run-time percentiles). */
export const DURATION_WINDOW_MS = 15 * 60_000;

/** The bucket of a run time in ms: floor(8 * log2(ms + 1)); negative times count as 0. */
export function durationBucket(ms: number): number {
  return Math.trunc(BUCKETS_PER_OCTAVE * Math.log2(Math.max(0, ms) + 1));
}

/** The ms a bucket stands for: the geometric middle of its bounds (within about 4.5 % or 1 ms of every time in it). */
export function bucketValue(bucket: number): number {
  if (bucket <= 0) return 0;
  return Math.round(2 ** ((bucket + 0.5) / BUCKETS_PER_OCTAVE) - 1);
}

/** One bucket of one task type's run times, as a store returns it. */
export interface DurationBucketCount {
  type: string;
  bucket: number;
  count: number;
}

export interface DurationSummary {
  count: number;
  p50: number;
  p95: number;
  p99: number;
}

/** Percentiles per task type from bucket counts (the bucket holding the q-th run time, as its middle value). */
export function durationPercentiles(buckets: readonly DurationBucketCount[]): Record<string, DurationSummary> {
  const byType = new Map<string, Map<number, number>>();
  for (const b of buckets) {
    if (b.count <= 0) continue;
    let m = byType.get(b.type);
    if (!m) {
      m = new Map();
      byType.set(b.type, m);
    }
    m.set(b.bucket, (m.get(b.bucket) ?? 0) + b.count);
  }
  const out: Record<string, DurationSummary> = {};
  for (const [type, m] of byType) {
    const sorted = [...m.entries()].sort((a, b) => a[0] - b[0]);
    const count = sorted.reduce((n, [, c]) => n + c, 0);
    const pick = (q: number): number => {
      const rank = Math.max(1, Math.ceil(q * count));
      let seen = 0;
      for (const [bucket, c] of sorted) {
        seen += c;
        if (seen >= rank) return bucketValue(bucket);
      }
      return bucketValue(sorted[sorted.length - 1]?.[0] ?? 0);
    };
    out[type] = { count, p50: pick(0.5), p95: pick(0.95), p99: pick(0.99) };
  }
  return out;
}
