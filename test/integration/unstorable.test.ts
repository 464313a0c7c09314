/**
 * U+0000 and lone surrogates in every field, end to end, on SQLite and on PostgreSQL (whose
 * `text` and JSON processing refuse them): the rule of docs/api.md ("Strings Longhaul stores")
 * gives the same outcome on both stores, never a `500`, never a stuck worker. Submitted data
 * (input, metadata value and key, idempotency key, webhook URL) is refused with `422
 * UNSTORABLE_STRING` and its path; a handler's result fails the attempt (`UNSTORABLE_RESULT`),
 * a checkpoint save throws to the handler (`UNSTORABLE_CHECKPOINT`); diagnostic text (a thrown
 * error's message, a progress message and stage, a webhook receiver's answer) is escaped. The
 * worker then runs the next job, and shutdown completes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { UnstorableValueError } from '../../src/core/errors.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { defineTask } from '../../src/task-api/define.js';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { receiver } from '../support/webhook-receiver.js';
import { pollUntil as until } from '../support/poll.js';

/** What the handlers produce, by key (the test and the worker share this process). */
const VALUES = new Map<string, unknown>();

const tasks = [
  defineTask({ type: 'u.echo', maxAttempts: 1, run: async (input) => input }),
  defineTask({ type: 'u.result', maxAttempts: 1, run: async (input) => VALUES.get((input as { key: string }).key) }),
  defineTask({
    type: 'u.throw',
    maxAttempts: 1,
    run: async (input) => {
      throw new Error(VALUES.get((input as { key: string }).key) as string);
    },
  }),
  defineTask({
    type: 'u.progress',
    maxAttempts: 1,
    run: async (input, ctx) => {
      const { stage, message } = VALUES.get((input as { key: string }).key) as { stage: string; message: string };
      ctx.progress({ percent: 50, stage, message });
      return 'done';
    },
  }),
  defineTask({
    type: 'u.checkpoint',
    maxAttempts: 1,
    run: async (input, ctx) => {
      const { key, caught } = input as { key: string; caught: boolean };
      if (!caught) {
        await ctx.checkpoint.save(VALUES.get(key));
        return 'saved';
      }
      try {
        await ctx.checkpoint.save(VALUES.get(key));
        return { saved: true };
      } catch (err) {
        // The handler goes on: a checkpoint it cannot save is its decision to make.
        await ctx.checkpoint.save({ fallback: 'storable' });
        return { saved: false, code: (err as { code?: string }).code, message: (err as Error).message, after: ctx.checkpoint.value };
      }
    },
  }),
];

interface Target {
  name: string;
  database(): Promise<string>;
  cleanup(): Promise<void>;
}

let pgDb: TestDatabase | null = null;
// The SQLite file and both stores' blob directories.
const sqliteDir = mkdtempSync(join(tmpdir(), 'longhaul-unstorable-'));
const TARGETS: Target[] = [
  { name: 'SQLite', database: async () => join(sqliteDir, 'test.db'), cleanup: async () => rmSync(sqliteDir, { recursive: true, force: true }) },
  {
    name: 'PostgreSQL',
    database: async () => {
      pgDb = await createTestDatabase('lh_unstorable');
      return pgDb.url;
    },
    cleanup: async () => {
      await pgDb?.drop();
    },
  },
];

/** The outcome of every case, per store: the stores must agree. */
const outcomes = new Map<string, Record<string, unknown>>();

after(async () => {
  for (const t of TARGETS) await t.cleanup();
});

