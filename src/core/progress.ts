/** Progress values, how updates merge, and the ETA estimate from recent throughput. */
import { escapeUnstorable } from './storable.js';

export interface Progress {
  percent: number | null;
  stage: string | null;
  itemsDone: number | null;
  itemsTotal: number | null;
  message: string | null;
  /** Estimated ms until done; null until recent throughput makes it meaningful. */
  eta: number | null;
  /** ISO time of the last update; null before the first. */
  updatedAt: string | null;
  /** In a task with stages: the running stage's own percent (`percent` is the whole job's, by stage weight). */
  stagePercent?: number | null;
}

export interface ProgressUpdate {
  percent?: number;
  stage?: string;
  itemsDone?: number;
  itemsTotal?: number;
  message?: string;
  /** Set by the stage runner (task `stages`), not by handlers. */
  stagePercent?: number;
}

export const EMPTY_PROGRESS: Progress = Object.freeze({
  percent: null,
  stage: null,
  itemsDone: null,
  itemsTotal: null,
  message: null,
  eta: null,
  updatedAt: null,
});

function clampPercent(p: number): number {
  if (!Number.isFinite(p)) return 0;
  return Math.min(100, Math.max(0, Math.round(p * 100) / 100));
}

/** A stage or message as kept: diagnostic text, with U+0000 and lone surrogates escaped (core/storable.ts). */
function text(value: string | undefined, current: string | null): string | null {
  if (value === undefined || value === null) return current;
  return typeof value === 'string' ? escapeUnstorable(value) : value;
}

/**
 * Applies an update. Items imply a percent when no percent is given; an explicit percent
 * wins. A number (`ctx.progress(42)`) is shorthand for a percent. The stage and message are
 * escaped where no store could keep them (see core/storable.ts).
 */
export function mergeProgress(current: Progress, update: ProgressUpdate | number, at: number): Progress {
  const u: ProgressUpdate = typeof update === 'number' ? { percent: update } : update;
  const itemsDone = u.itemsDone ?? current.itemsDone;
  const itemsTotal = u.itemsTotal ?? current.itemsTotal;
  let percent = current.percent;
  if (u.percent !== undefined) percent = clampPercent(u.percent);
  else if ((u.itemsDone !== undefined || u.itemsTotal !== undefined) && itemsDone !== null && itemsTotal !== null && itemsTotal > 0) {
    percent = clampPercent((itemsDone / itemsTotal) * 100);
  }
  const merged: Progress = {
    percent,
    stage: text(u.stage, current.stage),
    itemsDone,
    itemsTotal,
    message: text(u.message, current.message),
    eta: current.eta,
    updatedAt: new Date(at).toISOString(),
  };
  // Present only in jobs with stages, so that other jobs' progress keeps its shape.
  const stagePercent = u.stagePercent === undefined ? current.stagePercent : clampPercent(u.stagePercent);
  if (stagePercent !== undefined) merged.stagePercent = stagePercent;
  return merged;
}

/** Fraction done in [0, 1], or null when the job has not said. */
export function fractionDone(p: Progress): number | null {
  return p.percent === null ? null : p.percent / 100;
}

interface Sample {
  at: number;
  fraction: number;
}

/**
 * ETA from recent throughput: a sliding window of (time, fraction) samples. The estimate
 * stays null until the window spans at least `minSpanMs` and shows forward movement; it
 * then extrapolates the window's average rate. Resets if progress goes backwards.
 */
export class EtaEstimator {
  private samples: Sample[] = [];
  constructor(
    private readonly windowMs = 30_000,
    private readonly minSpanMs = 1_000,
  ) {}

  observe(fraction: number, at: number): number | null {
    const last = this.samples[this.samples.length - 1];
    if (last && fraction < last.fraction) this.samples = [];
    if (!last || at > last.at || fraction !== last.fraction) this.samples.push({ at, fraction });
    while (this.samples.length > 2 && (this.samples[0]?.at ?? at) < at - this.windowMs) this.samples.shift();
    return this.estimate();
  }

  estimate(): number | null {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (!first || !last || last === first) return null;
    if (last.fraction >= 1) return 0;
    const span = last.at - first.at;
    const moved = last.fraction - first.fraction;
    if (span < this.minSpanMs || moved <= 0) return null;
    return Math.round(((1 - last.fraction) * span) / moved);
  }
}
