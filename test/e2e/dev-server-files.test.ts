/**
 * End to end with the built `longhaul dev` as a child process, killed with SIGKILL:
 * - csv.import of 1,000,000 rows uploaded over HTTP, killed mid-way, resumes from its
 *   checkpoint after a restart and writes files byte-identical to an uninterrupted run;
 * - a webhook delivery whose first attempt failed survives kill -9 (it is a durable job) and is
 *   delivered, verifiably signed, by the restarted process.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { type CsvImportCheckpoint, runCsvImport } from '../../src/example-tasks/csv-import.js';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import { makeRun, TempBlobs } from '../fixtures/csv-context.js';
import { generateCsv } from '../fixtures/csv-generate.js';
import { startDev } from '../support/dev-process.js';
import { scriptedReceiver } from '../support/webhook-receiver.js';

interface Snapshot {
  id: string;
  status: string;
  attempts: number;
  progress: { itemsDone: number | null };
  result: { rows: number; rejected: number; resumedAtRow: number } | null;
  results: { name: string; url: string; size: number }[];
  error: unknown;
}

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const getJob = async (base: string, id: string) => (await (await fetch(`${base}/v1/jobs/${id}`)).json()) as Snapshot;

async function killHard(child: ChildProcess): Promise<void> {
  child.kill('SIGKILL');
  if (child.exitCode === null && child.signalCode === null) await new Promise((r) => child.once('exit', r));
}

describe('longhaul dev end to end: files and webhooks across kill -9', () => {
  let dir: string;
  const children: ChildProcess[] = [];
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-e2e-files-'));
  });
  after(() => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  // The suite's longest test: 60 s on a 2-core machine under load, against the 120 s default of
  // `npm test` (its file may take 300 s: test/support/file-timeout.mjs).
  it('csv.import of 1,000,000 rows killed mid-way resumes from its checkpoint; output identical to an uninterrupted run', { timeout: 240_000 }, async () => {
    const csv = join(dir, 'million.csv');
    const counts = await generateCsv(csv, 1_000_000);
    const database = join(dir, 'csv.db');
    const first = await startDev(database);
    children.push(first.child);
    const upload = await new Promise<{ id: string; size: number }>((resolve, reject) => {
      const req = http.request(`${first.base}/v1/uploads`, { method: 'POST', headers: { 'content-type': 'text/csv' } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () => (res.statusCode === 201 ? resolve(JSON.parse(text)) : reject(new Error(`${res.statusCode} ${text}`))));
      });
      req.on('error', reject);
      createReadStream(csv).pipe(req);
    });
    assert.equal(upload.size, statSync(csv).size);
    const submitted = await fetch(`${first.base}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'csv.import', input: { uploadId: upload.id } }),
    });
    assert.equal(submitted.status, 202);
    const job = (await submitted.json()) as Snapshot;
    const midway = await until(
      async () => {
        const s = await getJob(first.base, job.id);
        return (s.progress.itemsDone ?? 0) >= 250_000 ? s : undefined;
      },
      90_000,
      'the import to pass 250,000 rows',
    );
    assert.equal(midway.status, 'running');
    await killHard(first.child);

    const second = await startDev(database);
    children.push(second.child);
    const done = await until(
      async () => {
        const s = await getJob(second.base, job.id);
        return ['succeeded', 'failed', 'cancelled'].includes(s.status) ? s : undefined;
      },
      120_000,
      'the import to finish after the restart',
    );
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    assert.equal(done.attempts, 2);
    assert.ok((done.result?.resumedAtRow ?? 0) >= 200_000, `resumed at row ${done.result?.resumedAtRow}, not from 0`);
    assert.equal(done.result?.rows, counts.rows);
    assert.equal(done.result?.rejected, counts.rejected);
    const files: Record<string, string> = {};
    for (const r of done.results) {
      const res = await fetch(new URL(r.url, second.base));
      assert.equal(res.status, 200);
      files[r.name] = createHash('sha256')
        .update(Buffer.from(await res.arrayBuffer()))
        .digest('hex');
    }
    assert.deepEqual(Object.keys(files), ['rejected.csv', 'summary.json']);
    await killHard(second.child);

    // The same import, uninterrupted, straight through the handler.
    const blobs = await TempBlobs.create();
    try {
      const info = await blobs.addUpload(createReadStream(csv));
      await runCsvImport({ uploadId: info.id }, makeRun<CsvImportCheckpoint>({ blobs }).ctx);
      const reference: Record<string, string> = {};
      for (const name of ['rejected.csv', 'summary.json']) reference[name] = createHash('sha256').update(await blobs.readResult(name)).digest('hex');
      assert.deepEqual(files, reference, 'byte-identical result files');
    } finally {
      await blobs.destroy();
    }
  });

  it('a webhook whose delivery is pending survives kill -9 and is delivered after the restart', async () => {
    const secret = generateWebhookSecret();
    const rx = await scriptedReceiver([503, 200]);
    const { received, url } = rx;
    const env = { LONGHAUL_WEBHOOK_SECRET: secret, LONGHAUL_WEBHOOK_ALLOWLIST: '127.0.0.1', LONGHAUL_WEBHOOK_RETRY_SCHEDULE: '3s' };
    const database = join(dir, 'hooks.db');
    try {
      const first = await startDev(database, env);
      children.push(first.child);
      const res = await fetch(`${first.base}/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'demo.sleep', input: { steps: 2, stepMs: 10 }, webhook: { url } }),
      });
      assert.equal(res.status, 202);
      const job = (await res.json()) as Snapshot;
      await until(async () => (received.length >= 1 ? true : undefined), 15_000, 'the first (failing) attempt');
      // The retry is 3 s away: kill the process that owns it.
      await killHard(first.child);
      assert.equal(received.length, 1);

      const second = await startDev(database, env);
      children.push(second.child);
      await until(async () => (received.length >= 2 ? true : undefined), 20_000, 'the retry after the restart');
      await sleep(500);
      assert.deepEqual(rx.answered, [503, 200]);
      const wh = new Webhook(secret);
      for (const r of received) {
        const event = wh.verify(r.body, r.headers as Record<string, string>) as { type: string; data: Snapshot };
        assert.equal(event.type, 'job.succeeded');
        assert.equal(event.data.id, job.id);
      }
      const log = (await (await fetch(`${second.base}/v1/jobs/${job.id}/webhooks`)).json()) as { items: { attempt: number; ok: boolean; status: number }[] };
      assert.deepEqual(
        log.items.map((i) => [i.attempt, i.status, i.ok]),
        [
          [1, 503, false],
          [2, 200, true],
        ],
      );
      const list = (await (await fetch(`${second.base}/v1/jobs`)).json()) as { items: Snapshot[] };
      assert.deepEqual(
        list.items.map((s) => s.id),
        [job.id],
        'the delivery job is internal: not in the list',
      );
      await killHard(second.child);
    } finally {
      await rx.close();
    }
  });
});
