/**
 * The chaos run's workload (bench/chaos.ts): a deterministic mix of jobs, from a seed, for the
 * tasks of test/fixtures/chaos-tasks.ts. `jobs` counts every job, children included: 60 % are
 * children of parents with 100 to 1,000 children each (half fail-fast, half collect; a run too
 * small for two such parents gets two parents sharing the children), the rest top-level jobs:
 * plain jobs 40 %, pipelines, sagas, durable sleeps and signal waits 15 % each. Half of the
 * sagas are submitted with maxAttempts 1, so that a kill after a completed step is a death on
 * the last attempt (the others have the task's 3).
 */
import { seededRandom } from '../../../src/core/seeded-random.js';

export type Policy = 'fail-fast' | 'collect';

export interface PlannedJob {
  /** The submission's Idempotency-Key, unique in the run. */
  key: string;
  type: string;
  input: Record<string, unknown>;
  /** Submission options besides the input (a saga's maxAttempts). */
  options?: { maxAttempts?: number };
  /** For chaos.signal: the payloads the driver sends, and after how long (ms after acceptance). */
  signals?: { name: 'approve' | 'ship'; nonce: string; delayMs: number }[];
}

export interface Plan {
  jobs: PlannedJob[];
  /** Top-level jobs plus every planned child. */
  total: number;
  children: number;
  byType: Record<string, number>;
}


/** Sizes of the parents: 100 to 1,000 children each, summing to `budget`. */
function parentSizes(budget: number, rand: () => number): number[] {
  const sizes: number[] = [];
  let left = budget;
  while (left > 0) {
    let s = left <= 1000 ? left : 100 + Math.floor(rand() * 901);
    if (left - s > 0 && left - s < 100) s = left - 100;
    sizes.push(s);
    left -= s;
  }
  // At least one parent of each policy.
  if (sizes.length === 1 && budget >= 2) return [Math.ceil(budget / 2), Math.floor(budget / 2)];
  return sizes;
}

/**
 * `pauseMs`: the range of a handler's pauses, before its effect and after it (the window in
 * which a kill costs a repeat); a job's run takes about twice its pause.
 */
export function makePlan(options: { jobs: number; seed: number; run: string; pauseMs: [number, number] }): Plan {
  const rand = seededRandom(options.seed);
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const [lo, hi] = options.pauseMs;
  const pause = () => int(lo, hi);
  const childBudget = Math.round(options.jobs * 0.6);
  const sizes = childBudget >= 2 ? parentSizes(childBudget, rand) : [];
  const jobs: PlannedJob[] = [];
  let n = 0;
  const key = () => `${options.run}-${n++}`;
  const firstPolicy: Policy = rand() < 0.5 ? 'fail-fast' : 'collect';
  sizes.forEach((size, i) => {
    const policy: Policy = i % 2 === 0 ? firstPolicy : firstPolicy === 'fail-fast' ? 'collect' : 'fail-fast';
    const fails = new Set<number>();
    if (policy === 'fail-fast') fails.add(int(Math.floor(size * 0.2), Math.floor(size * 0.8)));
    else for (let f = 0; f < Math.max(1, Math.round(size * 0.03)); f++) fails.add(int(0, size - 1));
    jobs.push({ key: key(), type: 'chaos.parent', input: { n: size, policy, fails: [...fails].sort((a, b) => a - b), pauseMs: [lo, hi] } });
  });
  const topLevel = Math.max(0, options.jobs - childBudget - sizes.length);
  const counts = {
    'chaos.pipeline': Math.round(topLevel * 0.15),
    'chaos.saga': Math.round(topLevel * 0.15),
    'chaos.sleeper': Math.round(topLevel * 0.15),
    'chaos.signal': Math.round(topLevel * 0.15),
  };
  const plainCount = topLevel - Object.values(counts).reduce((a, b) => a + b, 0);
  for (let i = 0; i < plainCount; i++) jobs.push({ key: key(), type: 'chaos.plain', input: { ms: pause(), ...(rand() < 0.1 ? { failFirst: true } : {}) } });
  for (let i = 0; i < counts['chaos.pipeline']; i++) jobs.push({ key: key(), type: 'chaos.pipeline', input: { ms: pause(), seed: i, ...(rand() < 0.2 ? { flaky: true } : {}) } });
  for (let i = 0; i < counts['chaos.saga']; i++) {
    const r = rand();
    const failAt = `s${int(1, 4)}`;
    const input = r < 0.4 ? { ms: pause() } : { ms: pause(), failAt, failMode: r < 0.75 ? 'fatal' : 'retryable' };
    // Half of them have a single attempt: a kill after a completed step is then a death on the last attempt.
    jobs.push({ key: key(), type: 'chaos.saga', input, ...(rand() < 0.5 ? { options: { maxAttempts: 1 } } : {}) });
  }
  for (let i = 0; i < counts['chaos.sleeper']; i++) jobs.push({ key: key(), type: 'chaos.sleeper', input: { ms: pause(), sleepMs: int(300, 3000) } });
  for (let i = 0; i < counts['chaos.signal']; i++) {
    const k = key();
    jobs.push({
      key: k,
      type: 'chaos.signal',
      input: { ms: pause() },
      signals: (['approve', 'ship'] as const).map((name) => ({ name, nonce: `${k}-${name}-${int(0, 1e9)}`, delayMs: int(0, 3000) })),
    });
  }
  // Shuffle (Fisher-Yates), so every kind of job is submitted all along the run.
  for (let i = jobs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [jobs[i], jobs[j]] = [jobs[j] as PlannedJob, jobs[i] as PlannedJob];
  }
  const byType: Record<string, number> = { 'chaos.child': childBudget };
  for (const j of jobs) byType[j.type] = (byType[j.type] ?? 0) + 1;
  return { jobs, total: jobs.length + childBudget, children: childBudget, byType };
}
