/**
 * PostgresStore's upgrade path (test/support/upgrade-scenario.ts): a schema at each older
 * version, with jobs in every state, migrated to the latest, every job then ending as it should.
 * A schema from before the baseline is refused: postgres-store.test.ts.
 */
import { after } from 'node:test';
import pg from 'pg';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { createTestDatabase } from '../support/postgres.js';
import { runUpgradeScenario } from '../support/upgrade-scenario.js';

const db = await createTestDatabase('lh_upgrade');
after(() => db.drop());
let schemas = 0;

runUpgradeScenario({
  name: 'PostgreSQL',
  latest: PostgresStore.latestVersion,
  async newDatabase() {
    const schema = `upgrade_${++schemas}`;
    return {
      open: async () => new PostgresStore({ connectionString: db.url, schema, poolSize: 4 }),
      drop: async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        try {
          await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        } finally {
          await c.end();
        }
      },
    };
  },
});