for (const target of TARGETS) {
  describe(`strings no store can hold, on ${target.name}`, () => {
    let lh: Longhaul;
    let app: FastifyInstance;
    let base: string;
    const seen: Record<string, unknown> = {};
    outcomes.set(target.name, seen);

    before(async () => {
      lh = await Longhaul.open({
        database: await target.database(),
        tasks,
        logger: pino({ level: 'silent' }),
        sweepIntervalMs: 100,
        webhooks: { secret: generateWebhookSecret(), allowlist: '127.0.0.1', retrySchedule: [50] },
        files: { urlSigningSecret: 'unstorable-test-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(sqliteDir, `blobs-${target.name}`)) },
      });
      await lh.startWorker({ concurrency: 4, pollIntervalMs: 20 });
      app = await buildServer({ lh, logger: false });
      base = await app.listen({ port: 0, host: '127.0.0.1' });
    });
    after(async () => {
      await app?.close();
      // Shutdown completes (it used to fail on PostgreSQL with the stuck outcome's error).
      const closed = await Promise.race([lh?.close({ drainMs: 1_000 }).then(() => true), new Promise((r) => setTimeout(() => r(false), 15_000).unref())]);
      assert.equal(closed, true, 'close() finished');
    });

    /** POST /v1/jobs with a raw JSON text (so that escapes like \ud800 go over the wire as they are). */
    async function post(raw: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Record<string, unknown> }> {
      const res = await fetch(`${base}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: raw });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    }

    const finished = (id: string) =>
      until(async () => {
        const s = await lh.get(id);
        return s && ['succeeded', 'failed', 'cancelled'].includes(s.status) ? s : undefined;
      }, `job ${id} to finish`);

    it('refuses submitted data holding one with 422 UNSTORABLE_STRING naming the path (input, metadata value and key, a lone surrogate)', async () => {
      const cases: Array<[string, string]> = [
        ['{"type":"u.echo","input":{"s":"nul\\u0000byte"}}', 'input.s'],
        ['{"type":"u.echo","input":{"k\\u0000":1}}', 'input["k\\u0000"]'],
        ['{"type":"u.echo","input":["ok","\\ud800"]}', 'input[1]'],
        ['{"type":"u.echo","input":"\\udc00 alone"}', 'input'],
        ['{"type":"u.echo","input":{"a":{"deep":[{"x":"\\u0000"}]}}}', 'input.a.deep[0].x'],
        ['{"type":"u.echo","input":{},"metadata":{"k":"v\\u0000"}}', 'metadata.k'],
        ['{"type":"u.echo","input":{},"metadata":{"k\\u0000":"v"}}', 'metadata["k\\u0000"]'],
        ['{"type":"u.echo","input":{},"metadata":{"who":"\\ud800"}}', 'metadata.who'],
        ['{"type":"u.echo","webhook":{"url":"https://example.com/hook\\u0000"}}', 'webhook.url'],
      ];
      const got: string[] = [];
      for (const [raw, path] of cases) {
        const res = await post(raw);
        assert.equal(res.status, 422, `${raw} → ${res.status} ${JSON.stringify(res.body)}`);
        assert.equal(res.body.code, 'UNSTORABLE_STRING');
        assert.deepEqual(
          (res.body.errors as { path: string }[]).map((e) => e.path),
          [path],
        );
        assert.match(String(res.body.detail), new RegExp(`^${path.replace(/[[\]\\.]/g, '\\$&')}: (holds|has a key holding) (U\\+0000|a lone surrogate U\\+D[8-F]00),`));
        assert.match((res.body.errors as { message: string }[])[0]?.message ?? '', /^(holds|has a key holding) /, 'the field error does not repeat its path');
        got.push(`${res.status} ${path}`);
      }
      // Their escapes as plain text, a surrogate pair and other control characters are data like any other.
      const fine = await post('{"type":"u.echo","input":{"s":"\\\\u0000 \\\\ud800 \\ud83d\\ude80 \\u0001 \\uffff"},"metadata":{"k":"\\\\u0000"}}');
      assert.equal(fine.status, 202, JSON.stringify(fine.body));
      const done = await finished(String(fine.body.id));
      assert.equal(done.status, 'succeeded');
      assert.deepEqual(done.result, { s: '\\u0000 \\ud800 🚀 \u0001 \uffff' });
      assert.deepEqual(done.metadata, { k: '\\u0000' });
      seen.submitted = got;
    });

    it('refuses an idempotency key, a tenant or a parent id holding one (library API; HTTP headers cannot carry them)', async () => {
      const refused: string[] = [];
      for (const [options, path] of [
        [{ idempotencyKey: 'key\u0000' }, 'idempotencyKey'],
        [{ idempotencyKey: '\ud800' }, 'idempotencyKey'],
        [{ tenant: 'ten\u0000ant' }, 'tenant'],
        [{ parentId: 'p\udfff' }, 'parentId'],
      ] as const) {
        await assert.rejects(lh.submit('u.echo', { ok: 1 }, options), (err: unknown) => {
          assert.ok(err instanceof UnstorableValueError, String(err));
          assert.equal(err.status, 422);
          assert.equal(err.path, path);
          return true;
        });
        refused.push(path);
      }
      // A filter no job can match is an empty page in the library, not a database error; over
      // HTTP the route's schema refuses it first (400 naming the parameter, docs/api.md#parameters).
      assert.deepEqual((await lh.list({ type: 'u.echo\u0000' })).items, []);
      const res = await fetch(`${base}/v1/jobs?type=%00`);
      assert.equal(res.status, 400);
      assert.deepEqual(((await res.json()) as { errors: Array<{ path: string }> }).errors.map((e) => e.path), ['type']);
      seen.options = refused;
    });

    it("fails an attempt whose result holds one (UNSTORABLE_RESULT, with the path); the error doesn't retry", async () => {
      const got: Record<string, unknown> = {};
      for (const [key, value] of [
        ['r-nul', { s: 'a\u0000b' }],
        ['r-key', { rows: [{ 'k\u0000': 1 }] }],
        ['r-lone', ['\ud800']],
        ['r-top', 'text \udc00'],
      ] as const) {
        VALUES.set(`${target.name}:${key}`, value);
        const job = await lh.submit('u.result', { key: `${target.name}:${key}` });
        const end = await finished(job.id);
        assert.equal(end.status, 'failed');
        assert.equal(end.error?.code, 'UNSTORABLE_RESULT');
        assert.equal(end.error?.retryable, false);
        assert.equal(end.result, null);
        got[key] = end.error?.message;
      }
      assert.match(String(got['r-nul']), /^result\.s holds U\+0000/);
      assert.match(String(got['r-key']), /^result\.rows\[0\]\["k\\u0000"\] has a key holding U\+0000/);
      assert.match(String(got['r-lone']), /^result\[0\] holds a lone surrogate U\+D800/);
      assert.match(String(got['r-top']), /^result holds a lone surrogate U\+DC00/);
      seen.results = got;
    });

    it("escapes a thrown error's message and a progress message and stage", async () => {
      VALUES.set(`${target.name}:throw`, 'bad\u0000thing \ud800');
      const thrown = await finished((await lh.submit('u.throw', { key: `${target.name}:throw` })).id);
      assert.equal(thrown.status, 'failed');
      assert.equal(thrown.error?.message, 'bad\\u0000thing \\ud800 (attempts exhausted: 1/1)');

      VALUES.set(`${target.name}:progress`, { stage: 'stage\u0000one', message: 'msg \udc00' });
      const progressed = await finished((await lh.submit('u.progress', { key: `${target.name}:progress` })).id);
      assert.equal(progressed.status, 'succeeded');
      assert.equal(progressed.progress.stage, 'stage\\u0000one');
      assert.equal(progressed.progress.message, 'msg \\udc00');
      seen.diagnostics = { error: thrown.error, stage: progressed.progress.stage, message: progressed.progress.message };
    });

    it('throws UNSTORABLE_CHECKPOINT to a handler saving a checkpoint that holds one: caught, the job goes on; uncaught, it fails', async () => {
      VALUES.set(`${target.name}:ckpt`, { page: 3, cursor: 'c\u0000' });
      const caught = await finished((await lh.submit('u.checkpoint', { key: `${target.name}:ckpt`, caught: true })).id);
      assert.equal(caught.status, 'succeeded');
      const r = caught.result as { saved: boolean; code: string; message: string; after: unknown };
      assert.equal(r.saved, false);
      assert.equal(r.code, 'UNSTORABLE_CHECKPOINT');
      assert.match(r.message, /^checkpoint\.cursor holds U\+0000/);
      assert.deepEqual(r.after, { fallback: 'storable' });

      VALUES.set(`${target.name}:ckpt2`, ['\ud800']);
      const uncaught = await finished((await lh.submit('u.checkpoint', { key: `${target.name}:ckpt2`, caught: false })).id);
      assert.equal(uncaught.status, 'failed');
      assert.equal(uncaught.error?.code, 'UNSTORABLE_CHECKPOINT');
      assert.equal(uncaught.error?.retryable, false);
      assert.match(uncaught.error?.message ?? '', /^checkpoint\[0\] holds a lone surrogate U\+D800/);
      seen.checkpoints = { caught: r, uncaught: uncaught.error };
    });

    it("escapes a webhook receiver's answer in the delivery log", async () => {
      let calls = 0;
      const rx = receiver((_req, res) => {
        calls++;
        if (calls === 1) res.writeHead(500, { 'content-type': 'text/plain' }).end('broken \u0000 body');
        else res.writeHead(200).end('ok');
      });
      const url = `${await rx.start()}/hook`;
      try {
        const job = await lh.submit('u.echo', { w: 1 }, { webhook: { url } });
        const log = await until(async () => {
          const l = await lh.webhookDeliveries(job.id);
          return l.some((e) => e.ok) ? l : undefined;
        }, 'the webhook to be delivered');
        assert.deepEqual(
          log.map((e) => [e.attempt, e.status, e.response]),
          [
            [1, 500, 'broken \\u0000 body'],
            [2, 200, 'ok'],
          ],
        );
        seen.webhook = log.map((e) => e.response);
      } finally {
        await rx.close();
      }
    });

    it('then runs the next jobs, and answers /readyz 200', async () => {
      const jobs: JobSnapshot[] = [];
      for (let i = 0; i < 5; i++) jobs.push(await lh.submit('u.echo', { i }));
      for (const j of jobs) assert.equal((await finished(j.id)).status, 'succeeded');
      const ready = await fetch(`${base}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(await ready.json(), { status: 'ready' });
    });
  });
}

describe('both stores', () => {
  it('give the same outcome in every case', () => {
    const [a, b] = [outcomes.get('SQLite'), outcomes.get('PostgreSQL')];
    assert.ok(a && b && Object.keys(a).length === 6, `every case ran on both: ${JSON.stringify(Object.keys(a ?? {}))}`);
    assert.deepEqual(b, a);
  });
});
