/**
 * End to end: the built `longhaul dev` as a child process. Submit over HTTP, kill -9 the
 * process mid-job, start it again on the same database, and see the job finish from its
 * checkpoint with nothing lost.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startDev } from '../support/dev-process.js';

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

interface Snapshot {
  id: string;
  status: string;
  attempts: number;
  progress: { itemsDone: number | null; percent: number | null };
  result: { steps: number; resumedFrom: number } | null;
}

describe('longhaul dev end to end', () => {
  let dir: string;
  const children: ChildProcess[] = [];
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-e2e-'));
  });
  after(() => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('survives kill -9 mid-job and finishes from the checkpoint', async () => {
    const database = join(dir, 'dev.db');
    const first = await startDev(database);
    children.push(first.child);
    const submitted = await fetch(`${first.base}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'demo.sleep', input: { steps: 30, stepMs: 100 } }),
    });
    assert.equal(submitted.status, 202);
    assert.match(submitted.headers.get('location') ?? '', /^\/v1\/jobs\/[0-9a-f-]{36}$/);
    const job = (await submitted.json()) as Snapshot;
    // Let it get part of the way, then kill the whole process without warning.
    const midway = await until(
      async () => {
        const s = (await (await fetch(`${first.base}/v1/jobs/${job.id}`)).json()) as Snapshot;
        return (s.progress.itemsDone ?? 0) >= 8 ? s : undefined;
      },
      15_000,
      'progress past step 8',
    );
    first.child.kill('SIGKILL');
    await new Promise((r) => first.child.once('exit', r));
    assert.equal(midway.status, 'running');

    const second = await startDev(database);
    children.push(second.child);
    const done = await until(
      async () => {
        const s = (await (await fetch(`${second.base}/v1/jobs/${job.id}`)).json()) as Snapshot;
        return ['succeeded', 'failed', 'cancelled'].includes(s.status) ? s : undefined;
      },
      30_000,
      'the job to finish after the restart',
    );
    assert.equal(done.status, 'succeeded');
    assert.equal(done.attempts, 2, 'the killed attempt counts, the second one finished');
    assert.ok(done.result && done.result.resumedFrom >= 8, `resumed from checkpoint step ${done.result?.resumedFrom}, not from 0`);
    assert.equal(done.result?.steps, 30);
    const log = (await (await fetch(`${second.base}/v1/jobs/${job.id}/transitions`)).json()) as { items: { from: string; to: string; reason: string }[] };
    assert.ok(
      log.items.some((e) => e.from === 'running' && e.to === 'retrying' && /heartbeat/.test(e.reason)),
      'the log shows the reaping',
    );
    // Nothing lost: the job list still has exactly this one job.
    const list = (await (await fetch(`${second.base}/v1/jobs`)).json()) as { items: Snapshot[] };
    assert.deepEqual(
      list.items.map((s) => s.id),
      [job.id],
    );
    second.child.kill('SIGTERM');
    const code = await new Promise((r) => second.child.once('exit', r));
    assert.equal(code, 0, 'a SIGTERM shutdown exits 0');
  });
});
