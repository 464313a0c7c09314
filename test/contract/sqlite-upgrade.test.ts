/**
 * SqliteStore's upgrade path (test/support/upgrade-scenario.ts): a database file at each older
 * schema version, with jobs in every state, migrated to the latest, every job then ending as it
 * should. A file from before the baseline is refused: sqlite-store.test.ts.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { runUpgradeScenario } from '../support/upgrade-scenario.js';

runUpgradeScenario({
  name: 'SQLite',
  latest: SqliteStore.latestVersion,
  async newDatabase() {
    const dir = mkdtempSync(join(tmpdir(), 'longhaul-sqlite-upgrade-'));
    const path = join(dir, 'jobs.db');
    return {
      open: async () => new SqliteStore({ path }),
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
});
