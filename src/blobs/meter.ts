/**
 * A pass-through stream that counts and hashes the bytes of a blob write while they stream, and
 * fails the pipeline (BlobTooLargeError) the moment the size limit is crossed, so backends never
 * need the whole body in memory to know its size or digest.
 */
import { createHash, type Hash } from 'node:crypto';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { type BlobSource, BlobTooLargeError, type PutResult } from './store.js';

export class Meter extends Transform {
  private readonly hash: Hash = createHash('sha256');
  private bytes = 0;

  constructor(private readonly maxBytes: number = Number.POSITIVE_INFINITY) {
    super();
  }

  override _transform(chunk: unknown, _encoding: BufferEncoding, callback: TransformCallback): void {
    const buf = toBuffer(chunk);
    this.bytes += buf.length;
    if (this.bytes > this.maxBytes) {
      callback(new BlobTooLargeError(this.maxBytes));
      return;
    }
    this.hash.update(buf);
    callback(null, buf);
  }

  /** Size and digest; valid once the stream has ended. */
  result(): PutResult {
    return { size: this.bytes, sha256: this.hash.copy().digest('hex') };
  }
}

function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk, 'utf8');
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError(`blob data must be bytes or strings, got ${chunk === null ? 'null' : typeof chunk}`);
}

/** A Node Readable for any accepted source (strings and byte arrays are one chunk, not iterated). */
export function toReadable(source: BlobSource | string | Uint8Array): Readable {
  if (source instanceof Readable) return source;
  if (typeof source === 'string' || source instanceof Uint8Array) return Readable.from([source], { objectMode: false });
  if (source && typeof (source as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') return Readable.from(source, { objectMode: false });
  throw new TypeError('blob data must be a string, a Uint8Array, a Readable or an async iterable of bytes');
}
