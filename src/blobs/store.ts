/**
 * The blob storage port: result files and uploads live behind this one small interface, with a
 * filesystem implementation (fs-store.ts, the default) and an S3-compatible one (s3-store.ts).
 *
 * Every write streams: size and SHA-256 are computed while the bytes pass through, a size limit
 * is enforced on the way, and a failed or aborted write leaves nothing visible under the key.
 */
import type { Readable } from 'node:stream';

/** What a blob write accepts: a Node stream or any async iterable of bytes (or strings). */
export type BlobSource = Readable | AsyncIterable<Uint8Array | string>;

export interface PutOptions {
  /** Stored as the object's Content-Type where the backend keeps one (S3); informational only. */
  contentType?: string;
  /** Refuse (BlobTooLargeError) as soon as more than this many bytes arrive. */
  maxBytes?: number;
  /** Aborting stops the write; nothing is left behind. */
  signal?: AbortSignal;
}

export interface PutResult {
  size: number;
  /** Lower-case hex SHA-256 of the bytes written. */
  sha256: string;
}

export interface BlobStat {
  size: number;
  /** Unix milliseconds. */
  modifiedAt: number;
}

export interface BlobListEntry extends BlobStat {
  key: string;
}

/** An inclusive byte range, as in HTTP: `end` defaults to the last byte. */
export interface ByteRange {
  start?: number;
  end?: number;
}

export interface BlobStore {
  /** A short description for logs and docs, e.g. `filesystem /var/lib/longhaul.blobs`. */
  readonly description: string;
  /** Streams `source` to `key`; replaces an existing blob atomically (readers see the old or the new one). */
  put(key: string, source: BlobSource, options?: PutOptions): Promise<PutResult>;
  /** The blob's bytes (optionally a range); throws BlobNotFoundError when there is none. */
  get(key: string, range?: ByteRange): Promise<Readable>;
  stat(key: string): Promise<BlobStat | null>;
  /** Removes the blob; no error when it does not exist. */
  delete(key: string): Promise<void>;
  /** Removes every blob whose key starts with `prefix` (a plain string prefix); returns how many. */
  deletePrefix(prefix: string): Promise<number>;
  /** Blobs whose key starts with `prefix`, in ascending byte order of their keys (so callers may stop early). */
  list(prefix: string): AsyncIterable<BlobListEntry>;
  /** Releases clients and timers. */
  close(): Promise<void>;
}

export class BlobNotFoundError extends Error {
  readonly code = 'BLOB_NOT_FOUND';
  constructor(readonly key: string) {
    super(`no blob at "${key}"`);
    this.name = 'BlobNotFoundError';
  }
}

export class BlobTooLargeError extends Error {
  readonly code = 'BLOB_TOO_LARGE';
  constructor(readonly maxBytes: number) {
    super(`more than ${maxBytes} bytes`);
    this.name = 'BlobTooLargeError';
  }
}

/** A requested range that starts past the end of the blob. */
export class BlobRangeError extends Error {
  readonly code = 'BLOB_RANGE';
  constructor(
    readonly key: string,
    readonly size: number,
  ) {
    super(`range not satisfiable for "${key}" (${size} bytes)`);
    this.name = 'BlobRangeError';
  }
}

const SEGMENT = /^[A-Za-z0-9._-]{1,200}$/;
const MAX_KEY = 1024;

/**
 * Keys are `/`-separated segments of letters, digits and `. _ -`, never `.` or `..`; the first
 * segment may not start with `.` (names like `.tmp` at the root are the stores' own). This keeps
 * keys identical on a filesystem and in S3, and makes path traversal impossible by construction.
 */
export function assertBlobKey(key: string): void {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY) throw new Error(`invalid blob key "${String(key).slice(0, 80)}"`);
  const segments = key.split('/');
  for (const s of segments) {
    if (!SEGMENT.test(s) || s === '.' || s === '..') throw new Error(`invalid blob key "${key.slice(0, 80)}"`);
  }
  if ((segments[0] as string).startsWith('.')) throw new Error(`invalid blob key "${key.slice(0, 80)}": the first segment may not start with "."`);
}

/** A list/delete prefix: any prefix of a valid key (it may end inside a segment or with `/`). */
export function assertBlobPrefix(prefix: string): void {
  if (prefix === '') throw new Error('an empty blob prefix would match everything; refused');
  if (!/^[A-Za-z0-9._/-]{1,1024}$/.test(prefix) || prefix.startsWith('.') || prefix.startsWith('/') || prefix.includes('//')) {
    throw new Error(`invalid blob prefix "${prefix.slice(0, 80)}"`);
  }
  if (prefix.split('/').some((s) => s === '.' || s === '..')) throw new Error(`invalid blob prefix "${prefix.slice(0, 80)}"`);
}
