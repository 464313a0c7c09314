/**
 * `longhaul worker` and `longhaul server` (the CLI, run from source) and a PostgreSQL that goes
 * away, on a server this file owns (a private cluster: stopping the shared one would break the
 * other test files).
 *
 * - Started while the database is down, neither exits: each logs once that it waits, the
 *   server's port answers `/healthz` 200 and `/readyz` 503 meanwhile, and once the database is
 *   up both log once that it answers, the server listens on the same port, and jobs run.
 * - Running when the database goes away for a few seconds (dozens of sweeper passes), each part
 *   of each process logs the outage once when it starts and once when it ends; nothing logs a
 *   failure per pass or per try, and API requests answered 503 meanwhile are not logged each.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { killAllChildren, waitFor } from '../fixtures/process-harness.js';
import { getJob, LonghaulProcess, SCALE_TASKS, submitJob } from '../support/cluster.js';
import { PrivatePostgres } from '../support/private-postgres.js';

const STARTED = 'database unreachable, retrying';
const LASTING = 'database still unreachable, retrying';
const ENDED = 'database reachable again';
/** What a process logged per failed try or pass before outages were logged once. */
const PER_TRY = ['sweep failed', 'sweeper maintenance failed', 'worker loop failed; retrying', 'worker background task failed', 'PostgreSQL listen connection failed; retrying'];

let pg: PrivatePostgres;
let url: string;
const processes: LonghaulProcess[] = [];

before(async () => {
  pg = await PrivatePostgres.start();
  url = await pg.createDatabase('lh_db_outage');
});

after(async () => {
  await Promise.all(processes.map((p) => p.stop(3000)));
  await killAllChildren();
  await pg?.destroy();
});

function env(): Record<string, string> {
  return {
    LONGHAUL_DATABASE_URL: url,
    LONGHAUL_LOG_LEVEL: 'info',
    LONGHAUL_SWEEP_INTERVAL_MS: '100',
    LONGHAUL_HEARTBEAT_INTERVAL_MS: '200',
    LONGHAUL_HEARTBEAT_TIMEOUT_MS: '20000',
  };
}

function start(args: string[], label: string): LonghaulProcess {
  const p = new LonghaulProcess(args, env(), label);
  processes.push(p);
  return p;
}

type Line = Record<string, unknown> & { msg?: string; level?: number; component?: string };

/** The JSON log lines a process printed (from `from` characters into its stdout on). */
function lines(p: LonghaulProcess, from = 0): Line[] {
  const out: Line[] = [];
  for (const text of p.stdout.slice(from).split('\n')) {
    if (!text.startsWith('{')) continue;
    try {
      out.push(JSON.parse(text) as Line);
    } catch {
      // a line cut by the start of the window
    }
  }
  return out;
}

function count(ls: Line[], msg: string, component?: string): number {
  return ls.filter((l) => l.msg === msg && (component === undefined || l.component === component)).length;
}

async function runJobs(base: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push((await submitJob(base, 'scale.progress', { steps: 2, stepMs: 5 })).id);
  for (const id of ids) await waitFor(async () => (await getJob(base, id)).status === 'succeeded', `job ${id} succeeded`, 30_000, 50);
  return ids;
}

