/**
 * Short PostgreSQL outages, as operators meet them:
 *
 * - every connection of the test database dropped for about a second (`pg_terminate_backend`,
 *   on the shared server: only this test's database is touched) while a handler saves
 *   checkpoints: the attempt does not fail, and the log shows the retried writes;
 * - a restart of a server this test owns (a private cluster; restarting the shared one would
 *   break the other test files): `/readyz` answers 200 while it is up, 503 while it refuses
 *   connections, 200 again after; a handler saving checkpoints across the restart still ends in
 *   its first attempt.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';

/** Per job key: set to stop the handler's checkpoint loop; the saves it made, and the errors it saw. */
const control = new Map<string, { stop: boolean; saves: number; errors: string[] }>();

const tasks = [
  defineTask({
    type: 'o.checkpoints',
    maxAttempts: 3,
    async run(input, ctx) {
      const c = control.get((input as { key: string }).key);
      if (!c) throw new Error('no control entry');
      while (!c.stop) {
        try {
          await ctx.checkpoint.save({ n: c.saves + 1, at: Date.now() });
          c.saves++;
        } catch (err) {
          c.errors.push((err as Error).message);
          throw err;
        }
        await sleep(5);
      }
      return { saves: c.saves };
    },
  }),
];

const dir = mkdtempSync(join(tmpdir(), 'longhaul-outage-'));
const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

/** A pino logger whose lines are kept (parsed). */
function capture(): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { logger: pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) }), lines };
}

async function until<T>(fn: () => Promise<T | undefined>, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function open(url: string, logger: pino.Logger): Promise<Longhaul> {
  return Longhaul.open({
    database: url,
    tasks,
    logger,
    channel: false,
    files: { urlSigningSecret: 'outage-test-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(dir, `blobs-${Math.random()}`)) },
  });
}

/** Starts a checkpointing job and waits until it has saved a few. */
async function startCheckpointing(lh: Longhaul, key: string): Promise<JobSnapshot> {
  control.set(key, { stop: false, saves: 0, errors: [] });
  const job = await lh.submit('o.checkpoints', { key });
  await until(async () => ((control.get(key)?.saves ?? 0) >= 3 ? true : undefined), 'first checkpoints');
  return job;
}

/** Lets the job finish and checks it did so in its first attempt, its saves never failing. */
async function finishFirstTime(lh: Longhaul, key: string, job: JobSnapshot, lines: Record<string, unknown>[]): Promise<void> {
  const c = control.get(key) as { stop: boolean; saves: number; errors: string[] };
  c.stop = true;
  const end = await until(async () => {
    const s = await lh.get(job.id);
    return s && ['succeeded', 'failed', 'cancelled'].includes(s.status) ? s : undefined;
  }, 'the job to end');
  assert.deepEqual(c.errors, [], 'no checkpoint save failed in the handler');
  assert.equal(end.status, 'succeeded', JSON.stringify(end.error));
  assert.equal(end.attempts, 1, 'the outage cost no attempt');
  assert.equal(end.lastError, null);
  const log = await lh.transitions(job.id);
  assert.deepEqual(
    log.map((e) => e.to),
    ['queued', 'running', 'succeeded'],
  );
  const retries = lines.filter((l) => l.msg === 'store write (checkpoint) failed; retrying' && l.jobId === job.id);
  assert.ok(retries.length >= 1, 'the log shows the retried checkpoint writes');
  for (const r of retries) assert.deepEqual([r.type, r.attempt, r.tenant], ['o.checkpoints', 1, 'default']);
  assert.ok(
    lines.some((l) => l.msg === 'store write (checkpoint) succeeded after retrying' && l.jobId === job.id),
    'and that they went through',
  );
}

describe('PostgreSQL dropping every connection for about a second', () => {
  it('does not fail an attempt saving checkpoints; the log shows the retries', async () => {
    const db: TestDatabase = await createTestDatabase('lh_outage');
    cleanups.push(() => db.drop());
    const { logger, lines } = capture();
    const lh = await open(db.url, logger);
    cleanups.push(() => lh.close({ drainMs: 0 }));
    await lh.startWorker({ concurrency: 2, pollIntervalMs: 20, sweeper: false });
    const job = await startCheckpointing(lh, 'terminate');

    const admin = new pg.Client({ connectionString: db.url, application_name: 'outage-test-admin' });
    await admin.connect();
    cleanups.push(() => admin.end());
    const until1s = Date.now() + 1_000;
    let ended = 0;
    while (Date.now() < until1s) {
      const res = await admin.query(
        `SELECT count(pg_terminate_backend(pid))::integer AS n FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'longhaul%'`,
      );
      ended += Number(res.rows[0]?.n ?? 0);
      await sleep(10);
    }
    assert.ok(ended >= 5, `connections were dropped (${ended})`);
    await finishFirstTime(lh, 'terminate', job, lines);
  });
});

describe('PostgreSQL restarted', () => {
  it('/readyz answers 200 when healthy, 503 while connections are refused, 200 again; checkpoints across the restart cost no attempt', async () => {
    const server = await PrivatePostgres.start();
    cleanups.push(() => server.destroy());
    const url = await server.createDatabase('longhaul_outage');
    const { logger, lines } = capture();
    const lh = await open(url, logger);
    cleanups.push(() => lh.close({ drainMs: 0 }));
    const app: FastifyInstance = await buildServer({ lh, logger: false });
    cleanups.push(() => app.close());
    const base = await app.listen({ port: 0, host: '127.0.0.1' });
    const ready = async () => {
      const res = await fetch(`${base}/readyz`);
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    assert.deepEqual(await ready(), { status: 200, body: { status: 'ready' } });

    await lh.startWorker({ concurrency: 2, pollIntervalMs: 20, sweeper: false });
    const job = await startCheckpointing(lh, 'restart');

    let restarted = false;
    const restart = server.restart(1_000).then(() => {
      restarted = true;
    });
    const down = await until(async () => {
      const r = await ready();
      return r.status === 503 ? r : restarted ? null : undefined;
    }, '/readyz to answer 503');
    assert.ok(down, '/readyz answered 503 while the server was down');
    assert.equal(down.body.code, 'NOT_READY');
    // A reason code only: the database's error (hosts, users) goes to the log.
    assert.match(String(down.body.reason), /^DATABASE_(UNAVAILABLE|TIMEOUT)$/);
    assert.doesNotMatch(String(down.body.detail), /ECONNREFUSED|127\.0\.0\.1|postgres/i);
    // Meanwhile a read is a 503 to try again, not a 500.
    const read = await fetch(`${base}/v1/jobs/${job.id}`);
    if (!restarted) {
      assert.equal(read.status, 503);
      assert.equal(read.headers.get('retry-after'), '2');
      assert.equal(((await read.json()) as { code: string }).code, 'DATABASE_UNAVAILABLE');
    }
    await restart;
    await until(async () => ((await ready()).status === 200 ? true : undefined), '/readyz to answer 200 again');
    await finishFirstTime(lh, 'restart', job, lines);
  });
});
