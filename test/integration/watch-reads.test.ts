/**
 * What watching costs the store (issue 36): the periodic read behind a process's watches is one
 * read of every watched job (facade/watch-backstop.ts), so the reads per interval do not grow
 * with the number of jobs watched; and a change the events miss is still seen. On SQLite (no
 * channel: a read every 250 ms) and PostgreSQL (NOTIFY relay: a read every 2 s).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase } from '../support/postgres.js';

const idle = defineTask({ type: 'watch.idle', run: async () => null });

/** Counts the store's job reads (one job or many) from the moment it is made. */
function countReads(store: Store): { reads: () => number } {
  let n = 0;
  const getJob = store.getJob.bind(store);
  const getJobs = store.getJobs?.bind(store);
  store.getJob = (p) => {
    n++;
    return getJob(p);
  };
  store.getJobs = (p) => {
    n++;
    return getJobs(p);
  };
  return { reads: () => n };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Kind {
  name: string;
  open(): Promise<{ store: Store; close(): Promise<void> }>;
  /** The interval of the watches' periodic read on this store. */
  intervalMs: number;
}

const kinds: Kind[] = [
  {
    name: 'SQLite',
    intervalMs: 250,
    async open() {
      const dir = mkdtempSync(join(tmpdir(), 'lh-watch-reads-'));
      dirs.push(dir);
      const store = new SqliteStore({ path: join(dir, 'db.sqlite') });
      return { store, close: () => store.close() };
    },
  },
  {
    name: 'PostgreSQL',
    intervalMs: 2000,
    async open() {
      const db = await createTestDatabase();
      const store = new PostgresStore({ connectionString: db.url });
      return {
        store,
        close: async () => {
          await store.close();
          await db.drop();
        },
      };
    },
  },
];

for (const kind of kinds) {
  describe(`watching jobs costs one store read per interval, whatever their number (${kind.name})`, () => {
    it('reads per interval with 3 and with 60 watched jobs are the same, and a change without an event is seen', { timeout: 60_000 }, async () => {
      const { store, close } = await kind.open();
      const lh = await Longhaul.open({ store, tasks: [idle], logger: pino({ level: 'silent' }) });
      try {
        assert.equal(lh.channel !== null, kind.intervalMs === 2000, 'a channel relays changes on PostgreSQL only');
        const { reads } = countReads(store);
        /** Reads during `intervals` intervals, with `n` jobs watched (their first reads done). */
        const measure = async (n: number, intervals: number) => {
          const controller = new AbortController();
          const seen = new Map<string, JobSnapshot[]>();
          const ids: string[] = [];
          for (let i = 0; i < n; i++) ids.push((await lh.submit('watch.idle', {}, { runAt: new Date(Date.now() + 3_600_000), tenant: 't1' })).id);
          const loops = ids.map(async (id) => {
            const list: JobSnapshot[] = [];
            seen.set(id, list);
            try {
              for await (const s of lh.watch(id, { tenant: 't1', signal: controller.signal })) list.push(s);
            } catch (err) {
              if (!controller.signal.aborted) throw err;
            }
          });
          while ([...seen.values()].some((l) => l.length === 0)) await sleep(10);
          const before = reads();
          await sleep(kind.intervalMs * intervals + kind.intervalMs / 2);
          const during = reads() - before;
          const stop = async () => {
            controller.abort();
            await Promise.all(loops);
          };
          return { during, ids, seen, stop };
        };
        const small = await measure(3, 2);
        await small.stop();
        const large = await measure(60, 2);
        assert.ok(large.during <= small.during + 1, `60 watched jobs: ${large.during} reads in two intervals; 3 jobs: ${small.during}`);
        assert.ok(large.during <= 3, `one read per interval: ${large.during} in two intervals`);

        // A change no event announces (made behind the instance's back, as another process
        // whose event was lost would): the periodic read finds it.
        const target = large.ids[7] as string;
        if (store instanceof SqliteStore) {
          (store as unknown as { db: import('node:sqlite').DatabaseSync }).db.prepare(`UPDATE jobs SET updated_at = updated_at + 1, cancel_requested = 1 WHERE id = ?`).run(target);
        } else {
          const pg = store as unknown as { pool: import('pg').Pool; s: string };
          await pg.pool.query(`UPDATE ${pg.s}.jobs SET updated_at = updated_at + 1, cancel_requested = true WHERE id = $1`, [target]);
        }
        const deadline = Date.now() + kind.intervalMs * 3 + 1000;
        while (!(large.seen.get(target) ?? []).some((s) => s.cancelRequested) && Date.now() < deadline) await sleep(20);
        assert.ok((large.seen.get(target) ?? []).some((s) => s.cancelRequested), 'the change made without an event reached the watch');
        assert.ok(!(large.seen.get(large.ids[8] as string) ?? []).some((s) => s.cancelRequested), 'and only that job');
        await large.stop();

        // The read itself: the listed jobs that exist, whatever their tenant; unknown and malformed ids are left out.
        const other = (await lh.submit('watch.idle', {}, { runAt: new Date(Date.now() + 3_600_000), tenant: 't2' })).id;
        const read = await store.getJobs({ ids: [target, other, '00000000-0000-7000-8000-000000000000', 'not-a-job-id'] });
        assert.deepEqual(read.map((j) => j.id).sort(), [target, other].sort());
        assert.deepEqual(await store.getJobs({ ids: [] }), []);
      } finally {
        await lh.close();
        await close();
      }
    });
  });
}