describe('PostgreSQL down', () => {
  it('a worker and a server started while it is down wait for it (health answered meanwhile), then serve', async () => {
    await pg.stop();
    const worker = start(['worker', '--tasks', SCALE_TASKS, '--concurrency', '2'], 'worker');
    const server = start(['server', '--port', '0', '--tasks', SCALE_TASKS], 'server');
    try {
      await worker.waitOutput(/database unreachable, retrying/, 'the worker waiting', 30_000);
      const placeholder = (await server.waitOutput(/"url":"(http:\/\/[^"]+)".*until the database answers/, 'the server waiting', 30_000))[1] as string;
      // Several tries later (they start 250 ms apart and grow), still waiting, still one line.
      await sleep(3_000);
      for (const p of [worker, server]) {
        assert.equal(p.child.exitInfo, null, `${p.label} is still running:\n${p.output()}`);
        assert.equal(count(lines(p), STARTED, 'startup'), 1, `${p.label} said once that it waits:\n${p.output()}`);
        assert.equal(count(lines(p), LASTING), 0);
      }
      assert.doesNotMatch(worker.stdout, /longhaul worker running/);

      const health = await fetch(`${placeholder}/healthz`);
      assert.equal(health.status, 200, 'alive: a liveness probe must not restart a process that waits');
      const ready = await fetch(`${placeholder}/readyz`);
      assert.equal(ready.status, 503);
      const readyBody = (await ready.json()) as { code: string; detail: string; reason: string };
      assert.equal(readyBody.code, 'NOT_READY');
      // A reason code only: the database's error goes to the log.
      assert.equal(readyBody.reason, 'DATABASE_UNAVAILABLE');
      assert.doesNotMatch(readyBody.detail, /ECONNREFUSED/);
      const api = await fetch(`${placeholder}/v1/jobs`);
      assert.equal(api.status, 503);
      assert.equal(api.headers.get('retry-after'), '5');
      assert.equal(((await api.json()) as { code: string }).code, 'DATABASE_UNAVAILABLE');

      await pg.resume();
      await worker.waitOutput(/longhaul worker running/, 'the worker running once the database is up', 30_000);
      const base = ((await server.waitOutput(/listening on (http:\/\/\S+)/, 'the server listening once the database is up', 30_000))[1] as string).replace('localhost', '127.0.0.1');
      assert.equal(new URL(base).port, new URL(placeholder).port, 'the server took over the port that answered meanwhile');
      assert.equal((await fetch(`${base}/readyz`)).status, 200);
      for (const p of [worker, server]) {
        assert.equal(count(lines(p), STARTED, 'startup'), 1, `${p.label}: one line when it began to wait`);
        assert.equal(count(lines(p), ENDED, 'startup'), 1, `${p.label}: one line when the database answered`);
      }
      await runJobs(base, 4);
    } finally {
      await Promise.all([worker.stop(3000), server.stop(3000)]);
    }
  });

  it('running processes log an outage once when it starts and once when it ends, not per pass', async () => {
    const worker = start(['worker', '--tasks', SCALE_TASKS, '--concurrency', '2'], 'worker');
    const server = start(['server', '--port', '0', '--tasks', SCALE_TASKS], 'server');
    try {
      await worker.waitOutput(/longhaul worker running/, 'the worker running', 30_000);
      const base = ((await server.waitOutput(/listening on (http:\/\/\S+)/, 'the server listening', 30_000))[1] as string).replace('localhost', '127.0.0.1');
      const [done] = await runJobs(base, 2);
      const marks = [worker.stdout.length, server.stdout.length];

      // Down for 3 s: about 30 sweeper passes in each process, and the worker's cycles and polls.
      await pg.stop();
      const downAt = Date.now();
      let answered503 = 0;
      for (let i = 0; i < 20; i++) if ((await fetch(`${base}/v1/jobs/${done}`)).status === 503) answered503++;
      assert.equal(answered503, 20, 'reads are answered 503 while the database is down');
      await sleep(Math.max(0, 3_000 - (Date.now() - downAt)));
      await pg.resume();
      await runJobs(base, 4);
      // Every part that met the outage tries again within its back-off (at most 5 s apart) and says it ended.
      await waitFor(
        () =>
          [worker, server].every((p, i) => {
            const ls = lines(p, marks[i]);
            return ls.filter((l) => l.msg === STARTED).every((l) => count(ls, ENDED, l.component) > 0);
          }),
        'every outage logged as ended',
        15_000,
        100,
      ).catch(() => undefined);

      for (const [i, p] of [worker, server].entries()) {
        const ls = lines(p, marks[i]);
        const detail = `${p.label}'s log during and after the outage:\n${ls.map((l) => `${l.level} ${l.component ?? ''} ${l.msg}`).join('\n')}`;
        for (const msg of PER_TRY) assert.equal(count(ls, msg), 0, `"${msg}" is not logged per try. ${detail}`);
        if (p === server) assert.equal(count(ls, 'database unavailable: answered 503'), 1, `one line for the 20 requests answered 503. ${detail}`);
        for (const component of p === worker ? ['sweeper', 'worker loop'] : ['sweeper']) {
          assert.equal(count(ls, STARTED, component), 1, `${component}: one line when the outage started. ${detail}`);
          assert.equal(count(ls, ENDED, component), 1, `${component}: one line when it ended. ${detail}`);
        }
        const ended = ls.filter((l) => l.msg === ENDED);
        for (const l of ended) assert.ok(typeof l.failures === 'number' && typeof l.downMs === 'number', `the end line counts failures and duration: ${JSON.stringify(l)}`);
        // Each line that started an outage has its end line: nothing left hanging.
        for (const l of ls.filter((x) => x.msg === STARTED)) assert.equal(count(ls, ENDED, l.component), 1, `${l.component} ended its outage. ${detail}`);
        const loud = ls.filter((l) => (l.level ?? 0) >= 40);
        assert.ok(loud.length <= 12, `a few warnings and errors in all, not one per pass (${loud.length}). ${detail}`);
      }
    } finally {
      await Promise.all([worker.stop(3000), server.stop(3000)]);
    }
  });
});
