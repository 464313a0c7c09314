/** Shared helpers for the throughput benchmarks: argv flags, percentiles, medians, tables. */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { Session } from 'node:inspector/promises';

const argv = process.argv.slice(2);

/** `--name value` as a number (fallback when absent). */
export function numFlag(name: string, fallback: number): number {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const n = Number(argv[i + 1]);
  if (!Number.isFinite(n)) throw new Error(`--${name} needs a number, got ${JSON.stringify(argv[i + 1])}`);
  return n;
}

/** `--name 10,50` as a list of numbers. */
export function listFlag(name: string, fallback: number[]): number[] {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const list = String(argv[i + 1] ?? '')
    .split(',')
    .filter((s) => s !== '')
    .map(Number);
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--${name} needs positive integers, e.g. 10,50`);
  return list;
}

export function strFlag(name: string): string | undefined {
  const i = argv.indexOf(`--${name}`);
  return i < 0 ? undefined : argv[i + 1];
}

export function boolFlag(name: string): boolean {
  return argv.includes(`--${name}`);
}

/** Nearest-rank percentile of an ascending-sorted list. */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

export function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    0.5,
  );
}

export interface LatencySummary {
  samples: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarise(samplesMs: readonly number[]): LatencySummary {
  const s = [...samplesMs].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / Math.max(1, s.length);
  return { samples: s.length, p50: percentile(s, 0.5), p95: percentile(s, 0.95), p99: percentile(s, 0.99), max: s[s.length - 1] ?? Number.NaN, mean };
}

/** Results every throughput benchmark prints as its last stdout line (one JSON object). */
export interface BenchResult {
  system: string;
  jobs: number;
  runs: number;
  /** Medians over the runs; the per-run figures are in `samples`. */
  enqueuePerSec: number;
  processedPerSec: Record<string, number>;
  latencyMs: LatencySummary;
  samples: { enqueuePerSec: number[]; processedPerSec: Record<string, number[]> };
  /**
   * CPU time of the whole process (every thread) per job, µs, per run: `enqueue` and `c<N>`
   * for processing at concurrency N. Less moved by other load on a shared machine than wall
   * time (bench/sqlite-throughput.ts only).
   */
  cpuUsPerJob?: Record<string, number[]>;
  notes: string[];
}

export function fmtRate(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

export function fmtMs(n: number): string {
  return n < 10 ? n.toFixed(3) : n.toFixed(1);
}

/** A plain-text table with right-aligned numeric columns. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  ');
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/**
 * One benchmark's result from its per-run figures (medians taken here), printed as a table
 * and then as one JSON line, the last line of stdout (what the runners read).
 */
export function reportResult(r: {
  system: string;
  jobs: number;
  runs: number;
  enqueue: number[];
  processed: Record<string, number[]>;
  latencyMs: LatencySummary;
  cpuUsPerJob?: Record<string, number[]>;
  notes: string[];
}): BenchResult {
  const result: BenchResult = {
    system: r.system,
    jobs: r.jobs,
    runs: r.runs,
    enqueuePerSec: median(r.enqueue),
    processedPerSec: Object.fromEntries(Object.entries(r.processed).map(([c, list]) => [c, median(list)])),
    latencyMs: r.latencyMs,
    samples: { enqueuePerSec: r.enqueue, processedPerSec: r.processed },
    ...(r.cpuUsPerJob ? { cpuUsPerJob: r.cpuUsPerJob } : {}),
    notes: r.notes,
  };
  printResult(result);
  console.log(JSON.stringify(result));
  return result;
}

/** Prints one benchmark's figures as a table. */
export function printResult(r: BenchResult): void {
  const rows: string[][] = [[`enqueue (bulk), jobs/s`, fmtRate(r.enqueuePerSec), r.samples.enqueuePerSec.map(fmtRate).join(' / ')]];
  for (const [c, v] of Object.entries(r.processedPerSec)) {
    rows.push([`processed c=${c}, jobs/s`, fmtRate(v), (r.samples.processedPerSec[c] ?? []).map(fmtRate).join(' / ')]);
  }
  for (const [phase, list] of Object.entries(r.cpuUsPerJob ?? {})) {
    rows.push([`CPU µs/job, ${phase === 'enqueue' ? 'enqueue' : `processed ${phase.replace('c', 'c=')}`}`, median(list).toFixed(1), list.map((v) => v.toFixed(1)).join(' / ')]);
  }
  const l = r.latencyMs;
  if (l.samples > 0) {
    rows.push([`latency p50 ms (n=${l.samples})`, fmtMs(l.p50), '']);
    rows.push(['latency p95 ms', fmtMs(l.p95), '']);
    rows.push(['latency p99 ms', fmtMs(l.p99), '']);
    rows.push(['latency max ms', fmtMs(l.max), '']);
  }
  console.log(`\n${r.system}: ${r.jobs.toLocaleString('en-US')} no-op jobs, median of ${r.runs} run(s)\n`);
  console.log(table(['metric', 'median', 'runs'], rows));
  for (const n of r.notes) console.log(`  note: ${n}`);
}

/**
 * When a growing count first reached 1, 500, 1,000, 2,000, 4,000... and `total` (each seen at the
 * caller's checks, so as late as one check interval).
 */
export class Milestones {
  private readonly marks: number[];
  private readonly at: number[] = [];

  constructor(total: number) {
    const marks = [1, 500];
    for (let m = 1000; m < total; m *= 2) marks.push(m);
    this.marks = [...new Set([...marks.filter((m) => m < total), total])];
  }

  see(count: number, ms: number): void {
    while (this.at.length < this.marks.length && count >= (this.marks[this.at.length] as number)) this.at.push(ms);
  }

  line(): string {
    return this.at.map((ms, i) => `${(this.marks[i] as number).toLocaleString('en-US')}: ${Math.round(ms)}`).join(', ');
  }
}

/** Resolves when `done()` holds, checking every `everyMs` (cheap counters only). */
export async function until(done: () => boolean, everyMs = 1): Promise<void> {
  while (!done()) await new Promise((r) => setTimeout(r, everyMs));
}

/** A CPU profile of one phase only (node:inspector in this thread), written as a .cpuprofile file. */
export async function profiled<T>(file: string | undefined, intervalUs: number, fn: () => Promise<T>): Promise<T> {
  if (!file) return fn();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: intervalUs });
  await session.post('Profiler.start');
  try {
    return await fn();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
    console.error(`cpu profile written to ${file}`);
  }
}

/** The commit benchmarked, and whether the given paths differ from it (uncommitted edits). */
export function gitState(paths: string[]): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', ...paths], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() !== '');
    return dirty.length === 0 ? `git ${head} (${paths.join(', ')} clean)` : `git ${head} + uncommitted changes in: ${dirty.map((l) => l.slice(3)).join(', ')}`;
  } catch {
    return 'git state unknown';
  }
}

/**
 * The 1/5/15-minute load averages. Other work on the machine skews every figure here; the
 * benchmark itself adds about 1 to the 1-minute figure, so only the load before it starts
 * (`warn`) says whether the machine was quiet.
 */
export function loadNote(when: string, warn: boolean): string {
  const l = loadavg();
  const busy = warn && (l[0] ?? 0) > 0.5 ? ' — WARNING: the machine was busy before the start, figures are unreliable' : '';
  return `load average ${when}: ${l.map((x) => x.toFixed(2)).join(' ')} on ${availableParallelism()} CPUs${busy}`;
}
