/**
 * Overall percent from stages of unequal cost: each stage owns a share of 100 (its weight) and
 * reports only its own fraction done. Pure; monotonic as long as stages run in order and each
 * fraction only grows.
 */

export interface StageWeight<S extends string = string> {
  name: S;
  weight: number;
}

export function weightedPercent<S extends string>(stages: readonly StageWeight<S>[], current: S, fraction: number): number {
  const total = stages.reduce((sum, s) => sum + s.weight, 0);
  let before = 0;
  for (const s of stages) {
    if (s.name === current) {
      const f = Number.isFinite(fraction) ? Math.min(1, Math.max(0, fraction)) : 0;
      return (100 * (before + s.weight * f)) / total;
    }
    before += s.weight;
  }
  throw new RangeError(`unknown stage ${JSON.stringify(current)}`);
}
