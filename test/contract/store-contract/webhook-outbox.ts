/**
 * The webhook outbox part of the storage contract (WebhookOutboxStore in src/store/store.ts), as
 * one suite parameterised only by a factory. Its jobs are set up and ended through the job queue
 * part, so the factory returns a whole store. Every store's test file runs it with the other
 * parts' suites:
 *
 *   runWebhookOutboxContract('sqlite', async () => { const s = new SqliteStore(...); await s.migrate(); return s; });
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 * All times are explicit (`now`, `at`), so nothing here sleeps.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { uuidv7 } from '../../../src/core/ids.js';
import type { Store } from '../../../src/store/store.js';
import { contractHelpers, T0 } from './fixtures.js';

export function runWebhookOutboxContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (webhook outbox): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, claimOne, running, apply } = contractHelpers(() => store);

    describe('webhooks', () => {
      it('keeps targets, reports each end of a job once, re-arms after a manual retry', async () => {
        const r = await running();
        await store.saveWebhook({ jobId: r.id, url: 'https://hooks.example.com/a', secret: `whsec_${'A'.repeat(32)}` });
        const quiet = await insert();
        await store.saveWebhook({ jobId: quiet.id, url: 'https://hooks.example.com/b', secret: null });
        // A target saved for a job that was never inserted is ignored.
        await store.saveWebhook({ jobId: uuidv7(), url: 'https://hooks.example.com/c', secret: null });
        assert.deepEqual(await store.getWebhook({ jobId: quiet.id }), { jobId: quiet.id, url: 'https://hooks.example.com/b', secret: null });
        assert.equal(await store.getWebhook({ jobId: uuidv7() }), null);
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), []);
        assert.ok(await apply({ id: r.id, from: 'running', to: 'failed', lease: r.lease, reason: 'fatal', at: T0 + 5, patch: { finishedAt: T0 + 5 } }));
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), [{ jobId: r.id, tenant: 'acme', state: 'failed', finishedAt: T0 + 5 }]);
        await store.markWebhookEvent({ jobId: r.id, finishedAt: T0 + 5 });
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), []);
        // Manual retry: re-armed, but the same end is not reported twice.
        await store.rearmWebhook({ jobId: r.id });
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), []);
        assert.ok(await apply({ id: r.id, from: 'failed', to: 'queued', reason: 'manual retry', at: T0 + 6, patch: { finishedAt: null, runAt: T0 + 6 } }));
        const again = await claimOne({ types: [{ type: r.type }], now: T0 + 7 });
        assert.ok(await apply({ id: r.id, from: 'running', to: 'succeeded', lease: again.lease, reason: 'done', at: T0 + 9, patch: { finishedAt: T0 + 9 } }));
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), [{ jobId: r.id, tenant: 'acme', state: 'succeeded', finishedAt: T0 + 9 }]);
        await store.deleteWebhook({ jobId: r.id });
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), []);
      });

      it('re-arms many jobs in one call (a bulk replay): each next end is reported, once', async () => {
        const ends: string[] = [];
        for (let i = 0; i < 3; i++) {
          const r = await running();
          await store.saveWebhook({ jobId: r.id, url: 'https://hooks.example.com/a', secret: null });
          assert.ok(await apply({ id: r.id, from: 'running', to: 'failed', lease: r.lease, reason: 'fatal', at: T0 + 1, patch: { finishedAt: T0 + 1 } }));
          await store.markWebhookEvent({ jobId: r.id, finishedAt: T0 + 1 });
          ends.push(r.id);
        }
        const plain = await running();
        await store.rearmWebhooks({ jobIds: [...ends, plain.id, 'not-a-uuid'] });
        await store.rearmWebhooks({ jobIds: [] });
        assert.deepEqual(await store.pendingWebhookEvents({ limit: 10 }), [], 'the same end is not reported twice');
        for (const id of ends.slice(0, 2)) {
          assert.ok(await apply({ id, from: 'failed', to: 'queued', reason: 'manual retry', at: T0 + 2, patch: { finishedAt: null, runAt: T0 + 2 } }));
          assert.ok(await apply({ id, from: 'queued', to: 'cancelled', reason: 'cancelled', at: T0 + 3, patch: { finishedAt: T0 + 3 } }));
        }
        assert.deepEqual(
          (await store.pendingWebhookEvents({ limit: 10 })).map((e) => e.jobId).sort(),
          ends.slice(0, 2).sort(),
        );
        assert.equal(await store.getWebhook({ jobId: plain.id }), null, 'no target was made for a job without one');
      });

      it('keeps the delivery log per job, oldest first', async () => {
        const j = await insert();
        const entry = (attempt: number, ok: boolean) => ({
          jobId: j.id,
          deliveryId: uuidv7(),
          eventType: 'job.succeeded',
          attempt,
          at: T0 + attempt,
          url: 'https://hooks.example.com/a',
          status: ok ? 200 : null,
          ok,
          error: ok ? null : 'timed out after 10000 ms',
          durationMs: 12,
          responseSnippet: ok ? 'thanks' : null,
        });
        const first = entry(1, false);
        const second = entry(2, true);
        await store.recordWebhookDelivery(first);
        await store.recordWebhookDelivery(second);
        await store.recordWebhookDelivery({ ...entry(1, true), jobId: uuidv7() });
        assert.deepEqual(await store.listWebhookDeliveries({ jobId: j.id, limit: 10 }), [first, second]);
        assert.deepEqual(await store.listWebhookDeliveries({ jobId: j.id, limit: 1 }), [first]);
        assert.deepEqual(await store.listWebhookDeliveries({ jobId: 'nope', limit: 10 }), []);
      });
    });
  });
}
