/**
 * store/postgres/notify-share.ts: the store contract's notify capability is store-neutral (its
 * `shared` part opaque); the channel narrows PostgreSQL's share (pool and LISTEN connection)
 * here, and only a share of that shape.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { ListenConnection } from '../../src/store/postgres/listen-connection.js';
import { POSTGRES_NOTIFY, postgresNotifyShare } from '../../src/store/postgres/notify-share.js';

describe('the PostgreSQL share of a notify capability', () => {
  it('is read from a postgres capability, and is absent from none or another kind', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:5432/test' });
    const listen = new ListenConnection({ connectionString: 'postgres://postgres@127.0.0.1:5432/test' }, undefined);
    try {
      const share = postgresNotifyShare({ kind: POSTGRES_NOTIFY, shared: { pool, listen } });
      assert.equal(share?.pool, pool);
      assert.equal(share?.listen, listen);
      assert.equal(postgresNotifyShare(null), null);
      assert.equal(postgresNotifyShare(undefined), null);
      assert.equal(postgresNotifyShare({ kind: 'other', shared: { pool, listen } }), null);
    } finally {
      await pool.end();
    }
  });

  it("refuses a 'postgres' capability that shares anything else", () => {
    for (const shared of [null, {}, { pool: {}, listen: {} }, 'pool']) {
      assert.throws(() => postgresNotifyShare({ kind: POSTGRES_NOTIFY, shared }), /must share \{ pool: pg.Pool, listen: ListenConnection \}/);
    }
  });
});
