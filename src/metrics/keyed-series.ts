/**
 * A Prometheus counter or gauge kept without prom-client: each label set's value in a Map found
 * by its label values joined, like keyed-histogram.ts. Metrics count from an instance's first
 * event, but prom-client is loaded only at the first scrape (metrics.ts): until then these hold
 * the counts, and the registry then renders them through `get()` like prom-client's own (a
 * series without labels reads 0 before its first count, as prom-client's does).
 */
import { labelKey, labelsOf } from './labels.js';

interface Series {
  labels: Record<string, string>;
  value: number;
}

export interface KeyedSeriesOptions<L extends string> {
  name: string;
  help: string;
  type: 'counter' | 'gauge';
  labelNames?: readonly L[];
  /** Read at each scrape, before `get()` answers (a gauge read from the store). */
  collect?: (series: KeyedSeries<L>) => Promise<void> | void;
}

export class KeyedSeries<L extends string = never> {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'gauge';
  readonly aggregator = 'sum';
  private readonly labelNames: readonly L[];
  private readonly series = new Map<string, Series>();
  private readonly collect: KeyedSeriesOptions<L>['collect'];

  constructor(options: KeyedSeriesOptions<L>) {
    this.name = options.name;
    this.help = options.help;
    this.type = options.type;
    this.labelNames = options.labelNames ?? [];
    this.collect = options.collect;
    if (this.labelNames.length === 0) this.series.set('', { labels: {}, value: 0 });
  }

  /** Adds `n` (negative: a gauge going down) to the series of the label values, given in `labelNames` order. */
  add(labelValues: readonly string[], n = 1): void {
    if (!Number.isFinite(n)) throw new TypeError(`${this.name}: not a finite number: ${n}`);
    if (this.type === 'counter' && n < 0) throw new RangeError(`${this.name}: a counter only goes up`);
    this.entry(labelValues).value += n;
  }

  /** Sets a gauge's series. */
  set(labelValues: readonly string[], value: number): void {
    this.entry(labelValues).value = value;
  }

  /** Drops every series (a gauge rebuilt at each scrape). */
  reset(): void {
    this.series.clear();
    if (this.labelNames.length === 0) this.series.set('', { labels: {}, value: 0 });
  }

  /** prom-client's Metric.get(). */
  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Array<{ labels: Record<string, string>; value: number }> }> {
    if (this.collect) await this.collect(this);
    const values = [...this.series.values()].map((s) => ({ labels: { ...s.labels }, value: s.value }));
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  private entry(labelValues: readonly string[]): Series {
    const key = labelKey(labelValues);
    let s = this.series.get(key);
    if (!s) {
      s = { labels: labelsOf(this.labelNames, labelValues), value: 0 };
      this.series.set(key, s);
    }
    return s;
  }
}
