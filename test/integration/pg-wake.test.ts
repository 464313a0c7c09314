/**
 * An idle worker on PostgreSQL claims when another process's submission reaches it (NOTIFY on
 * the wake-up channel), not at its next poll (issue 37). Two instances over one database, with
 * no event relay between them (channel: false), so only the store's NOTIFY can tell the worker;
 * its poll is set to 2 s, so a start within a fraction of that can only be the notification.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { defineTask, Longhaul } from '../../src/index.js';
import { createTestDatabase } from '../support/postgres.js';

const db = await createTestDatabase('lh_pgwake');
after(() => db.drop());

describe('PostgreSQL: an idle worker wakes on the notification', () => {
  it("starts another process's jobs within milliseconds, though it polls every 2 s", async (t) => {
    const started = new Map<string, number>();
    const task = defineTask({
      type: 'wake.noop',
      run: (_input: unknown, ctx) => {
        started.set(ctx.job.id, performance.now());
        return null;
      },
    });
    const quiet = pino({ level: 'silent' });
    const options = { database: db.url, tasks: [task], logger: quiet, channel: false as const, files: { urlSigningSecret: 'pg-wake-test-url-signing-secret-0123456789' } };
    const worker = await Longhaul.open(options);
    const producer = await Longhaul.open(options);
    try {
      await worker.startWorker({ concurrency: 4, pollIntervalMs: 2000 });
      // Let the worker's first claim pass and its listen connection start.
      await new Promise((r) => setTimeout(r, 500));
      const delays: number[] = [];
      for (let i = 0; i < 12; i++) {
        const at = performance.now();
        const { id } = await producer.submit('wake.noop', { i });
        while (!started.has(id)) {
          if (performance.now() - at > 5000) assert.fail(`job ${i} not started within 5 s`);
          await new Promise((r) => setTimeout(r, 2));
        }
        delays.push((started.get(id) as number) - at);
        await new Promise((r) => setTimeout(r, 60));
      }
      delays.sort((a, b) => a - b);
      const median = delays[Math.floor(delays.length / 2)] as number;
      t.diagnostic(`submit-to-start ms: ${delays.map((d) => d.toFixed(1)).join(', ')}`);
      // Polling every 2 s would give a median near 1 s; the notification, a few milliseconds.
      assert.ok(median < 200, `median submit-to-start ${median.toFixed(1)} ms (${delays.map((d) => d.toFixed(0)).join(', ')})`);
    } finally {
      await producer.close({ drainMs: 0 });
      await worker.close({ drainMs: 0 });
    }
  });
});
