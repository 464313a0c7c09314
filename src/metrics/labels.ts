/**
 * How the in-house series (keyed-series.ts, keyed-histogram.ts) find a label set: by its values
 * joined in `labelNames` order (one value: the value itself, no string built), and the labels
 * object prom-client renders, made once per series.
 */

/** The map key of a label set's values. */
export function labelKey(labelValues: readonly string[]): string {
  return labelValues.length === 1 ? (labelValues[0] as string) : labelValues.join('\u0000');
}

/** The labels object of a series: each name with its value. */
export function labelsOf(labelNames: readonly string[], labelValues: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  labelNames.forEach((n, i) => {
    labels[n] = labelValues[i] as string;
  });
  return labels;
}
