/**
 * Released migration files never change: a database that applied a file must have the schema a
 * new database gets from the same file. This test holds the SHA-256 of every file of both
 * stores (src/store/<store>/migrations/), so an edit to a released file fails here; a new
 * migration is a new file, and adding its hash below is the deliberate act of releasing it.
 * (Run `sha256sum src/store/*\/migrations/*.sql` for the value.)
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { readMigrationFiles } from '../../src/store/migration-files.js';

const RELEASED: Record<'sqlite' | 'postgres', Record<string, string>> = {
  sqlite: {
    '0001_baseline.sql': '274621ba989e27101dfec2be735f946606a7ab0fa4709d6af18ecb9d9fd38b05',
    '0002_api_keys.sql': 'b05736372c4da436cecea1f37e3f9caabacb9cdd6b0a3b1233c02aa11e6585f4',
  },
  postgres: {
    '0001_baseline.sql': '60a0c9b8b921b36b7b3a7e83f48b6b39675dc7c9338f4b30af5dbc6dcac71ef4',
    '0002_api_keys.sql': 'c222753c23179072d88ca2091988a7d0d9a43dca12194fa7bdcd84c893c0c509',
  },
};

for (const store of ['sqlite', 'postgres'] as const) {
  test(`${store}: every migration file is released and unchanged`, () => {
    const files = readMigrationFiles(new URL(`../../src/store/${store}/migrations/`, import.meta.url));
    assert.ok(files.length >= 1, 'at least the baseline');
    const actual = Object.fromEntries(files.map((f) => [f.file, createHash('sha256').update(f.sql).digest('hex')]));
    for (const [file, hash] of Object.entries(actual)) {
      assert.ok(file in RELEASED[store], `${store}/migrations/${file} has no released hash: add '${file}': '${hash}' to RELEASED.${store}`);
      assert.equal(hash, RELEASED[store][file], `${store}/migrations/${file} changed after release: a released migration never changes; put the change in a new file`);
    }
    for (const file of Object.keys(RELEASED[store])) assert.ok(file in actual, `${store}/migrations/${file} is released but missing`);
  });
}
