/**
 * A saga whose journal cannot be written on its last attempt (the database out of reach past
 * the handler-side write's retries, half the heartbeat timeout) must still compensate the steps
 * the store knows completed: the failed attempt is followed by attempts beyond maxAttempts that
 * only compensate (worker/outcome.ts sagaOutcome), as when its worker dies. On SQLite and
 * PostgreSQL, each behind a wrapper whose `saveWorkflow` refuses with ECONNREFUSED for a while
 * from the second save on (the one after step s2).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { Longhaul } from '../../src/longhaul.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { defineTask } from '../../src/task-api/define.js';
import { logOf, settled } from '../support/jobs.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const OUTAGE_MS = 1500;

/** The store, with `saveWorkflow` out of reach for OUTAGE_MS from its second call on. */
function journalOutage(store: Store): Store {
  let saves = 0;
  let downSince: number | null = null;
  return new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== 'function') return value;
      if (prop !== 'saveWorkflow') return value.bind(target);
      return async (params: never) => {
        saves++;
        if (saves === 2) downSince = Date.now();
        if (downSince !== null && Date.now() - downSince < OUTAGE_MS) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
        return value.call(target, params);
      };
    },
  });
}

const did: string[] = [];
const saga = defineTask({
  type: 'outage.saga',
  maxAttempts: 1,
  heartbeatIntervalMs: 200,
  heartbeatTimeoutMs: 1000,
  steps: ['s1', 's2', 's3'].map((name) => ({
    name,
    run: () => {
      did.push(`run ${name}`);
      return { name };
    },
    compensate: () => {
      did.push(`compensate ${name}`);
    },
  })),
});

const dir = mkdtempSync(join(tmpdir(), 'longhaul-saga-outage-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; open(): Promise<Store> }> = [
  { name: 'SQLite', open: async () => new SqliteStore({ path: join(dir, 'saga.db') }) },
  {
    name: 'PostgreSQL',
    async open() {
      pgDb = await createTestDatabase('lh_saga_outage');
      return new PostgresStore({ connectionString: pgDb.url });
    },
  },
];

for (const target of TARGETS) {
  describe(`a saga whose journal write fails on its last attempt, on ${target.name}`, () => {
    it('is compensated for the steps the store knows completed, by attempts beyond maxAttempts that only compensate', async () => {
      did.length = 0;
      const real = await target.open();
      await real.migrate();
      const lh = await Longhaul.open({ store: journalOutage(real), tasks: [saga], channel: false, logger: pino({ level: 'silent' }), sweepIntervalMs: 100 });
      try {
        await lh.startWorker({ concurrency: 1 });
        const job = await lh.submit('outage.saga', {});
        const done = await settled(lh, job.id, 20_000);
        assert.equal(done.status, 'failed', JSON.stringify(done.error));
        assert.match(done.error?.message ?? '', /^step "s2" failed: connect ECONNREFUSED/);
        assert.equal(done.error?.compensated, true);
        // s2 ran, but its completion never reached the store: only s1 is known done, and undone.
        assert.deepEqual(did, ['run s1', 'run s2', 'compensate s1']);
        assert.ok(done.attempts > 1, `attempts ${done.attempts}`);
        const log = await logOf(lh, job.id);
        assert.ok(log.includes('running>retrying:retry scheduled: compensation owed'), log.join('\n'));
        assert.ok(log.includes('running>running:compensated s1'), log.join('\n'));
        assert.equal(log.at(-1), 'running>failed:fatal', log.join('\n'));
      } finally {
        await lh.close({ drainMs: 0 });
        await real.close();
      }
    });
  });
}
