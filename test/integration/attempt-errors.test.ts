/**
 * A failed attempt, seen by users and operators, on SQLite and PostgreSQL: the snapshot's
 * `error` belongs to the current state (retrying, failed, cancelled) and a new attempt does not
 * show the previous one's failure as its own; `lastError` keeps it (while the next attempt runs,
 * after a success, after a manual retry). Every failed attempt is logged once by the worker
 * with the job's id, type, attempt and tenant. Read through the library and through HTTP (on
 * SQLite, `GET /v1/jobs/{id}` is the snapshot the database writes: both must agree).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { FatalError, RetryableError } from '../../src/core/errors.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { pollUntil as until } from '../support/poll.js';

const gates = new Map<string, () => void>();
const tasks = [
  defineTask({
    type: 'ae.flaky',
    maxAttempts: 3,
    async run(input, ctx) {
      if (ctx.attempt === 1) throw new RetryableError('first attempt broke', { code: 'FIRST', delayMs: 0 });
      await new Promise<void>((resolve) => gates.set((input as { gate: string }).gate, resolve));
      return { attempt: ctx.attempt };
    },
  }),
  defineTask({
    type: 'ae.fatal',
    maxAttempts: 3,
    async run() {
      throw new FatalError('no way', { code: 'NO_WAY' });
    },
  }),
];

const dir = mkdtempSync(join(tmpdir(), 'longhaul-attempt-errors-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, 'errors.db') },
  {
    name: 'PostgreSQL',
    database: async () => {
      pgDb = await createTestDatabase('lh_attempt_errors');
      return pgDb.url;
    },
  },
];

for (const target of TARGETS) {
  describe(`errors of failed attempts, on ${target.name}`, () => {
    it('a running or succeeded attempt shows no earlier error as its own; lastError keeps it; each failure is logged once', async () => {
      const lines: Record<string, unknown>[] = [];
      const lh = await Longhaul.open({
        database: await target.database(),
        tasks,
        logger: pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) }),
        sweepIntervalMs: 50,
        files: { urlSigningSecret: 'attempt-errors-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(dir, `blobs-${target.name}`)) },
      });
      const app = await buildServer({ lh, logger: false });
      const base = await app.listen({ port: 0, host: '127.0.0.1' });
      /** The snapshot by the library and by HTTP, which must be the same. */
      const read = async (id: string): Promise<JobSnapshot> => {
        const lib = (await lh.get(id)) as JobSnapshot;
        const http = (await (await fetch(`${base}/v1/jobs/${id}`)).json()) as JobSnapshot;
        if (http.updatedAt === lib.updatedAt && http.status === lib.status) assert.deepEqual(http, JSON.parse(JSON.stringify(lib)));
        return lib;
      };
      try {
        await lh.startWorker({ concurrency: 2, pollIntervalMs: 10 });
        const first = { message: 'first attempt broke', code: 'FIRST', retryable: true };

        // Attempt 1 fails (retryable), attempt 2 runs.
        const flaky = await lh.submit('ae.flaky', { gate: `${target.name}-g1` });
        const running = await until(async () => {
          const s = await read(flaky.id);
          return s.status === 'running' && s.attempts === 2 ? s : undefined;
        }, 'the second attempt to run');
        assert.equal(running.error, null, 'the running attempt has no error of its own');
        assert.deepEqual(running.lastError, first);

        // It succeeds: still no error, the first attempt's failure kept as lastError.
        await until(async () => (gates.has(`${target.name}-g1`) ? true : undefined), 'the handler to wait');
        gates.get(`${target.name}-g1`)?.();
        const done = await until(async () => {
          const s = await read(flaky.id);
          return s.status === 'succeeded' ? s : undefined;
        }, 'success');
        assert.equal(done.error, null);
        assert.deepEqual(done.lastError, first);
        assert.deepEqual(done.result, { attempt: 2 });

        // A fatal failure: error and lastError are the same; a manual retry clears error only.
        const fatal = await lh.submit('ae.fatal', null);
        const failed = await until(async () => {
          const s = await read(fatal.id);
          return s.status === 'failed' ? s : undefined;
        }, 'failure');
        const noWay = { message: 'no way', code: 'NO_WAY', retryable: false };
        assert.deepEqual(failed.error, noWay);
        assert.deepEqual(failed.lastError, noWay);
      } finally {
        await app.close();
        await lh.close({ drainMs: 0 });
      }

      // The log: each failed attempt once, with what an operator needs.
      const failures = lines.filter((l) => typeof l.msg === 'string' && (l.msg as string).startsWith('attempt failed'));
      assert.deepEqual(
        failures.map((l) => [l.msg, l.type, l.attempt, l.tenant, l.code, l.next, (l.err as { message?: string } | undefined)?.message]),
        [
          ['attempt failed; retrying', 'ae.flaky', 1, 'default', 'FIRST', 'retrying', 'first attempt broke'],
          ['attempt failed; job failed', 'ae.fatal', 1, 'default', 'NO_WAY', 'failed', 'no way'],
        ],
      );
      assert.ok(failures.every((l) => typeof l.jobId === 'string' && typeof l.workerId === 'string'));
      assert.equal(failures[0]?.level, 40, 'a retry is a warning');
      assert.equal(failures[1]?.level, 50, 'a failed job is an error');
    });

    it('a manual retry leaves error null while queued and keeps lastError', async () => {
      const lh = await Longhaul.open({
        database: target.name === 'SQLite' ? join(dir, 'retry.db') : (pgDb as TestDatabase).url,
        tasks,
        logger: pino({ level: 'silent' }),
        channel: false,
        files: { urlSigningSecret: 'attempt-errors-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(dir, `blobs2-${target.name}`)) },
      });
      try {
        const worker = await lh.startWorker({ concurrency: 1, pollIntervalMs: 10 });
        const job = await lh.submit('ae.fatal', null);
        await until(async () => ((await lh.get(job.id))?.status === 'failed' ? true : undefined), 'failure');
        await worker.stop();
        const retried = await lh.retry(job.id);
        assert.equal(retried.status, 'queued');
        assert.equal(retried.error, null);
        assert.deepEqual(retried.lastError, { message: 'no way', code: 'NO_WAY', retryable: false });
        const cancelled = await lh.cancel(job.id);
        assert.deepEqual(cancelled.error, { message: 'cancelled', code: 'CANCELLED', retryable: false }, 'a cancel is the current error');
        assert.deepEqual(cancelled.lastError, cancelled.error);
      } finally {
        await lh.close({ drainMs: 0 });
      }
    });
  });
}
