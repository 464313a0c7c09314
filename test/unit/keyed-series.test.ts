/**
 * KeyedSeries (the metrics' counters and gauges before prom-client is loaded) renders what
 * prom-client's Counter and Gauge render for the same counts: a series without labels reads 0
 * before its first count, labelled series appear when first counted, and a gauge goes down.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Counter, Gauge, type Metric, Registry } from 'prom-client';
import { KeyedSeries } from '../../src/metrics/keyed-series.js';

describe('KeyedSeries', () => {
  it("renders the same text as prom-client's Counter and Gauge for the same counts", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const plain = new KeyedSeries({ name: 'plain_total', help: 'a counter "without" labels\\n', type: 'counter' });
    const labelled = new KeyedSeries({ name: 'by_type_total', help: 'per type', type: 'counter', labelNames: ['task_type', 'state'] });
    const unused = new KeyedSeries({ name: 'unused_total', help: 'never counted', type: 'counter', labelNames: ['task_type'] });
    const gauge = new KeyedSeries({ name: 'pending', help: 'up and down', type: 'gauge' });
    for (const m of [plain, labelled, unused, gauge]) ours.registerMetric(m as unknown as Metric);
    const plain2 = new Counter({ name: 'plain_total', help: 'a counter "without" labels\\n', registers: [theirs] });
    const labelled2 = new Counter({ name: 'by_type_total', help: 'per type', labelNames: ['task_type', 'state'], registers: [theirs] });
    new Counter({ name: 'unused_total', help: 'never counted', labelNames: ['task_type'], registers: [theirs] });
    const gauge2 = new Gauge({ name: 'pending', help: 'up and down', registers: [theirs] });
    assert.equal(await ours.metrics(), await theirs.metrics());

    plain.add([], 3);
    plain2.inc(3);
    for (const [type, state] of [['report', 'succeeded'], ['export', 'failed'], ['report', 'succeeded'], ['a "quoted"\nname', 'x']] as const) {
      labelled.add([type, state]);
      labelled2.inc({ task_type: type, state });
    }
    gauge.add([]);
    gauge.add([]);
    gauge.add([], -1);
    gauge2.inc();
    gauge2.inc();
    gauge2.dec();
    assert.equal(await ours.metrics(), await theirs.metrics());
  });

  it('a counter refuses to go down or to count a value that is not finite', () => {
    const c = new KeyedSeries({ name: 'c_total', help: 'c', type: 'counter' });
    assert.throws(() => c.add([], -1), RangeError);
    assert.throws(() => c.add([], Number.NaN), TypeError);
  });

  it('a collected gauge is read at each scrape', async () => {
    let n = 1;
    const g = new KeyedSeries({
      name: 'g',
      help: 'g',
      type: 'gauge',
      labelNames: ['state'],
      collect(series) {
        series.reset();
        series.set([n === 1 ? 'a' : 'b'], n);
      },
    });
    assert.deepEqual((await g.get()).values, [{ labels: { state: 'a' }, value: 1 }]);
    n = 2;
    assert.deepEqual((await g.get()).values, [{ labels: { state: 'b' }, value: 2 }]);
  });
});
