/**
 * The API-key part of the storage contract (ApiKeyStore in src/store/api-key-store.ts): a key
 * reads back field for field, an id is never reused, listing per tenant with and without revoked
 * keys, revoke once and final, last used only forward, and the hash kept rather than the key.
 * Run by every store's test file with a factory returning a fresh, migrated, empty store.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { type ApiKeyRecord, apiKeyMatches, generateApiKey } from '../../../src/core/api-keys.js';
import type { Store } from '../../../src/store/store.js';
import { T0 } from './fixtures.js';

function record(overrides: Partial<ApiKeyRecord> = {}): { key: string; record: ApiKeyRecord } {
  const made = generateApiKey();
  return {
    key: made.key,
    record: { id: made.id, tenant: 'acme', admin: false, hash: made.hash, createdAt: T0, lastUsedAt: null, revokedAt: null, ...overrides },
  };
}

export function runApiKeyContract(name: string, makeStore: () => Promise<Store>, raw?: (store: Store) => Promise<string[]>): void {
  describe(`store contract (API keys): ${name}`, () => {
    let store: Store;
    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    it('insert reads back field for field; an id taken is refused, even with another tenant', async () => {
      assert.equal(await store.hasApiKeys(), false, 'a new database has no keys');
      const { key, record: k } = record({ admin: true });
      assert.equal(await store.insertApiKey({ key: k }), true);
      assert.deepEqual(await store.getApiKey({ id: k.id }), k);
      assert.equal(await store.insertApiKey({ key: { ...k, tenant: 'globex', hash: 'f'.repeat(64) } }), false);
      assert.deepEqual(await store.getApiKey({ id: k.id }), k, 'the first key is kept');
      assert.equal(await store.getApiKey({ id: 'nosuchkey234' }), null);
      assert.equal(await store.hasApiKeys(), true);
      // What the store holds checks the key, and is not the key.
      const held = (await store.getApiKey({ id: k.id })) as ApiKeyRecord;
      assert.ok(apiKeyMatches(held, key));
      assert.ok(!apiKeyMatches(held, `${key.slice(0, -1)}x`));
      assert.notEqual(held.hash, key);
      assert.ok(!held.hash.includes(key.slice(k.id.length + 4)), 'the secret is not stored');
    });

    it('the table holds the hash, never the key', { skip: raw === undefined }, async () => {
      const { key, record: k } = record();
      await store.insertApiKey({ key: k });
      const dump = (await (raw as (s: Store) => Promise<string[]>)(store)).join('\n');
      assert.ok(dump.includes(k.hash), 'the hash is in the table');
      assert.ok(!dump.includes(key), 'the key is not');
      assert.ok(!dump.includes(key.slice(-43)), 'nor its secret');
    });

    it('lists oldest first, per tenant, revoked keys only when asked', async () => {
      const a = record({ createdAt: T0 + 2 }).record;
      const b = record({ createdAt: T0 + 1, tenant: 'globex' }).record;
      const c = record({ createdAt: T0 + 3 }).record;
      for (const k of [a, b, c]) assert.equal(await store.insertApiKey({ key: k }), true);
      assert.deepEqual(
        (await store.listApiKeys({ limit: 10 })).map((k) => k.id),
        [b.id, a.id, c.id],
      );
      assert.deepEqual(
        (await store.listApiKeys({ tenant: 'acme', limit: 10 })).map((k) => k.id),
        [a.id, c.id],
      );
      assert.deepEqual(
        (await store.listApiKeys({ limit: 2 })).map((k) => k.id),
        [b.id, a.id],
      );
      await store.revokeApiKey({ id: a.id, now: T0 + 10 });
      assert.deepEqual(
        (await store.listApiKeys({ limit: 10 })).map((k) => k.id),
        [b.id, c.id],
      );
      assert.deepEqual(
        (await store.listApiKeys({ tenant: 'acme', revoked: true, limit: 10 })).map((k) => [k.id, k.revokedAt]),
        [
          [a.id, T0 + 10],
          [c.id, null],
        ],
      );
    });

    it('revoke sets the time once and answers the record; an unknown id answers null', async () => {
      const { record: k } = record();
      await store.insertApiKey({ key: k });
      assert.deepEqual(await store.revokeApiKey({ id: k.id, now: T0 + 5 }), { ...k, revokedAt: T0 + 5 });
      assert.deepEqual(await store.revokeApiKey({ id: k.id, now: T0 + 9 }), { ...k, revokedAt: T0 + 5 }, 'a second revoke keeps the first time');
      assert.equal((await store.getApiKey({ id: k.id }))?.revokedAt, T0 + 5);
      assert.equal(await store.revokeApiKey({ id: 'nosuchkey234', now: T0 }), null);
      assert.equal(await store.hasApiKeys(), true, 'a revoked key still counts: the database uses keys');
      assert.equal(await store.insertApiKey({ key: { ...k, revokedAt: null } }), false, 'a revoked id is never made again');
    });

    it('touch moves last used forward only', async () => {
      const { record: k } = record();
      await store.insertApiKey({ key: k });
      await store.touchApiKey({ id: k.id, at: T0 + 60_000 });
      assert.equal((await store.getApiKey({ id: k.id }))?.lastUsedAt, T0 + 60_000);
      await store.touchApiKey({ id: k.id, at: T0 + 1 });
      assert.equal((await store.getApiKey({ id: k.id }))?.lastUsedAt, T0 + 60_000, 'an older time does not go back');
      await store.touchApiKey({ id: k.id, at: T0 + 120_000 });
      assert.equal((await store.getApiKey({ id: k.id }))?.lastUsedAt, T0 + 120_000);
      await store.touchApiKey({ id: 'nosuchkey234', at: T0 });
    });
  });
}
