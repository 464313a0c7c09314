/**
 * The status poll's fast path (store/sqlite/snapshot-json.ts): SQLite writes the snapshot as
 * JSON text itself. Over every state and shape of job, that text must parse to exactly what
 * `JSON.stringify(await lh.get(id))` gives, and the jobs it cannot write (result files, dates
 * outside 1970–9999) must take the general path and still agree.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { FatalError } from '../../src/core/errors.js';
import { defineTask, Longhaul, type WorkerHandle } from '../../src/index.js';
import { isoDateSql } from '../../src/store/sqlite/snapshot-json.js';
import { tempDir } from '../fixtures/process-harness.js';

const TRICKY = {
  // U+0000 and lone surrogates are refused at submission (core/storable.ts); their escapes as plain text are not.
  s: 'quote " backslash \\ newline \n tab \t control \u0001 \u001f line sep \u2028 é 🚀 escapes as text \\u0000 \\ud800',
  big: 1e21,
  small: 5e-324,
  neg: -0.5,
  int: 9007199254740991,
  nested: { a: [1, null, true, false, 'x', { b: [] }], '': 'empty key', 'k"ey': 1 },
};

let release: () => void = () => {};
const gate = new Promise<void>((resolve) => {
  release = resolve;
});

const tasks = [
  defineTask({ type: 'sj.echo', run: async (input) => input }),
  defineTask({ type: 'sj.nothing', run: async () => undefined }),
  defineTask({
    type: 'sj.partial',
    // Ends at 40 %: the succeeded snapshot still reads 100 % with no ETA.
    run: async (_input, ctx) => {
      ctx.progress({ itemsDone: 2, itemsTotal: 5, stage: 'halfway "there"', message: 'm\n' });
      return { ok: true };
    },
  }),
  defineTask({
    type: 'sj.full',
    run: async (_input, ctx) => {
      ctx.progress(100);
      return 'done';
    },
  }),
  defineTask({
    type: 'sj.fail',
    maxAttempts: 1,
    run: async () => {
      throw new FatalError('it broke: "quoted" \\ \n', { code: 'SJ_BROKE' });
    },
  }),
  defineTask({
    type: 'sj.hold',
    run: async (_input, ctx) => {
      ctx.progress({ percent: 42.5, stage: 'stage "one" ✓', itemsDone: 17, itemsTotal: 40, message: 'tab\there' });
      await gate;
      return null;
    },
  }),
  defineTask({
    type: 'sj.file',
    run: async (_input, ctx) => {
      await ctx.results.write('out.txt', 'hello\n');
      return { files: 1 };
    },
  }),
  defineTask({ type: 'sj.short-ttl', resultTtlMs: 1, run: async () => 'gone soon' }),
];

describe('snapshot JSON written by SQLite equals the JavaScript snapshot', () => {
  const tmp = tempDir('lh-snapjson-');
  let lh: Longhaul;
  let worker: WorkerHandle;
  const fastIds: string[] = [];
  const generalIds: string[] = [];

  before(async () => {
    lh = await Longhaul.open({
      database: join(tmp.dir, 'sj.db'),
      tasks,
      logger: pino({ level: 'silent' }),
      sweepIntervalMs: 50,
    });
  });
  after(async () => {
    release();
    await worker?.stop?.();
    await lh.close({ drainMs: 0 });
    tmp.remove();
  });

  async function until<T>(fn: () => Promise<T | undefined>, what: string): Promise<T> {
    const end = Date.now() + 10_000;
    for (;;) {
      const v = await fn();
      if (v !== undefined) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  const reaches = (id: string, status: string) => until(async () => ((await lh.get(id))?.status === status ? true : undefined), `${id} to be ${status}`);

  async function agrees(id: string, path: 'fast' | 'general'): Promise<void> {
    const raw = await lh.store.getSnapshotJson?.({ id });
    assert.ok(raw, `store finds ${id}`);
    assert.equal(raw.json === null ? 'general' : 'fast', path, `job ${id} takes the ${path} path`);
    const out = await lh.snapshotJson(id);
    const expected = await lh.get(id);
    assert.ok(out && expected);
    assert.deepEqual(JSON.parse(out.json), JSON.parse(JSON.stringify(expected)));
    assert.equal(out.state, expected.status);
    assert.equal(out.runAt, Date.parse(expected.runAt));
    assert.equal(out.expiresAt, expected.expiresAt === null ? null : Date.parse(expected.expiresAt));
  }

  it('queued, delayed, every priority, tricky input and metadata', async () => {
    for (const priority of ['critical', 'high', 'normal', 'low'] as const) {
      fastIds.push((await lh.submit('sj.echo', TRICKY, { priority, metadata: { who: 'ü "x"', n: [1, 2] } })).id);
    }
    fastIds.push((await lh.submit('sj.echo', null)).id);
    fastIds.push((await lh.submit('sj.echo', 'a string input')).id);
    fastIds.push((await lh.submit('sj.echo', [1, 'two', { three: 3 }], { delayMs: 3_600_000 })).id);
    fastIds.push((await lh.submit('sj.echo', 7, { runAt: new Date(Date.UTC(2099, 11, 31, 23, 59, 59, 999)) })).id);
    fastIds.push((await lh.submit('sj.echo', {}, { parentId: 'p "odd" \\ parent' })).id);
    fastIds.push((await lh.submit('sj.echo', {}, { parentId: '01a20a6c-4db0-71b4-b48a-55397f728a44' })).id);
    // Before 1970: strftime and toISOString part ways, so this one takes the general path.
    generalIds.push((await lh.submit('sj.echo', {}, { runAt: new Date('1969-07-20T20:17:40.123Z') })).id);
    const cancelled = await lh.submit('sj.echo', { c: 1 }, { delayMs: 3_600_000 });
    await lh.cancel(cancelled.id);
    fastIds.push(cancelled.id);
    for (const id of fastIds) await agrees(id, 'fast');
    for (const id of generalIds) await agrees(id, 'general');
  });

  it('running with progress, succeeded (100 % forced or reported), failed, expired; result files take the general path', async () => {
    worker = await lh.startWorker({ concurrency: 8, pollIntervalMs: 20, progressIntervalMs: 20 });
    const held = await lh.submit('sj.hold', { h: 1 });
    await until(async () => ((await lh.get(held.id))?.progress.percent === 42.5 ? true : undefined), 'progress');
    await agrees(held.id, 'fast');

    const ids: Record<string, string> = {};
    for (const type of ['sj.echo', 'sj.nothing', 'sj.partial', 'sj.full']) {
      ids[type] = (await lh.submit(type, TRICKY)).id;
      await reaches(ids[type] as string, 'succeeded');
      await agrees(ids[type] as string, 'fast');
    }
    const partial = JSON.parse((await lh.snapshotJson(ids['sj.partial'] as string))?.json ?? 'null');
    assert.equal(partial.progress.percent, 100);
    assert.equal(partial.progress.eta, 0);
    assert.equal(partial.progress.stage, 'halfway "there"');

    const failed = await lh.submit('sj.fail', {});
    await reaches(failed.id, 'failed');
    await agrees(failed.id, 'fast');
    assert.equal(JSON.parse((await lh.snapshotJson(failed.id))?.json ?? 'null').error.code, 'SJ_BROKE');

    const file = await lh.submit('sj.file', {});
    await reaches(file.id, 'succeeded');
    await agrees(file.id, 'general');
    assert.match(JSON.parse((await lh.snapshotJson(file.id))?.json ?? 'null').resultUrl, /^\/v1\/jobs\/.+\/results\/out\.txt\?/);

    const short = await lh.submit('sj.short-ttl', {});
    await reaches(short.id, 'expired');
    await agrees(short.id, 'fast');

    release();
    await reaches(held.id, 'succeeded');
    await agrees(held.id, 'fast');
  });

  it('a poll of an unchanged job re-sends the held snapshot; any change, even two progress reports in one millisecond, is seen', async () => {
    await worker.stop(); // this test claims the job itself
    const job = await lh.submit('sj.echo', { poll: 1 }, { tenant: 'poller' });
    const read = async () => JSON.parse((await lh.snapshotJson(job.id))?.json ?? 'null');
    assert.equal((await read()).status, 'queued');
    assert.deepEqual(await read(), JSON.parse(JSON.stringify(await lh.get(job.id))), 'the held copy equals a fresh one');
    const [claimed] = await lh.store.claimJobs({ workerId: 'poller-test', types: [{ type: 'sj.echo' }], limit: 1, now: Date.now() });
    assert.equal(claimed?.id, job.id, 'no other job is queued');
    const lease = claimed.lease;
    assert.equal((await read()).status, 'running');
    const at = Date.now();
    const progress = (percent: number) => ({ percent, stage: null, itemsDone: null, itemsTotal: null, message: `at ${percent}`, eta: null, updatedAt: new Date(at).toISOString() });
    assert.ok(await lh.store.saveProgress({ id: job.id, lease, progress: progress(10), now: at }));
    assert.equal((await read()).progress.percent, 10);
    assert.ok(await lh.store.saveProgress({ id: job.id, lease, progress: progress(20), now: at }));
    assert.equal((await read()).progress.percent, 20, 'a second report in the same millisecond is not hidden by the held copy');
    await lh.cancel(job.id);
    assert.equal((await read()).cancelRequested, true);
    assert.deepEqual(await read(), JSON.parse(JSON.stringify(await lh.get(job.id))));
  });

  it('a tenant scope hides another tenant’s job, and an unknown id is null', async () => {
    const job = await lh.submit('sj.echo', {}, { tenant: 'tenant-a' });
    assert.ok(await lh.snapshotJson(job.id, { tenant: 'tenant-a' }));
    assert.equal(await lh.snapshotJson(job.id, { tenant: 'tenant-b' }), null);
    assert.equal(await lh.snapshotJson('01a20a6c-0000-7000-8000-000000000000'), null);
  });
});

describe('dates written by strftime equal toISOString', () => {
  it('over 200,000 random instants from 1970 to 9999 and the edges', () => {
    const db = new DatabaseSync(':memory:');
    const max = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
    const values = [0, 1, 999, 1000, 59_999, 951_782_400_000, 951_868_799_999, 1_795_470_967_696, 4_102_444_800_000, max - 1, max];
    for (let i = 0; i < 200_000; i++) values.push(Math.floor(Math.random() * (max + 1)));
    const rows = (db.prepare(`SELECT ${isoDateSql('value')} AS d FROM json_each(?)`).all(JSON.stringify(values)) as { d: string }[]).map((r) => r.d);
    assert.equal(rows.length, values.length);
    for (let i = 0; i < values.length; i++) {
      const expected = JSON.stringify(new Date(values[i] as number).toISOString());
      if (rows[i] !== expected) assert.fail(`ms ${values[i]}: SQLite wrote ${rows[i]}, toISOString ${expected}`);
    }
    assert.equal((db.prepare(`SELECT ${isoDateSql('NULL')} AS d`).get() as { d: string }).d, 'null');
    db.close();
  });
});
