/**
 * Memory that must stay bounded under steady load (the soak, bench/soak.ts): the SQLite file is
 * never mapped into the process (its mapped pages counted in RSS, which then grew with the
 * file), a per-job stream whose client left while the route was still looking the job up
 * leaves no subscription behind, and what a `/v1/events` connection remembers per job is bounded.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { JobSnapshot } from '../../src/core/job.js';
import type { JobState } from '../../src/core/states.js';
import { FEED_JOBS_REMEMBERED, FeedEventNames } from '../../src/server/feed-events.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { KEY_A, startHarness, submit, type Harness } from '../support/http-harness.js';
import { newJob } from '../contract/store-contract/fixtures.js';

/** Resident KiB of this process's mappings of `file` (Linux: /proc/self/smaps). */
function residentMappedKib(file: string): number {
  let kib = 0;
  let inFile = false;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inFile = line.endsWith(file);
    else if (inFile && line.startsWith('Rss:')) kib += Number(line.slice(4).trim().split(' ')[0]);
  }
  return kib;
}

describe('memory', () => {
  it('the SQLite store reads its database file without mapping it into the process', {
    skip: !existsSync('/proc/self/smaps') && 'needs /proc/self/smaps',
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'longhaul-memory-'));
    const path = join(dir, 'jobs.db');
    const store = new SqliteStore({ path });
    try {
      await store.migrate();
      const jobs = Array.from({ length: 2000 }, (_, i) => newJob({ input: { i, pad: 'x'.repeat(500) } }));
      for (let i = 0; i < jobs.length; i += 500) await store.insertJobs({ jobs: jobs.slice(i, i + 500) });
      // Move the rows from the WAL into the database file, then read every one of them from there.
      store.db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      for (const job of jobs) {
        assert.ok(await store.getJob({ id: job.id }));
        assert.ok(await store.getSnapshotJson?.({ id: job.id }));
      }
      assert.equal(residentMappedKib(path), 0);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('per-job SSE', () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ worker: false });
    });
    after(async () => {
      await h?.close();
    });

    it('a client that leaves while the route looks the job up leaves no subscription behind', async () => {
      // A job that will not end by itself (due in an hour): a subscription to it would stay.
      const job = await submit(h.base, 't.quick', undefined, { delayMs: 3_600_000 });
      assert.equal(h.app.jobHub.watchedJobs, 0);
      // Hold the route's lookup of this job until the client is gone.
      const get = h.lh.get.bind(h.lh);
      let entered!: () => void;
      const lookupStarted = new Promise<void>((r) => {
        entered = r;
      });
      let releaseLookup!: () => void;
      const held = new Promise<void>((r) => {
        releaseLookup = r;
      });
      let lookedUp!: () => void;
      const lookupDone = new Promise<void>((r) => {
        lookedUp = r;
      });
      h.lh.get = async (id, scope) => {
        if (id !== job.id) return get(id, scope);
        entered();
        await held;
        const snap = await get(id, scope);
        lookedUp();
        return snap;
      };
      try {
        const serverSocketClosed = new Promise<void>((r) => h.app.server.once('connection', (s: Socket) => s.once('close', () => r())));
        const url = new URL(`/v1/jobs/${job.id}/events`, h.base);
        const req = http.get({ host: url.hostname, port: url.port, path: url.pathname, agent: false, headers: { authorization: `Bearer ${KEY_A}` } });
        req.on('error', () => undefined);
        await lookupStarted;
        req.destroy();
        await serverSocketClosed;
        releaseLookup();
        await lookupDone;
        // The rest of the route runs in the microtasks after the lookup resolves.
        await new Promise((r) => setImmediate(r));
        assert.equal(h.app.jobHub.watchedJobs, 0);
      } finally {
        h.lh.get = get;
      }
    });
  });

  describe('FeedEventNames (/v1/events frame names)', () => {
    const snap = (id: string, status: JobState, extra: Partial<JobSnapshot> = {}) =>
      ({ id, status, cancelRequested: false, stalled: false, attempts: 1, ...extra }) as JobSnapshot;

    it('status when the status or a flag changed since the last frame of the job, progress otherwise; forgets a job at its end', () => {
      const names = new FeedEventNames();
      assert.equal(names.next(snap('a', 'queued', { attempts: 0 })), 'status');
      assert.equal(names.next(snap('a', 'running')), 'status');
      assert.equal(names.next(snap('a', 'running')), 'progress');
      assert.equal(names.next(snap('b', 'running')), 'status');
      assert.equal(names.next(snap('a', 'running', { cancelRequested: true })), 'status');
      assert.equal(names.next(snap('a', 'running', { cancelRequested: true })), 'progress');
      assert.equal(names.size, 2);
      assert.equal(names.next(snap('a', 'cancelled', { cancelRequested: true })), 'status');
      assert.equal(names.next(snap('b', 'succeeded')), 'status');
      assert.equal(names.size, 0);
    });

    it('remembers a bounded number of jobs whose end it never sees; the ones whose status changed longest ago go first', () => {
      const names = new FeedEventNames(100);
      names.next(snap('old', 'running'));
      names.next(snap('kept', 'queued'));
      for (let i = 0; i < 98; i++) names.next(snap(`j${i}`, 'queued'));
      // A status change makes a job the newest; progress alone does not.
      assert.equal(names.next(snap('kept', 'running')), 'status');
      assert.equal(names.next(snap('old', 'running')), 'progress');
      for (let i = 0; i < 1_000; i++) names.next(snap(`more${i}`, 'queued'));
      assert.equal(names.size, 100);
      assert.equal(names.next(snap('old', 'running')), 'status', 'forgotten: its next frame is a status frame');
      const fresh = new FeedEventNames();
      for (let i = 0; i < FEED_JOBS_REMEMBERED + 5_000; i++) fresh.next(snap(`k${i}`, 'queued'));
      assert.equal(fresh.size, FEED_JOBS_REMEMBERED);
    });
  });
});
