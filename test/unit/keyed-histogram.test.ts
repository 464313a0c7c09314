/**
 * KeyedHistogram renders what prom-client's Histogram renders for the same observations: the
 * same buckets (inclusive upper bounds), sums and counts, per label set, in the same text.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Histogram, Registry } from 'prom-client';
import { KeyedHistogram } from '../../src/metrics/keyed-histogram.js';

const BUCKETS = [0.005, 0.025, 0.1, 1, 10];

describe('KeyedHistogram', () => {
  it("renders the same text as prom-client's Histogram for the same observations", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const a = new KeyedHistogram({ name: 'h', help: 'help text', labelNames: ['task_type', 'state'], buckets: BUCKETS, registers: [ours] });
    const b = new Histogram({ name: 'h', help: 'help text', labelNames: ['task_type', 'state'], buckets: BUCKETS, registers: [theirs] });
    // Values on the bounds themselves (le is inclusive), between them, above the last, and 0.
    const values = [0, 0.005, 0.0051, 0.025, 0.5, 1, 9.99, 10, 10.01, 3600];
    for (const [i, v] of values.entries()) {
      const labels = { task_type: i % 3 === 0 ? 'report' : 'export', state: i % 2 === 0 ? 'succeeded' : 'failed' };
      a.observe([labels.task_type, labels.state], v);
      b.observe(labels, v);
    }
    assert.equal(await ours.metrics(), await theirs.metrics());
    a.reset();
    b.reset();
    assert.equal(await ours.metrics(), await theirs.metrics());
  });

  it('refuses a value that is not a finite number', () => {
    const h = new KeyedHistogram({ name: 'h', help: 'h', labelNames: ['task_type'], buckets: BUCKETS, registers: [new Registry()] });
    assert.throws(() => h.observe(['x'], Number.NaN), /not a finite number/);
  });
});
