/**
 * Fail-fast through the library, on SQLite and PostgreSQL, with one worker slot: the first
 * child's failure cancels its queued siblings in the transaction that wakes the parent, so none
 * of them ever runs (before, the parent was queued behind them and every sibling ran to its end
 * before the parent could cancel anything). A running sibling gets a cancel request (its
 * ctx.signal fires). A waiting sibling's own children are cancelled in turn. Every cancel is
 * announced on the bus like any other transition, and the parent fails with the right counts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { FatalError } from '../../src/core/errors.js';
import { Longhaul } from '../../src/longhaul.js';
import { defineTask } from '../../src/task-api/define.js';
import { logOf, settled } from '../support/jobs.js';
import { pollUntil as until } from '../support/poll.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/** Handler starts, by `${tag}:${n}`. */
const started = new Map<string, number>();
const start = (key: string) => started.set(key, (started.get(key) ?? 0) + 1);
const startsOf = (tag: string) => [...started].filter(([k]) => k.startsWith(`${tag}:`)).reduce((a, [, n]) => a + n, 0);

/** Holds for `ms` unless the job's signal fires first (then ends the attempt with the signal's reason). */
function hold(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      reject(signal.reason);
    });
  });
}

const tasks = [
  defineTask({
    type: 'ff.child',
    maxAttempts: 1,
    async run(input: unknown, ctx) {
      const { tag, n, fail } = input as { tag: string; n: number; fail?: boolean };
      start(`${tag}:${n}`);
      if (fail) throw new FatalError(`child ${n} failed`, { code: 'CHILD_BROKE' });
      // Long enough that a sibling claimed with the failure cannot end before its cancel request reaches it.
      await hold(1_000, ctx.signal);
      return n;
    },
  }),
  defineTask({
    type: 'ff.mid',
    maxAttempts: 1,
    async run(input: unknown, ctx) {
      const { tag } = input as { tag: string };
      start(`${tag}:mid`);
      return ctx.spawn(
        [0, 1, 2].map((n) => ({ type: 'ff.child', input: { tag: `${tag}-grand`, n } })),
        { failurePolicy: 'collect' },
      );
    },
  }),
  defineTask({
    type: 'ff.parent',
    maxAttempts: 1,
    async run(input: unknown, ctx) {
      const { children } = input as { children: Array<{ type: string; input: unknown }> };
      return ctx.spawn(children, { failurePolicy: 'fail-fast' });
    },
  }),
];

const dir = mkdtempSync(join(tmpdir(), 'longhaul-fail-fast-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, 'fail-fast.db') },
  {
    name: 'PostgreSQL',
    database: async () => {
      pgDb = await createTestDatabase('lh_fail_fast');
      return pgDb.url;
    },
  },
];

for (const target of TARGETS) {
  describe(`fail-fast on ${target.name}, one worker slot`, () => {
    let lh: Longhaul;
    const T = target.name;

    it('opens', async () => {
      lh = await Longhaul.open({ database: await target.database(), tasks, logger: pino({ level: 'silent' }), sweepIntervalMs: 50 });
      // No claiming ahead: one job at a time, so any sibling that runs is one the failure did not stop.
      await lh.startWorker({ concurrency: 1, claimAhead: 0, pollIntervalMs: 10 });
    });

    it('the first child fails: no queued sibling ever runs, all end cancelled, announced, and the parent fails with the counts', async () => {
      const tag = `${T}-many`;
      const n = 60;
      const cancels: Array<{ id: string; reason: string }> = [];
      const off = lh.bus.on('job:changed', (e) => {
        if (e.to === 'cancelled' && e.reason.startsWith('sibling failed')) cancels.push({ id: e.id, reason: e.reason });
      });
      const children = Array.from({ length: n }, (_, i) => ({ type: 'ff.child', input: { tag, n: i, fail: i === 0 } }));
      const parent = await lh.submit('ff.parent', { children });
      const done = await settled(lh, parent.id, 30_000);
      off();

      assert.equal(done.status, 'failed');
      assert.equal(done.error?.code, 'CHILD_FAILED');
      assert.equal(done.error?.message, `${n} child job(s) did not succeed (1 failed, ${n - 1} cancelled)`);
      assert.deepEqual(
        { failed: done.children?.byState.failed, cancelled: done.children?.byState.cancelled, succeeded: done.children?.byState.succeeded },
        { failed: 1, cancelled: n - 1, succeeded: 0 },
      );
      // Child 0 ran; of its siblings, at most the one claimed in the very write that ended child 0
      // started, and its cancel request stopped it (it ended cancelled, not succeeded).
      assert.equal(started.get(`${tag}:0`), 1);
      assert.ok(startsOf(tag) - 1 <= 1, `${startsOf(tag) - 1} siblings ran`);

      const listed = (await lh.list({ parentId: parent.id, limit: 100 })).items;
      const failed = listed.find((c) => c.status === 'failed');
      assert.ok(failed);
      const why = `sibling failed (child ${failed.id} failed)`;
      for (const c of listed.filter((x) => x.id !== failed.id)) {
        const log = await logOf(lh, c.id);
        assert.ok(
          log.includes(`queued>cancelled:${why}`) || log.includes(`running>running:cancel requested: ${why}`),
          `${c.id}: ${log.join(' | ')}`,
        );
      }
      // Announced on the bus (streams, webhooks, metrics), each once.
      assert.ok(cancels.length >= n - 2, `${cancels.length} cancels announced`);
      assert.equal(new Set(cancels.map((c) => c.id)).size, cancels.length);
      assert.ok(cancels.every((c) => c.reason === why));
      assert.ok((await logOf(lh, parent.id)).includes('waiting>queued:child failed'));
    });

    it('a waiting sibling is cancelled, and its own children with it, before they run', async () => {
      const tag = `${T}-nested`;
      // The mid child runs first (one slot, id order), spawns its three children and waits; the
      // second child fails next, ahead of them in the queue.
      const parent = await lh.submit('ff.parent', {
        children: [
          { type: 'ff.mid', input: { tag } },
          { type: 'ff.child', input: { tag, n: 1, fail: true } },
        ],
      });
      const done = await settled(lh, parent.id, 30_000);
      assert.equal(done.status, 'failed');
      assert.equal(done.error?.message, '2 child job(s) did not succeed (1 failed, 1 cancelled)');
      const mid = (await lh.list({ parentId: parent.id, limit: 10 })).items.find((c) => c.type === 'ff.mid');
      assert.ok(mid);
      assert.equal(mid.status, 'cancelled');
      assert.ok((await logOf(lh, mid.id)).some((l) => l.startsWith('waiting>cancelled:sibling failed (child ')));
      const grand = await until(async () => {
        const items = (await lh.list({ parentId: mid.id, limit: 10 })).items;
        return items.length === 3 && items.every((g) => g.status === 'cancelled') ? items : undefined;
      }, "the mid child's children to be cancelled");
      // As for siblings: at most the one claimed in the write that ended the failed child started,
      // and its cancel request stopped it.
      for (const g of grand) {
        const log = await logOf(lh, g.id);
        assert.ok(log.includes('queued>cancelled:parent cancelled') || log.includes('running>running:cancel requested: parent cancelled'), log.join(' | '));
      }
      assert.ok(startsOf(`${tag}-grand`) <= 1, `${startsOf(`${tag}-grand`)} grandchildren ran`);
    });

    it('closes', async () => {
      await lh.close();
    });
  });
}
