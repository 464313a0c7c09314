/** Durations written as `250ms`, `5s`, `5m`, `2h`, `1d` or a bare number of ms. */

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!m) throw new Error(`invalid duration "${text}" (expected e.g. 500ms, 5s, 5m, 2h, 1d)`);
  return Math.round(Number(m[1]) * (UNITS[m[2] ?? 'ms'] ?? 1));
}

export function parseDurationList(text: string): number[] {
  return text
    .split(',')
    .filter((s) => s.trim() !== '')
    .map(parseDuration);
}
