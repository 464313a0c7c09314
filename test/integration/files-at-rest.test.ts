/**
 * Files at rest (issue 36): what Longhaul creates on disk is readable by its owner only. The
 * SQLite database and the -wal and -shm files SQLite creates beside it, and the generated secret
 * files, are mode 0600 whatever the umask lets through.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { loadOrCreateSecretFile } from '../../src/blobs/signed-urls.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { newJob } from '../contract/store-contract/fixtures.js';

const dir = mkdtempSync(join(tmpdir(), 'longhaul-files-at-rest-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const mode = (path: string) => statSync(path).mode & 0o777;

describe('files at rest are mode 0600', () => {
  it('the SQLite database, its WAL and its SHM', async () => {
    const previous = process.umask(0o022); // the usual umask, which leaves 0644 files
    try {
      const path = join(dir, 'modes.db');
      const store = new SqliteStore({ path });
      try {
        await store.migrate();
        await store.insertJob({ job: newJob({ type: 'files-at-rest' }) });
        assert.equal(mode(path), 0o600, 'the database file');
        assert.equal(mode(`${path}-wal`), 0o600, 'the WAL file');
        assert.equal(mode(`${path}-shm`), 0o600, 'the SHM file');
      } finally {
        await store.close();
      }
    } finally {
      process.umask(previous);
    }
  });

  it('a generated secret file', async () => {
    const previous = process.umask(0o022);
    try {
      const path = join(dir, 'modes.db.url-signing-secret');
      await loadOrCreateSecretFile(path);
      assert.equal(mode(path), 0o600);
    } finally {
      process.umask(previous);
    }
  });
});
