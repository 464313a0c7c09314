/** The dashboard's reading of /metrics (web/src/prometheus.ts): samples, sums by label, histogram quantiles. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { histogramQuantiles, parsePrometheus, quantile, sumBy } from '../../web/src/prometheus.js';

const TEXT = `# HELP longhaul_jobs Jobs in the database by state and task type
# TYPE longhaul_jobs gauge
longhaul_jobs{state="queued",task_type="a"} 7
longhaul_jobs{state="queued",task_type="b"} 3
longhaul_jobs{state="running",task_type="a"} 2
longhaul_jobs{state="queued",task_type="we\\"ird"} 1
# TYPE longhaul_job_queue_wait_seconds histogram
longhaul_job_queue_wait_seconds_bucket{le="0.1",task_type="a"} 50
longhaul_job_queue_wait_seconds_bucket{le="1",task_type="a"} 90
longhaul_job_queue_wait_seconds_bucket{le="10",task_type="a"} 100
longhaul_job_queue_wait_seconds_bucket{le="+Inf",task_type="a"} 100
longhaul_job_queue_wait_seconds_sum{task_type="a"} 40
longhaul_job_queue_wait_seconds_count{task_type="a"} 100
longhaul_job_queue_wait_seconds_bucket{le="0.1",task_type="b"} 0
longhaul_job_queue_wait_seconds_bucket{le="+Inf",task_type="b"} 0
process_cpu_seconds_total 1.5e1
`;

describe('dashboard Prometheus reader', () => {
  const samples = parsePrometheus(TEXT);

  it('reads samples with labels (escapes included) and values', () => {
    assert.equal(samples.length, 13);
    assert.deepEqual(samples[0], { name: 'longhaul_jobs', labels: { state: 'queued', task_type: 'a' }, value: 7 });
    assert.equal(samples.find((s) => s.labels.task_type === 'we"ird')?.value, 1);
    assert.equal(samples.at(-1)?.value, 15);
  });

  it('sums a gauge by label, filtered', () => {
    const queued = sumBy(samples, 'longhaul_jobs', 'task_type', (l) => l.state === 'queued');
    assert.deepEqual([...queued], [['a', 7], ['b', 3], ['we"ird', 1]]);
  });

  it('estimates quantiles from cumulative buckets like histogram_quantile', () => {
    const p50 = histogramQuantiles(samples, 'longhaul_job_queue_wait_seconds', 'task_type', 0.5);
    assert.equal(p50.get('a'), 0.1);
    const p95 = histogramQuantiles(samples, 'longhaul_job_queue_wait_seconds', 'task_type', 0.95);
    assert.ok(Math.abs((p95.get('a') ?? 0) - 5.5) < 1e-9);
    assert.equal(p95.get('b'), null);
    assert.equal(quantile([[1, 5], [Number.POSITIVE_INFINITY, 10]], 0.99), 1);
    assert.equal(quantile([[1, 4]], 0.5), 0.5);
  });
});
