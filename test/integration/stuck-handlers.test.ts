/**
 * A handler that never settles and ignores `ctx.signal` (a socket read without a timeout, a
 * driver that hangs) must not hold its worker slot for ever: once its job has ended (timeout,
 * cancel, lost lease) and the drain period has passed, the worker abandons it, frees the slot,
 * logs a warning and counts it; past `maxAbandonedHandlers` still pending it reports itself
 * unhealthy. Run on SQLite and on PostgreSQL.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildHealthServer } from '../../src/server/health-server.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { pollUntil } from '../support/poll.js';

/** Log lines, parsed, as the worker wrote them. */
function capturedLogger(): { logger: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, sink), lines };
}

/** Resolves when `release()` is called; never otherwise. Ignores every signal. */
let releaseHung: () => void = () => {};
let hung = new Promise<void>((r) => {
  releaseHung = r;
});

const tasks = [
  defineTask({
    type: 'stuck.hang',
    maxAttempts: 1,
    timeoutMs: 2000,
    async run() {
      await hung; // never settles until the test releases it; ignores ctx.signal
      return { late: true };
    },
  }),
  defineTask({
    type: 'stuck.quick',
    async run(input) {
      return { n: (input as { n: number }).n };
    },
  }),
];

const dir = mkdtempSync(join(tmpdir(), 'longhaul-stuck-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  releaseHung();
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, 'stuck.db') },
  {
    name: 'PostgreSQL',
    async database() {
      pgDb = await createTestDatabase('lh_stuck');
      return pgDb.url;
    },
  },
];

for (const target of TARGETS) {
  describe(`handlers that never settle, on ${target.name}`, () => {
    it('are abandoned after the drain period: the slots free, the quick jobs run, a warning and the counter say so, the worker reports unhealthy past the limit', async () => {
      hung = new Promise<void>((r) => {
        releaseHung = r;
      });
      const { logger, lines } = capturedLogger();
      const lh = await Longhaul.open({
        database: await target.database(),
        tasks,
        logger,
        cancelDrainMs: 2000,
        sweepIntervalMs: 200,
        heartbeatIntervalMs: 500,
        heartbeatTimeoutMs: 5000,
        maxAbandonedHandlers: 1,
      });
      try {
        await lh.startWorker({ concurrency: 2 });
        const t0 = Date.now();
        const stuck = [await lh.submit('stuck.hang', {}), await lh.submit('stuck.hang', {})];
        await pollUntil(async () => ((await Promise.all(stuck.map((j) => lh.get(j.id)))).every((j) => j?.status === 'running') ? true : undefined), 'both hung jobs running');
        const quick: JobSnapshot[] = [];
        for (let n = 0; n < 5; n++) quick.push(await lh.submit('stuck.quick', { n }));
        assert.equal(lh.workerHealth().healthy, true);

        // The timeout (2 s) asks the handlers to stop; they ignore it; 2 s of drain later they
        // are abandoned and the five quick jobs run in the freed slots.
        const done = await pollUntil(
          async () => {
            const all = await Promise.all(quick.map((j) => lh.get(j.id)));
            return all.every((j) => j?.status === 'succeeded') ? all : undefined;
          },
          'the quick jobs to succeed',
          12_000,
        );
        const took = Date.now() - t0;
        assert.equal(done.length, 5);
        assert.ok(took < 9000, `the quick jobs ran ${took} ms after the hung ones started (timeout 2 s + drain 2 s)`);
        for (const j of stuck) {
          const s = await lh.get(j.id);
          assert.equal(s?.status, 'cancelled');
          assert.equal(s?.error?.code, 'TIMEOUT');
        }

        const warnings = lines.filter((l) => l.msg === 'handler did not return after its job ended; abandoned it and freed its slot');
        assert.equal(warnings.length, 2, JSON.stringify(lines.filter((l) => (l.level as number) >= 40)));
        assert.deepEqual(new Set(warnings.map((w) => w.jobId)), new Set(stuck.map((j) => j.id)));
        assert.equal(warnings[0]?.level, 40);
        assert.equal(warnings[0]?.type, 'stuck.hang');

        const metrics = await lh.metrics.render();
        assert.match(metrics, /^longhaul_abandoned_handlers_total\{task_type="stuck.hang"\} 2$/m);
        assert.match(metrics, /^longhaul_abandoned_handlers_pending 2$/m);

        // Two pending, one allowed: unhealthy, said once in the log.
        const health = lh.workerHealth();
        assert.equal(health.healthy, false);
        assert.equal(health.abandonedPending, 2);
        assert.match(health.reason ?? '', /2 abandoned handlers/);
        assert.equal(lines.filter((l) => l.msg === 'too many abandoned handlers still pending; this worker reports itself unhealthy (restart it)').length, 1);
        // A supervisor sees it on the health endpoints (a worker's health port, and the API's).
        const healthApp = buildHealthServer({ lh });
        for (const path of ['/healthz', '/readyz']) {
          const res = await healthApp.inject({ method: 'GET', url: path });
          assert.equal(res.statusCode, 503, path);
          assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
          assert.match(res.json().detail, /worker unhealthy: 2 abandoned handlers still pending/);
        }
        assert.match((await healthApp.inject({ method: 'GET', url: '/metrics' })).body, /^longhaul_abandoned_handlers_pending 2$/m);

        // The handlers return at last: their late results change nothing, the gauge goes back to 0.
        releaseHung();
        await pollUntil(async () => (lh.workerHealth().abandonedPending === 0 ? true : undefined), 'the abandoned handlers to return');
        assert.equal(lh.workerHealth().healthy, true);
        assert.equal((await healthApp.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
        assert.equal((await healthApp.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
        await healthApp.close();
        assert.match(await lh.metrics.render(), /^longhaul_abandoned_handlers_pending 0$/m);
        for (const j of stuck) assert.equal((await lh.get(j.id))?.status, 'cancelled');
      } finally {
        await lh.close({ drainMs: 0 });
      }
    });

    it('a cancelled job whose handler ignores the signal is abandoned too, and its slot runs the next job', async () => {
      hung = new Promise<void>((r) => {
        releaseHung = r;
      });
      const { logger, lines } = capturedLogger();
      const lh = await Longhaul.open({ database: await target.database(), tasks, logger, cancelDrainMs: 1000, sweepIntervalMs: 200 });
      try {
        await lh.startWorker({ concurrency: 1 });
        const job = await lh.submit('stuck.hang', {}, { timeoutMs: 600_000 });
        await pollUntil(async () => ((await lh.get(job.id))?.status === 'running' ? true : undefined), 'the hung job running');
        const next = await lh.submit('stuck.quick', { n: 1 });
        await lh.cancel(job.id);
        const s = await pollUntil(async () => {
          const n = await lh.get(next.id);
          return n?.status === 'succeeded' ? n : undefined;
        }, 'the next job to run in the freed slot');
        assert.deepEqual(s.result, { n: 1 });
        assert.equal((await lh.get(job.id))?.status, 'cancelled');
        assert.equal(lines.filter((l) => l.msg === 'handler did not return after its job ended; abandoned it and freed its slot').length, 1);
        // The default limit (10) is not reached by one.
        assert.equal(lh.workerHealth().healthy, true);
      } finally {
        releaseHung();
        await lh.close({ drainMs: 0 });
      }
    });
  });
}
