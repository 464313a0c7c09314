/** Prints a chaos run's report: a table, the problems and examples, then one JSON line (the last line of stdout). */
import { table } from '../util.js';
import type { ChaosReport } from './run.js';

const n = (v: number) => v.toLocaleString('en-US');
const s = (ms: number | null) => (ms === null ? 'n/a' : `${(ms / 1000).toFixed(1)} s`);

export function invariantsHold(r: ChaosReport): boolean {
  return Object.values(r.invariants).every((v) => v === 0);
}

export function printReport(r: ChaosReport, extra: Record<string, unknown> = {}): void {
  const inv = r.invariants;
  const states = (t: Record<string, number>) =>
    Object.entries(t)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${n(v)}`)
      .join(', ');
  const rows: string[][] = [
    ['processes', `${r.processes.servers} server(s), ${r.processes.workers} workers × ${r.processes.concurrency}`, ''],
    ['jobs', n(r.jobs.seen), `planned ${n(r.jobs.planned)}; ${n(r.jobs.accepted)} of ${n(r.jobs.topLevel)} top-level accepted over HTTP (${n(r.jobs.replayed)} replays)`],
    ...Object.entries(r.jobs.byType).map(([type, t]) => [`  ${type}`, n(Object.values(t).reduce((a, b) => a + b, 0)), states(t)]),
    ['worker kill -9', n(r.faults.workerKills), `${n(r.faults.failedStarts)} failed restarts; ${n(r.faults.reaped)} running jobs reaped from lost workers`],
    ['API server kill -9', n(r.faults.serverKills), 'and restarted'],
    ['PostgreSQL down', r.faults.pgDownMs === null ? 'no' : s(r.faults.pgDownMs), ''],
    ['jobs lost', n(inv.lost), 'must be 0'],
    ['jobs twice for one key', n(inv.duplicateJobs), 'must be 0'],
    ['jobs not terminal after the drain', n(inv.notTerminal), 'must be 0'],
    ['parents miscounted', n(inv.parentsMiscounted), 'must be 0'],
    ['sagas not compensated exactly in reverse', n(inv.sagasMiscompensated), 'must be 0'],
    ['effects repeated, unexplained', n(inv.unexplainedDuplicates), 'must be 0'],
    ['effects repeated, at-least-once', n(r.explainedDuplicates.total), 'allowed, explained below'],
    ['saga steps applied, not completed, not compensated', n(r.sagaPartialSteps), 'allowed: killed between the effect and its checkpoint on the last attempt'],
    ['succeeded without an effect', n(inv.missingEffects), 'must be 0'],
    ['signals lost', n(inv.signalsLost), `must be 0 (${n(r.signals.sent)} sent, ${n(r.signals.refused)} refused: job ended, ${n(r.signals.unsent)} never accepted)`],
    ['sleeps woken early', n(inv.sleepsEarly), 'must be 0'],
    ['ends other than planned', n(r.unexpectedEnds.total), 'explained below'],
    ['fail-fast siblings started > 1 s after a failure', n(inv.failFastLate), 'must be 0 (cancelled at once)'],
    [
      'fail-fast siblings',
      n(r.failFast.siblings),
      `${r.failFast.parents} parents: ${n(r.failFast.cancelled)} cancelled; started after the failing child ended: ${n(r.failFast.startedAfterFailure)} (at most ${n(r.failFast.maxStartLagMs)} ms after), over 1 s after: ${n(r.failFast.startedOver1sAfter)}`,
    ],
    ['time to drain after the last fault', s(r.drainMs), ''],
    ['chaos / wall time', `${s(r.chaosMs)} / ${s(r.wallMs)}`, ''],
    ['HTTP requests retried', n(r.faults.httpRetries), `no API server running for ${s(r.faults.noServerMs)}`],
  ];
  console.log(`\nLonghaul chaos run on ${r.store === 'pg' ? 'PostgreSQL' : 'SQLite'}\n`);
  console.log(table(['', 'value', 'notes'], rows));
  const section = (title: string, m: Record<string, number>) => {
    if (Object.keys(m).length === 0) return;
    console.log(`\n${title}:`);
    for (const [k, v] of Object.entries(m)) console.log(`  ${String(v).padStart(6)}  ${k}`);
  };
  section('repeated effects allowed by at-least-once, by cause', r.explainedDuplicates.byWhy);
  section('ends other than planned', r.unexpectedEnds.byWhy);
  section('failed restarts', r.faults.failedStartsBy);
  section('log lines at warn (40) and error (50) level, every process', r.logLines);
  if (r.examples.length > 0) console.log(`\nexamples:\n${r.examples.map((e) => `  ${e}`).join('\n')}`);
  if (r.problems.length > 0) console.log(`\nPROBLEMS:\n${r.problems.map((p) => `  ${p}`).join('\n')}`);
  console.log(`\ninvariants ${invariantsHold(r) ? 'hold' : 'VIOLATED'}`);
  console.log(JSON.stringify({ ...r, ...extra }));
}
