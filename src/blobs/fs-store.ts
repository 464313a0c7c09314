/**
 * The filesystem blob store (the default): one file per key under a root directory.
 *
 * Writes go to a temporary file in `<root>/.tmp/` (same filesystem, so the final rename is
 * atomic), are fsynced, renamed into place, and the target directory is fsynced: a reader or a
 * process restarted after kill -9 sees either no blob or the whole blob, never a partial one.
 * Temporary files of writes that died with their process are removed when the store opens
 * (only those untouched for an hour, as other processes may share the directory).
 */
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, rmdir, stat, unlink } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { abortReasonOr } from '../core/abort.js';
import { Meter, toReadable } from './meter.js';
import {
  assertBlobKey,
  assertBlobPrefix,
  type BlobListEntry,
  BlobNotFoundError,
  BlobRangeError,
  type BlobSource,
  type BlobStat,
  type BlobStore,
  type ByteRange,
  type PutOptions,
  type PutResult,
} from './store.js';

const TMP_DIR = '.tmp';
const STALE_TMP_MS = 60 * 60_000;

export interface FsBlobStoreOptions {
  /** Remove temporary files older than this when the store opens. Default one hour. */
  staleTempMs?: number;
}

export class FsBlobStore implements BlobStore {
  readonly description: string;
  private readonly tmp: string;

  private constructor(readonly root: string) {
    this.description = `filesystem ${root}`;
    this.tmp = join(root, TMP_DIR);
  }

  static async open(root: string, options: FsBlobStoreOptions = {}): Promise<FsBlobStore> {
    const store = new FsBlobStore(resolve(root));
    await mkdir(store.tmp, { recursive: true, mode: 0o700 });
    await store.removeStaleTemp(options.staleTempMs ?? STALE_TMP_MS);
    return store;
  }

  private path(key: string): string {
    assertBlobKey(key);
    return join(this.root, ...key.split('/'));
  }

  async put(key: string, source: BlobSource, options: PutOptions = {}): Promise<PutResult> {
    const target = this.path(key);
    const temp = join(this.tmp, `${Date.now()}-${randomBytes(8).toString('hex')}`);
    const meter = new Meter(options.maxBytes);
    try {
      // flush: the descriptor is fsynced before it closes, so the rename publishes durable bytes.
      const file = createWriteStream(temp, { flags: 'wx', mode: 0o600, flush: true });
      await pipeline(toReadable(source), meter, file, options.signal ? { signal: options.signal } : {});
      await this.renameIntoPlace(temp, target);
    } catch (err) {
      await unlink(temp).catch(() => {});
      // Aborted: the signal's reason, as the S3 store rejects, not the pipeline's bare AbortError.
      throw abortReasonOr(options.signal, err);
    }
    return meter.result();
  }

  private async renameIntoPlace(temp: string, target: string): Promise<void> {
    const dir = dirname(target);
    // A concurrent delete may remove the (then empty) directory between mkdir and rename: retry once.
    for (let attempt = 0; ; attempt++) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      try {
        await rename(temp, target);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || attempt > 0) throw err;
      }
    }
    await fsyncDir(dir);
  }

  async get(key: string, range: ByteRange = {}): Promise<Readable> {
    const path = this.path(key);
    // Open first, so a blob replaced or deleted meanwhile is read whole from the open descriptor.
    const handle = await open(path, 'r').catch((err: NodeJS.ErrnoException) => {
      throw err.code === 'ENOENT' || err.code === 'EISDIR' || err.code === 'ENOTDIR' ? new BlobNotFoundError(key) : err;
    });
    try {
      const { size } = await handle.stat();
      const start = range.start ?? 0;
      if (start > 0 && start >= size) throw new BlobRangeError(key, size);
      const end = Math.min(range.end ?? size - 1, size - 1);
      if (end < start) {
        await handle.close();
        return Readable.from([]);
      }
      // The stream owns the handle from here and closes it when it ends or is destroyed.
      return handle.createReadStream({ start, end });
    } catch (err) {
      await handle.close().catch(() => {});
      throw err;
    }
  }

  async stat(key: string): Promise<BlobStat | null> {
    try {
      const s = await stat(this.path(key));
      return s.isFile() ? { size: s.size, modifiedAt: s.mtimeMs } : null;
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.path(key);
    try {
      await unlink(path);
    } catch (err) {
      if (isMissing(err) || (err as NodeJS.ErrnoException).code === 'EISDIR' || (err as NodeJS.ErrnoException).code === 'EPERM') return;
      throw err;
    }
    await this.pruneEmptyDirs(dirname(path));
  }

  async deletePrefix(prefix: string): Promise<number> {
    assertBlobPrefix(prefix);
    let n = 0;
    const dirs = new Set<string>();
    for await (const entry of this.list(prefix)) {
      const path = join(this.root, ...entry.key.split('/'));
      try {
        await unlink(path);
        n++;
      } catch (err) {
        if (!isMissing(err)) throw err;
      }
      dirs.add(dirname(path));
    }
    // Deepest first, so parents empty out after their children.
    for (const dir of [...dirs].sort((a, b) => b.length - a.length)) await this.pruneEmptyDirs(dir);
    return n;
  }

  async *list(prefix: string): AsyncIterable<BlobListEntry> {
    assertBlobPrefix(prefix);
    const cut = prefix.lastIndexOf('/');
    const dirKey = cut < 0 ? '' : prefix.slice(0, cut);
    const namePrefix = prefix.slice(cut + 1);
    yield* this.walk(dirKey, namePrefix);
  }

  /**
   * Depth-first, entries sorted so that keys come out in byte order: a directory `a` sorts as
   * `a/`, which puts `a-b` (0x2d) before `a/x` (0x2f), exactly as S3 lists them.
   */
  private async *walk(dirKey: string, namePrefix: string): AsyncIterable<BlobListEntry> {
    const dir = dirKey === '' ? this.root : join(this.root, ...dirKey.split('/'));
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (err) {
      if (isMissing(err) || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return;
      throw err;
    }
    const items = entries
      .filter((e) => e.name.startsWith(namePrefix) && !(dirKey === '' && e.name.startsWith('.')) && (e.isDirectory() || e.isFile()))
      .map((e) => ({ name: e.name, dir: e.isDirectory(), sortKey: e.isDirectory() ? `${e.name}/` : e.name }))
      .sort((a, b) => (a.sortKey < b.sortKey ? -1 : a.sortKey > b.sortKey ? 1 : 0));
    for (const item of items) {
      const key = dirKey === '' ? item.name : `${dirKey}/${item.name}`;
      if (item.dir) {
        yield* this.walk(key, '');
        continue;
      }
      try {
        const s = await stat(join(dir, item.name));
        yield { key, size: s.size, modifiedAt: s.mtimeMs };
      } catch (err) {
        if (!isMissing(err)) throw err;
      }
    }
  }

  /** Removes now-empty directories from `dir` up to (not including) the root. */
  private async pruneEmptyDirs(dir: string): Promise<void> {
    for (let d = dir; d.startsWith(this.root) && d !== this.root && d !== this.tmp; d = dirname(d)) {
      try {
        await rmdir(d);
      } catch {
        return;
      }
    }
  }

  private async removeStaleTemp(olderThanMs: number): Promise<void> {
    const now = Date.now();
    for (const name of await readdir(this.tmp)) {
      const path = join(this.tmp, name);
      try {
        const s = await stat(path);
        if (now - s.mtimeMs > olderThanMs) await rm(path, { force: true });
      } catch (err) {
        if (!isMissing(err)) throw err;
      }
    }
  }

  async close(): Promise<void> {}
}

function isMissing(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT';
}

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
