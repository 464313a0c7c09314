/**
 * The result file part of the storage contract (ResultFileStore in src/store/store.ts), as one
 * suite parameterised only by a factory. Its jobs are set up through the job queue part, so the
 * factory returns a whole store. Every store's test file runs it with the other parts' suites:
 *
 *   runResultFileContract('sqlite', async () => { const s = new SqliteStore(...); await s.migrate(); return s; });
 *
 * The factory must return a fresh, migrated, empty store; the suite closes it after each test.
 * All times are explicit (`now`, `at`), so nothing here sleeps.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { uuidv7 } from '../../../src/core/ids.js';
import type { Store } from '../../../src/store/store.js';
import { contractHelpers, T0 } from './fixtures.js';

export function runResultFileContract(name: string, makeStore: () => Promise<Store>): void {
  describe(`store contract (result files): ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    const { insert, running, apply } = contractHelpers(() => store);

    describe('result files', () => {
      const file = (name: string, key = `results/x/${uuidv7()}/${name}`) => ({ name, size: 10, contentType: 'text/csv', sha256: 'ab'.repeat(32), key });

      it('records files under the lease, in recording order, replacing by name, and counts downloads', async () => {
        const r = await running();
        assert.equal(await store.recordResult({ id: r.id, lease: r.lease, file: file('a.csv'), now: T0 }), true);
        assert.equal(await store.recordResult({ id: r.id, lease: r.lease, file: file('b.json'), now: T0 }), true);
        const replaced = { ...file('a.csv', 'results/x/new/a.csv'), size: 99 };
        assert.equal(await store.recordResult({ id: r.id, lease: r.lease, file: replaced, now: T0 + 1 }), true);
        await store.countDownload({ id: r.id, name: 'a.csv' });
        await store.countDownload({ id: r.id, name: 'a.csv' });
        await store.countDownload({ id: r.id, name: 'missing.csv' });
        const other = await insert();
        const map = await store.listResults({ ids: [r.id, other.id, 'not-a-uuid'] });
        assert.deepEqual([...map.keys()], [r.id]);
        const files = map.get(r.id) ?? [];
        assert.deepEqual(
          files.map((f) => [f.name, f.size, f.key, f.downloads]),
          [
            ['a.csv', 99, 'results/x/new/a.csv', 2],
            ['b.json', 10, files[1]?.key, 0],
          ],
        );
        assert.equal(await store.unrecordResult({ id: r.id, lease: r.lease, name: 'b.json' }), true);
        assert.equal(await store.unrecordResult({ id: r.id, lease: r.lease, name: 'never.txt' }), true);
        assert.deepEqual(((await store.listResults({ ids: [r.id] })).get(r.id) ?? []).map((f) => f.name), ['a.csv']);
        await store.deleteResults({ id: r.id });
        assert.equal((await store.listResults({ ids: [r.id] })).size, 0);
      });

      it('refuses records and removals once the lease moved on or the job left running', async () => {
        const r = await running();
        assert.equal(await store.recordResult({ id: r.id, lease: r.lease + 1, file: file('a.csv'), now: T0 }), false);
        assert.equal(await store.unrecordResult({ id: r.id, lease: r.lease + 1, name: 'a.csv' }), false);
        assert.ok(await store.recordResult({ id: r.id, lease: r.lease, file: file('a.csv'), now: T0 }));
        assert.ok(await apply({ id: r.id, from: 'running', to: 'succeeded', lease: r.lease, reason: 'done', at: T0 + 5, patch: { finishedAt: T0 + 5 } }));
        assert.equal(await store.recordResult({ id: r.id, lease: r.lease, file: file('late.csv'), now: T0 + 6 }), false);
        assert.equal(await store.unrecordResult({ id: r.id, lease: r.lease, name: 'a.csv' }), false);
        assert.deepEqual(((await store.listResults({ ids: [r.id] })).get(r.id) ?? []).map((f) => f.name), ['a.csv']);
        const q = await insert();
        assert.equal(await store.recordResult({ id: q.id, lease: 0, file: file('a.csv'), now: T0 }), false);
      });
    });
  });
}
