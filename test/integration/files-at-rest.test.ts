/**
 * Files at rest (issue 36): what Longhaul creates on disk is readable by its owner only. The
 * SQLite database and the -wal and -shm files SQLite creates beside it, the generated secret
 * files and the blobs are mode 0600 whatever the umask lets through (blob directories 0700).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { toReadable } from '../../src/blobs/meter.js';
import { loadOrCreateSecretFile } from '../../src/blobs/signed-urls.js';
import { storeUpload, uploadDataKey } from '../../src/blobs/uploads.js';
import { secretBoxFor } from '../../src/facade/secrets-key.js';
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

  it('the webhook secrets key file and a blob (an upload): 0600, in a 0700 directory', async () => {
    const previous = process.umask(0o022);
    try {
      const database = join(dir, 'keys.db');
      await secretBoxFor({ database, secretsKey: undefined }).seal('whsec_x', 'c');
      assert.equal(mode(`${database}.secrets-key`), 0o600);
      const blobDir = join(dir, 'blobs');
      const blobs = await FsBlobStore.open(blobDir);
      try {
        const info = await storeUpload(blobs, { tenant: 't', body: toReadable('bytes'), contentType: 'text/plain', maxBytes: 100, ttlMs: 60_000 });
        assert.equal(mode(join(blobDir, uploadDataKey(info.id))), 0o600);
        assert.equal(mode(join(blobDir, 'uploads', info.id)), 0o700);
      } finally {
        await blobs.close();
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
