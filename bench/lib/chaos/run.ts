/**
 * One chaos run, end to end (bench/chaos.ts and test/e2e/chaos.test.ts run this same code):
 * start the deployment, submit the plan while the faults go on, wait for the drain, read
 * everything back through the HTTP API and the effects ledger, judge it (audit.ts), stop the
 * deployment and return the report.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEffects, readEffects, type EffectRow } from '../../../test/fixtures/effects.js';
import { ChaosApi } from './api.js';
import {
  judgeDuplicates,
  judgeParent,
  judgeSaga,
  judgeSleep,
  lostSignals,
  missingEffects,
  type Duplicate,
  type SentSignal,
  type Snap,
  TERMINAL,
  type Transition,
  unexpectedEnd,
} from './audit.js';
import { Deployment, type Timings } from './deployment.js';
import { Driver, type FaultOptions } from './driver.js';
import { seededRandom } from '../../../src/core/seeded-random.js';
import { makePlan } from './plan.js';

export interface ChaosOptions {
  store: 'sqlite' | 'pg';
  /** Every job, children included. */
  jobs: number;
  seed: number;
  servers: number;
  workers: number;
  concurrency: number;
  /** Submissions are spread over this long. */
  submitMs: number;
  /** The range of each handler's pauses before and after its effect (plan.ts). */
  pauseMs: [number, number];
  faults: FaultOptions;
  timings: Timings;
  drainTimeoutMs: number;
  /** Keep the run's directory (SQLite database, effects ledger) and say where. */
  keep?: boolean;
  log: (line: string) => void;
}

export interface Invariants {
  /** Accepted submissions with no job. */
  lost: number;
  /** One Idempotency-Key, several jobs. */
  duplicateJobs: number;
  notTerminal: number;
  parentsMiscounted: number;
  sagasMiscompensated: number;
  unexplainedDuplicates: number;
  signalsLost: number;
  sleepsEarly: number;
  missingEffects: number;
  /** Fail-fast siblings started more than 1 s after a sibling failed: not cancelled at once. */
  failFastLate: number;
}

export interface ChaosReport {
  system: 'longhaul-chaos';
  store: 'sqlite' | 'pg';
  processes: { servers: number; workers: number; concurrency: number };
  timings: Timings;
  jobs: { planned: number; topLevel: number; accepted: number; replayed: number; seen: number; byType: Record<string, Record<string, number>> };
  faults: {
    workerKills: number;
    serverKills: number;
    pgDownMs: number | null;
    /** Running jobs the sweeper took back from a lost worker (/v1/stats: the last 15 minutes). */
    reaped: number;
    failedStarts: number;
    failedStartsBy: Record<string, number>;
    /** HTTP requests of the driver tried again (no answer, 5xx, 429). */
    httpRetries: number;
    /** How long the driver's requests waited with no API server running. */
    noServerMs: number;
  };
  invariants: Invariants;
  explainedDuplicates: { total: number; byWhy: Record<string, number> };
  /** Saga steps whose effect ran, never recorded complete (killed between the effect and its checkpoint on the last attempt), not compensated. */
  sagaPartialSteps: number;
  unexpectedEnds: { total: number; byWhy: Record<string, number> };
  /**
   * Fail-fast parents' siblings (children not failing on purpose): cancelled, and started after
   * the first failing child ended (a claim racing the failure's write can; more than 1 s after,
   * the siblings were not cancelled at once).
   */
  failFast: { parents: number; siblings: number; cancelled: number; startedAfterFailure: number; startedOver1sAfter: number; maxStartLagMs: number };
  signals: { sent: number; unsent: number; refused: number };
  /** From the last fault (a kill, the server kill, or PostgreSQL back) to no job open; null: no drain within the timeout. */
  drainMs: number | null;
  chaosMs: number;
  wallMs: number;
  logLines: Record<string, number>;
  /** What is wrong, one line each (the first 40), and examples of explained duplicates. */
  problems: string[];
  examples: string[];
}

async function pooled<T>(items: readonly T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) await fn(items[next++] as T);
    }),
  );
}

