/**
 * Blob storage wired to jobs: what a Longhaul instance opens (lazily, on first use) to give
 * handlers `ctx.results` / `ctx.uploads`, to put signed result URLs into snapshots, to serve
 * the upload and result routes, and to delete a job's files when its result expires.
 */
import { FatalError } from '../core/errors.js';
import type { JobSnapshot } from '../core/job.js';
import type { ResultFileRecord, ResultFileStore } from '../store/store.js';
import type { StoreWriteRetry } from '../core/store-errors.js';
import { openBlobStore, resolveBlobStoreConfig, resolveUploadLimits, type UploadLimits } from './config.js';
import type { ResultsHandle, UploadsHandle } from './handles.js';
import { buildResultLinks } from './result-links.js';
import { createResultsWriter, deleteJobResults, type ResultRecords } from './results.js';
import { resolveUrlSigningSecret, resolveUrlTtlMs, UrlSigner } from './signed-urls.js';
import type { BlobStore } from './store.js';
import { createUploadsHandle } from './uploads.js';

type Env = Record<string, string | undefined>;

export interface JobFilesOptions {
  /** A ready blob store (default: from LONGHAUL_BLOB_DIR / LONGHAUL_S3_*, next to the database). */
  blobs?: BlobStore;
  /** Default: LONGHAUL_URL_SIGNING_SECRET, or (SQLite) a secret kept next to the database. */
  urlSigningSecret?: string;
  /** Lifetime of signed result URLs. Default: LONGHAUL_RESULT_URL_TTL_MS, else 1 hour. */
  urlTtlMs?: number;
  /** Upload size limit and lifetime. Default: LONGHAUL_MAX_UPLOAD_BYTES, LONGHAUL_UPLOAD_TTL_MS. */
  uploadLimits?: Partial<UploadLimits>;
}

export class JobFiles {
  private constructor(
    readonly blobs: BlobStore,
    readonly limits: UploadLimits,
    private readonly ownsBlobs: boolean,
    private readonly makeSigner: () => Promise<UrlSigner>,
  ) {}

  static async open(database: string, options: JobFilesOptions = {}, env: Env = process.env): Promise<JobFiles> {
    const limits = { ...resolveUploadLimits(env), ...options.uploadLimits };
    const urlTtlMs = options.urlTtlMs ?? resolveUrlTtlMs(env);
    const blobs = options.blobs ?? (await openBlobStore(resolveBlobStoreConfig({ env, database })));
    // The signer is resolved on first need: workers and sweepers never sign, and with
    // PostgreSQL the secret is required only where URLs are made or checked.
    const makeSigner = async () => new UrlSigner(options.urlSigningSecret ?? (await resolveUrlSigningSecret({ env, database })), urlTtlMs);
    return new JobFiles(blobs, limits, options.blobs === undefined, makeSigner);
  }

  /** The URL signer (its secret is resolved once, on first call). */
  readonly signer: () => Promise<UrlSigner> = once(() => this.makeSigner());

  async close(): Promise<void> {
    if (this.ownsBlobs) await this.blobs.close();
  }

  /**
   * `ctx.results` of one attempt: records go to the store under the attempt's lease, each
   * through `retry` (the worker's: it rides out a short outage of the store).
   */
  results(store: ResultFileStore, job: { id: string; lease: number }, onLeaseLost: () => void, retry: StoreWriteRetry = (_what, write) => write()): ResultsHandle {
    const records: ResultRecords = {
      async record(file) {
        const ok = await retry('result file', () => store.recordResult({ id: job.id, lease: job.lease, file, now: Date.now() }));
        if (!ok) onLeaseLost();
        return ok;
      },
      async unrecord(name) {
        const ok = await retry('result file', () => store.unrecordResult({ id: job.id, lease: job.lease, name }));
        if (!ok) onLeaseLost();
        return ok;
      },
      async list() {
        return (await retry('result file list', () => store.listResults({ ids: [job.id] }))).get(job.id) ?? [];
      },
    };
    return createResultsWriter(this.blobs, job.id, records);
  }

  uploads(tenant: string): UploadsHandle {
    return createUploadsHandle(this.blobs, tenant);
  }

  /** `results`, `resultUrl` and `downloads` of a snapshot from its recorded files. */
  decorate(snapshot: JobSnapshot, files: readonly ResultFileRecord[], signer: UrlSigner, now: number = Date.now()): JobSnapshot {
    if (files.length === 0 || snapshot.status === 'expired') return snapshot;
    const notAfter = snapshot.expiresAt === null ? null : Date.parse(snapshot.expiresAt);
    const links = buildResultLinks(snapshot.id, files, signer, { notAfter, now });
    return { ...snapshot, results: links.results, resultUrl: links.resultUrl, downloads: files.reduce((n, f) => n + f.downloads, 0) };
  }

  /** Deletes every blob of the job's results, then its records. */
  async deleteJobFiles(store: ResultFileStore, jobId: string): Promise<void> {
    await deleteJobResults(this.blobs, jobId);
    await store.deleteResults({ id: jobId });
  }
}

/** `get`, called once on first use; a failure is not kept (the next use tries again). */
function once<T>(get: () => Promise<T>): () => Promise<T> {
  let value: Promise<T> | null = null;
  return () => {
    value ??= get().catch((err) => {
      value = null;
      throw err;
    });
    return value;
  };
}

/** Handles that open blob storage on first use, so a job that never touches files costs nothing. */
export function lazyResults(get: () => Promise<ResultsHandle>): ResultsHandle {
  const h = once(get);
  return {
    write: async (name, data, options) => (await h()).write(name, data, options),
    list: async () => (await h()).list(),
    open: async (name) => (await h()).open(name),
    remove: async (name) => (await h()).remove(name),
  };
}

export function lazyUploads(get: () => Promise<UploadsHandle>): UploadsHandle {
  const h = once(get);
  return {
    stat: async (id) => (await h()).stat(id),
    open: async (id, options) => (await h()).open(id, options),
  };
}

const unavailable = () => {
  throw new FatalError('this worker has no blob storage (ctx.results and ctx.uploads are unavailable)', { code: 'BLOBS_UNAVAILABLE' });
};

/** What a worker built without blob storage hands to handlers. */
export const NO_RESULTS: ResultsHandle = { write: async () => unavailable(), list: async () => unavailable(), open: async () => unavailable(), remove: async () => unavailable() };
export const NO_UPLOADS: UploadsHandle = { stat: async () => unavailable(), open: async () => unavailable() };
