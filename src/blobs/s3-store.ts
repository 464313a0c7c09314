/**
 * The S3-compatible blob store (AWS S3, MinIO, R2, Ceph RGW, ...), on `@aws-sdk/client-s3`.
 *
 * Writes stream through `@aws-sdk/lib-storage`'s Upload: a multipart upload for anything larger
 * than one part, so only a few parts (`queueSize` + 1, 5 MiB each by default) are held in memory; a failed or
 * aborted write aborts the multipart upload, and S3 only makes an object visible once it is
 * complete, which gives the same "whole or nothing" guarantee as the filesystem store.
 */
import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { Readable } from 'node:stream';
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

export interface S3BlobStoreOptions {
  bucket: string;
  region?: string;
  /** For S3-compatible services: their URL. */
  endpoint?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** Path-style URLs (`endpoint/bucket/key`), which most self-hosted services need. */
  forcePathStyle?: boolean;
  /** Prepended to every key, e.g. `longhaul/` to share a bucket. */
  prefix?: string;
  /** Multipart part size (S3 minimum 5 MiB; at most 10,000 parts, so 5 MiB parts cap a blob at ~48 GiB). Memory held per write is a few parts. Default 5 MiB. */
  partSize?: number;
  /** Parts uploaded concurrently. Default 2. */
  queueSize?: number;
  /** An existing client (tests, custom middleware); the store does not destroy it on close. */
  client?: S3Client;
}

const MiB = 1024 * 1024;

export class S3BlobStore implements BlobStore {
  readonly description: string;
  private readonly client: S3Client;
  private readonly ownsClient: boolean;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly partSize: number;
  private readonly queueSize: number;

  constructor(options: S3BlobStoreOptions) {
    if (!options.bucket) throw new Error('S3 blob store needs a bucket (LONGHAUL_S3_BUCKET)');
    this.bucket = options.bucket;
    this.prefix = options.prefix ?? '';
    if (this.prefix !== '' && !/^[A-Za-z0-9._/-]+\/$/.test(this.prefix)) {
      throw new Error(`LONGHAUL_S3_PREFIX must be letters, digits and "._-/" ending with "/" (got "${this.prefix}")`);
    }
    this.partSize = Math.max(5 * MiB, options.partSize ?? 5 * MiB);
    this.queueSize = Math.max(1, options.queueSize ?? 2);
    this.ownsClient = !options.client;
    this.client = options.client ?? new S3Client(clientConfig(options));
    this.description = `s3 ${options.endpoint ? `${options.endpoint} ` : ''}bucket ${this.bucket}${this.prefix ? ` prefix ${this.prefix}` : ''}`;
  }

  private key(key: string): string {
    assertBlobKey(key);
    return this.prefix + key;
  }

  async put(key: string, source: BlobSource, options: PutOptions = {}): Promise<PutResult> {
    const Key = this.key(key);
    options.signal?.throwIfAborted();
    const meter = new Meter(options.maxBytes);
    const input = toReadable(source);
    // Not pipeline(): the Upload consumes `meter` itself; errors on either side are forwarded.
    input.on('error', (err) => meter.destroy(err));
    input.pipe(meter);
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.bucket, Key, Body: meter, ...(options.contentType ? { ContentType: options.contentType } : {}) },
      partSize: this.partSize,
      queueSize: this.queueSize,
      leavePartsOnError: false,
    });
    let failure: unknown = null;
    const fail = (err: unknown) => {
      if (failure === null) failure = err;
      void upload.abort().catch(() => {});
    };
    meter.on('error', fail);
    const onAbort = () => {
      const reason = options.signal?.reason ?? new Error('aborted');
      input.destroy(reason);
      meter.destroy(reason);
      fail(reason);
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await upload.done();
    } catch (err) {
      throw failure ?? err;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
    // The Upload may resolve on a single PutObject before noticing a late stream error.
    if (failure !== null) {
      await this.delete(key).catch(() => {});
      throw failure;
    }
    return meter.result();
  }

  async get(key: string, range: ByteRange = {}): Promise<Readable> {
    const Key = this.key(key);
    let header: string | undefined;
    if (range.start !== undefined || range.end !== undefined) header = `bytes=${range.start ?? 0}-${range.end ?? ''}`;
    try {
      const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key, ...(header ? { Range: header } : {}) }));
      if (!(out.Body instanceof Readable)) throw new Error('S3 GetObject returned no stream body');
      return out.Body;
    } catch (err) {
      if (isNotFound(err)) throw new BlobNotFoundError(key);
      if (statusOf(err) === 416) {
        const st = await this.stat(key);
        throw new BlobRangeError(key, st?.size ?? 0);
      }
      throw err;
    }
  }

  async stat(key: string): Promise<BlobStat | null> {
    try {
      const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.key(key) }));
      return { size: out.ContentLength ?? 0, modifiedAt: out.LastModified?.getTime() ?? 0 };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.key(key) }));
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  async deletePrefix(prefix: string): Promise<number> {
    let n = 0;
    let batch: string[] = [];
    const flush = async () => {
      if (batch.length === 0) return;
      const out = await this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }));
      const errors = (out.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey');
      if (errors.length > 0) throw new Error(`S3 DeleteObjects failed for ${errors.length} keys: ${errors[0]?.Code ?? ''} ${errors[0]?.Message ?? ''}`);
      n += batch.length;
      batch = [];
    };
    for await (const entry of this.list(prefix)) {
      batch.push(this.prefix + entry.key);
      if (batch.length === 1000) await flush();
    }
    await flush();
    return n;
  }

  async *list(prefix: string): AsyncIterable<BlobListEntry> {
    assertBlobPrefix(prefix);
    let ContinuationToken: string | undefined;
    do {
      const out = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, ...(ContinuationToken ? { ContinuationToken } : {}) }),
      );
      for (const o of out.Contents ?? []) {
        if (!o.Key) continue;
        yield { key: o.Key.slice(this.prefix.length), size: o.Size ?? 0, modifiedAt: o.LastModified?.getTime() ?? 0 };
      }
      ContinuationToken = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (ContinuationToken);
  }

  async close(): Promise<void> {
    if (this.ownsClient) this.client.destroy();
  }
}

function clientConfig(o: S3BlobStoreOptions): S3ClientConfig {
  return {
    region: o.region ?? 'us-east-1',
    ...(o.endpoint ? { endpoint: o.endpoint } : {}),
    ...(o.forcePathStyle ? { forcePathStyle: true } : {}),
    ...(o.accessKeyId && o.secretAccessKey ? { credentials: { accessKeyId: o.accessKeyId, secretAccessKey: o.secretAccessKey } } : {}),
    // Checksums only where S3 requires them: many S3-compatible services refuse the newer
    // default (CRC32 trailers with aws-chunked encoding). Integrity is ours anyway (SHA-256).
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  };
}

function statusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

function isNotFound(err: unknown): boolean {
  const name = (err as { name?: string })?.name;
  if (name === 'NoSuchBucket') return false;
  return name === 'NoSuchKey' || name === 'NotFound' || statusOf(err) === 404;
}
