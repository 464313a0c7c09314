/**
 * Reads the Prometheus text exposition of `GET /metrics` (where the server has it and the
 * key may read it): samples with their labels, and quantiles of a histogram estimated from its
 * cumulative buckets the way PromQL's histogram_quantile does (linear within a bucket).
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?/g;

function unescapeLabel(v: string): string {
  return v.replace(/\\(.)/g, (_m, c: string) => (c === 'n' ? '\n' : c));
}

function number(text: string): number {
  if (text === '+Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  return Number(text);
}

export function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = LINE.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[2]) for (const l of m[2].matchAll(LABEL)) labels[l[1] as string] = unescapeLabel(l[2] as string);
    out.push({ name: m[1] as string, labels, value: number(m[3] as string) });
  }
  return out;
}

/** Sum of a metric's samples grouped by one label. */
export function sumBy(samples: Sample[], name: string, label: string, where: (labels: Record<string, string>) => boolean = () => true): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of samples) {
    if (s.name !== name || !where(s.labels)) continue;
    const key = s.labels[label] ?? '';
    out.set(key, (out.get(key) ?? 0) + s.value);
  }
  return out;
}

/**
 * The q-quantile of a histogram's observations per value of `label` (buckets of the same
 * label value are added up across other labels). Null when it has no observation.
 */
export function histogramQuantiles(samples: Sample[], name: string, label: string, q: number): Map<string, number | null> {
  const buckets = new Map<string, Map<number, number>>();
  for (const s of samples) {
    if (s.name !== `${name}_bucket` || s.labels.le === undefined) continue;
    const key = s.labels[label] ?? '';
    const le = number(s.labels.le);
    const perKey = buckets.get(key) ?? new Map<number, number>();
    perKey.set(le, (perKey.get(le) ?? 0) + s.value);
    buckets.set(key, perKey);
  }
  const out = new Map<string, number | null>();
  for (const [key, perKey] of buckets) out.set(key, quantile([...perKey].sort((a, b) => a[0] - b[0]), q));
  return out;
}

/** `sorted`: [upper bound, cumulative count] ascending, the last bound +Inf. */
export function quantile(sorted: [number, number][], q: number): number | null {
  const total = sorted[sorted.length - 1]?.[1] ?? 0;
  if (total === 0) return null;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const [bound, count] of sorted) {
    if (count >= rank) {
      // Past the last finite bound, the answer is that bound (as histogram_quantile does).
      if (!Number.isFinite(bound)) return prevBound;
      if (count === prevCount) return bound;
      return prevBound + ((bound - prevBound) * (rank - prevCount)) / (count - prevCount);
    }
    prevBound = bound;
    prevCount = count;
  }
  return prevBound;
}