const inc = (m: Record<string, number>, k: string, by = 1) => {
  m[k] = (m[k] ?? 0) + by;
};

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const started = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-chaos-'));
  const ledgerPath = join(dir, 'effects.db');
  openEffects(ledgerPath).close();
  const plan = makePlan({ jobs: o.jobs, seed: o.seed, run: `chaos-${o.seed}-${started}`, pauseMs: o.pauseMs });
  o.log(`plan: ${plan.total} jobs (${plan.jobs.length} top-level, ${plan.children} children): ${JSON.stringify(plan.byType)}`);
  const deployment = await Deployment.start({
    store: o.store,
    servers: o.servers,
    workers: o.workers,
    concurrency: o.concurrency,
    timings: o.timings,
    sqlitePath: join(dir, 'longhaul.db'),
    ledgerPath,
    log: o.log,
  });
  try {
    const api = new ChaosApi(() => deployment.serverUrls());
    const driver = new Driver(api, deployment, plan, seededRandom(o.seed ^ 0x5eed), o.log);
    const t0 = Date.now();
    let monitoring = true;
    const monitor = driver.monitor(() => !monitoring, t0);
    const submitted = driver.submitAll(o.submitMs);
    const faultLog = await driver.faults(o.faults, o.submitMs, t0);
    await submitted;
    o.log(`faults stopped after ${faultLog.stoppedAt - t0} ms; waiting for the drain`);
    const drainedAt = await driver.drain(o.drainTimeoutMs);
    await driver.restartsDone();
    monitoring = false;
    await monitor;
    o.log(drainedAt ? `drained ${drainedAt - faultLog.lastFaultAt} ms after the last fault` : `not drained within ${o.drainTimeoutMs} ms`);
    const report = await audit(o, api, deployment, driver, plan.jobs.length, plan.total, ledgerPath);
    report.drainMs = drainedAt === null ? null : drainedAt - faultLog.lastFaultAt;
    report.chaosMs = faultLog.stoppedAt - t0;
    report.faults.pgDownMs = faultLog.pgOutage ? faultLog.pgOutage.startedAt - faultLog.pgOutage.stoppedAt : null;
    report.wallMs = Date.now() - started;
    return report;
  } finally {
    await deployment.stop();
    if (o.keep) o.log(`kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

async function audit(o: ChaosOptions, api: ChaosApi, d: Deployment, driver: Driver, topLevel: number, planned: number, ledgerPath: string): Promise<ChaosReport> {
  const problems: string[] = [];
  const examples: string[] = [];
  const problem = (line: string) => {
    if (problems.length < 40) problems.push(line);
  };
  const all = await api.listAll<Snap>();
  const stats = await api.persist<{ sweeper: { zombiesReaped: number } }>('GET', '/v1/stats', (a) => a.status === 200);
  const byId = new Map(all.map((s) => [s.id, s]));
  const childrenOf = new Map<string, Snap[]>();
  for (const s of all) {
    if (!s.parentId) continue;
    const list = childrenOf.get(s.parentId) ?? [];
    list.push(s);
    childrenOf.set(s.parentId, list);
  }
  const ledger = openEffects(ledgerPath);
  const effectsOf = new Map<string, EffectRow[]>();
  for (const e of readEffects(ledger)) {
    const list = effectsOf.get(e.jobId) ?? [];
    list.push(e);
    effectsOf.set(e.jobId, list);
  }
  ledger.close();
  const kills = new Map(d.kills.map((k) => [k.pid, k.at]));

  const inv: Invariants = {
    lost: 0,
    duplicateJobs: 0,
    notTerminal: 0,
    parentsMiscounted: 0,
    sagasMiscompensated: 0,
    unexplainedDuplicates: 0,
    signalsLost: 0,
    sleepsEarly: 0,
    missingEffects: 0,
    failFastLate: 0,
  };
  for (const a of driver.accepted) {
    if (!byId.has(a.id)) {
      inv.lost++;
      problem(`lost: ${a.type} ${a.id} (key ${a.key}) was accepted and is gone`);
    }
  }
  const keys = new Map<string, number>();
  for (const s of all) if (!s.parentId) keys.set(String(s.input.key), (keys.get(String(s.input.key)) ?? 0) + 1);
  for (const [key, n] of keys) {
    if (n > 1) {
      inv.duplicateJobs += n - 1;
      problem(`duplicate jobs: ${n} jobs for the key ${key}`);
    }
  }
  for (const s of all) {
    if (!TERMINAL.has(s.status)) {
      inv.notTerminal++;
      problem(`not terminal: ${s.type} ${s.id} is ${s.status}`);
    }
  }

  // Transition logs: of every saga, and of every job with a repeated effect.
  const repeated = (s: Snap) => {
    const seen = new Set<string>();
    for (const e of effectsOf.get(s.id) ?? []) {
      if (seen.has(e.kind)) return true;
      seen.add(e.kind);
    }
    return false;
  };
  const wanted = all.filter((s) => s.type === 'chaos.saga' || repeated(s));
  const logs = new Map<string, Transition[]>();
  const attemptErrors = new Map<string, Map<number, string>>();
  await pooled(wanted, 8, async (s) => {
    const { answer } = await api.persist<{ items: Transition[] }>('GET', `/v1/jobs/${s.id}/transitions`, (a) => a.status === 200);
    logs.set(s.id, answer.body.items);
    if (!repeated(s)) return;
    const attempts = await api.persist<{ items: { attempt: number; error: { code?: string; message?: string } | null }[] }>(
      'GET',
      `/v1/jobs/${s.id}/attempts?limit=1000`,
      (a) => a.status === 200,
    );
    attemptErrors.set(s.id, new Map(attempts.answer.body.items.filter((a) => a.error).map((a) => [a.attempt, `${a.error?.code}: ${a.error?.message}`])));
  });

  const explained: Record<string, number> = {};
  let partialSteps = 0;
  for (const s of wanted) {
    const effects = effectsOf.get(s.id) ?? [];
    const log = logs.get(s.id) ?? [];
    for (const dup of judgeDuplicates(s, effects, log, kills, attemptErrors.get(s.id)) as Duplicate[]) {
      if (dup.explained) {
        inc(explained, dup.why);
        if (examples.length < 6) examples.push(`${dup.type} ${dup.jobId} ${dup.unit} (attempt ${dup.attempt}): ${dup.why}`);
      } else {
        inv.unexplainedDuplicates++;
        problem(`duplicate effect: ${dup.type} ${dup.jobId} ${dup.unit} (attempt ${dup.attempt}): ${dup.why}`);
      }
    }
    if (s.type === 'chaos.saga') {
      const verdict = judgeSaga(s, effects, log);
      if (verdict.problem) {
        inv.sagasMiscompensated++;
        problem(`saga ${s.id} (${JSON.stringify({ failAt: s.input.failAt, failMode: s.input.failMode })}): ${verdict.problem}`);
      }
      partialSteps += verdict.partial.length;
      if (verdict.partial.length > 0 && examples.length < 8) examples.push(`saga ${s.id}: step ${verdict.partial.join(', ')} applied, never recorded complete, not compensated (${log.at(-1)?.reason})`);
    }
  }

  const byType: Record<string, Record<string, number>> = {};
  const unexpected: Record<string, number> = {};
  const failFast = { parents: 0, siblings: 0, cancelled: 0, startedAfterFailure: 0, startedOver1sAfter: 0, maxStartLagMs: 0 };
  const parents = all.filter((s) => s.type === 'chaos.parent');
  const parentSnaps = new Map<string, Snap>();
  await pooled(parents, 8, async (p) => {
    const { answer } = await api.persist<Snap>('GET', `/v1/jobs/${p.id}`, (a) => a.status === 200);
    parentSnaps.set(p.id, answer.body);
  });
  for (const s of all) {
    const effects = effectsOf.get(s.id) ?? [];
    byType[s.type] ??= {};
    inc(byType[s.type] as Record<string, number>, s.status);
    const parentPolicy = s.parentId ? (byId.get(s.parentId)?.input.policy as string | undefined) : undefined;
    const end = unexpectedEnd(s, parentPolicy);
    if (end) {
      const last = logs.get(s.id)?.at(-1)?.reason ?? (s.error?.message as string | undefined) ?? '';
      inc(unexpected, `${s.type} ${end}${/heartbeat lost/.test(last) ? ': heartbeat lost, attempts exhausted (killed on every attempt)' : ''}`);
    }
    const missing = missingEffects(s, effects);
    if (missing) {
      inv.missingEffects++;
      problem(`${s.type} ${s.id}: ${missing}`);
    }
    if (s.type === 'chaos.sleeper') {
      const early = judgeSleep(s, effects);
      if (early) {
        inv.sleepsEarly++;
        problem(`sleeper ${s.id}: ${early}`);
      }
    }
    if (s.type === 'chaos.parent') {
      const children = childrenOf.get(s.id) ?? [];
      const wrong = judgeParent(parentSnaps.get(s.id) ?? s, children);
      if (wrong) {
        inv.parentsMiscounted++;
        problem(`parent ${s.id} (${s.input.policy}, ${s.input.n} children): ${wrong}`);
      }
      if (s.input.policy === 'fail-fast') {
        const failedAt = Math.min(...children.filter((c) => c.status === 'failed' && c.finishedAt).map((c) => Date.parse(c.finishedAt as string)));
        const siblings = children.filter((c) => !c.input.fail);
        const after = siblings.filter((c) => c.startedAt && Date.parse(c.startedAt) > failedAt);
        const late = after.filter((c) => Date.parse(c.startedAt as string) > failedAt + 1000).length;
        failFast.parents++;
        failFast.siblings += siblings.length;
        failFast.cancelled += siblings.filter((c) => c.status === 'cancelled').length;
        failFast.startedAfterFailure += after.length;
        failFast.startedOver1sAfter += late;
        for (const c of after) failFast.maxStartLagMs = Math.max(failFast.maxStartLagMs, Date.parse(c.startedAt as string) - failedAt);
        if (late > 0) {
          inv.failFastLate += late;
          problem(`fail-fast parent ${s.id}: ${late} of its ${siblings.length} siblings started more than 1 s after a sibling failed`);
        }
      }
    }
  }
  const sentBy = new Map<string, SentSignal[]>();
  for (const sig of driver.signals) sentBy.set(sig.jobId, [...(sentBy.get(sig.jobId) ?? []), sig]);
  for (const [jobId, sent] of sentBy) {
    for (const l of lostSignals(byId.get(jobId), sent)) {
      inv.signalsLost++;
      problem(`signal lost: job ${jobId}: ${l}`);
    }
  }
  const failedStartsBy: Record<string, number> = {};
  for (const f of d.startFailures) inc(failedStartsBy, `${f.slot.replace(/-\w+$/, '')} ${f.exit}: ${f.line.replace(/\d+/g, 'N').slice(0, 160)}`);
  const logLines: Record<string, number> = {};
  for (const [k, n] of [...d.logLines].sort((a, b) => b[1] - a[1]).slice(0, 12)) logLines[k] = n;
  return {
    system: 'longhaul-chaos',
    store: o.store,
    processes: { servers: o.servers, workers: o.workers, concurrency: o.concurrency },
    timings: o.timings,
    jobs: {
      planned,
      topLevel,
      accepted: driver.accepted.length,
      replayed: driver.accepted.filter((a) => a.status === 200).length,
      seen: all.length,
      byType,
    },
    faults: {
      workerKills: d.kills.filter((k) => k.slot.startsWith('worker')).length,
      serverKills: d.kills.filter((k) => k.slot.startsWith('server')).length,
      pgDownMs: null,
      reaped: stats.answer.body.sweeper.zombiesReaped,
      failedStarts: d.startFailures.length,
      failedStartsBy,
      httpRetries: api.retries,
      noServerMs: api.noServerMs,
    },
    invariants: inv,
    explainedDuplicates: { total: Object.values(explained).reduce((a, b) => a + b, 0), byWhy: explained },
    sagaPartialSteps: partialSteps,
    unexpectedEnds: { total: Object.values(unexpected).reduce((a, b) => a + b, 0), byWhy: unexpected },
    failFast,
    signals: {
      sent: driver.signals.length,
      unsent: driver.signals.filter((s) => s.outcome === 'unsent').length,
      refused: driver.signals.filter((s) => s.outcome === 'refused').length,
    },
    drainMs: null,
    chaosMs: 0,
    wallMs: 0,
    logLines,
    problems,
    examples,
  };
}
