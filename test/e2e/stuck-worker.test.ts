/**
 * The report, as a user would meet it: `longhaul worker --concurrency 2` with a task
 * whose handler never settles and ignores ctx.signal (timeoutMs 2 s, LONGHAUL_CANCEL_DRAIN_MS
 * 2 s); two of those, then five quick jobs. The quick jobs must run once the hung handlers are
 * abandoned, the log must say so, and the worker's health port must report it unhealthy past
 * LONGHAUL_MAX_ABANDONED_HANDLERS (here 1), with the counters on its /metrics.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { defineTask, type JobSnapshot, Longhaul } from '../../src/index.js';
import { tempDir, waitFor } from '../fixtures/process-harness.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const tmp = tempDir('lh-stuck-cli-');
after(() => tmp.remove());

describe('longhaul worker with handlers that never settle', () => {
  it('abandons them after the drain period, runs the quick jobs, logs a warning, and answers 503 on its health port past the limit', async () => {
    const database = join(tmp.dir, 'stuck.db');
    // The test side submits and reads (no worker here); a job takes its timeout and attempts
    // from the submitting side's task, so these match the fixture's.
    const types = [defineTask({ type: 'stuck.hang', maxAttempts: 1, timeoutMs: 2000, run: () => null }), defineTask({ type: 'stuck.quick', run: () => null })];
    const lh = await Longhaul.open({ database, logger: pino({ level: 'silent' }), tasks: types });
    let out = '';
    let err = '';
    const proc = spawn(
      process.execPath,
      [join(ROOT, 'dist/cli/main.js'), 'worker', '--tasks', join(ROOT, 'test/fixtures/stuck-tasks.mjs'), '--database', database, '--concurrency', '2', '--health-port', '0'],
      {
        cwd: ROOT,
        env: { ...process.env, LONGHAUL_CANCEL_DRAIN_MS: '2000', LONGHAUL_SWEEP_INTERVAL_MS: '200', LONGHAUL_MAX_ABANDONED_HANDLERS: '1', LONGHAUL_LOG_LEVEL: 'info' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    proc.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    proc.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    try {
      const base = await waitFor(
        () => {
          if (proc.exitCode !== null) throw new Error(`the worker exited: ${err}`);
          return /health on (http:\/\/\S+)\/healthz/.exec(out)?.[1];
        },
        'the worker to print its health address',
        30_000,
      );
      assert.equal((await fetch(`${base}/healthz`)).status, 200);
      assert.equal((await fetch(`${base}/readyz`)).status, 200);
      const notFound = await fetch(`${base}/v1/jobs`);
      assert.equal(notFound.status, 404);
      assert.match(notFound.headers.get('content-type') ?? '', /^application\/problem\+json/);

      const t0 = Date.now();
      const hung = [await lh.submit('stuck.hang', {}), await lh.submit('stuck.hang', {})];
      await waitFor(async () => (await Promise.all(hung.map((j) => lh.get(j.id)))).every((j) => j?.status === 'running'), 'both hung jobs running');
      const quick: JobSnapshot[] = [];
      for (let n = 0; n < 5; n++) quick.push(await lh.submit('stuck.quick', { n }));
      await waitFor(async () => (await Promise.all(quick.map((j) => lh.get(j.id)))).every((j) => j?.status === 'succeeded'), 'the five quick jobs to succeed', 15_000);
      const took = Date.now() - t0;
      assert.ok(took < 10_000, `the quick jobs ran ${took} ms after the hung ones were submitted (timeout 2 s + drain 2 s)`);
      for (const j of hung) assert.equal((await lh.get(j.id))?.status, 'cancelled');

      const lines = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const warned = lines.filter((l) => l.msg === 'handler did not return after its job ended; abandoned it and freed its slot');
      assert.deepEqual(new Set(warned.map((l) => l.jobId)), new Set(hung.map((j) => j.id)));

      const health = await fetch(`${base}/healthz`);
      assert.equal(health.status, 503);
      assert.match(((await health.json()) as { detail: string }).detail, /2 abandoned handlers still pending \(more than 1\)/);
      assert.equal((await fetch(`${base}/readyz`)).status, 503);
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /^longhaul_abandoned_handlers_total\{task_type="stuck.hang"\} 2$/m);
      assert.match(metrics, /^longhaul_abandoned_handlers_pending 2$/m);
    } finally {
      if (process.env.DEBUG_STUCK) console.log(out, err);
      proc.kill("SIGKILL");
      await lh.close();
    }
  });
});
