/**
 * Blob storage of result files and uploads, opened on first use: most processes (a worker whose
 * tasks write no files, a server nobody uploads to) never need it, and S3 clients are not free.
 */
import { JobFiles, type JobFilesOptions } from '../blobs/job-files.js';

export class LazyFiles {
  private opening: Promise<JobFiles> | null = null;
  private closed = false;

  constructor(
    private readonly database: string,
    private readonly options: JobFilesOptions,
  ) {}

  /** The open storage; a failed open is forgotten, so the next call tries again. */
  open(): Promise<JobFiles> {
    if (this.closed) return Promise.reject(new Error('this Longhaul instance is closed'));
    this.opening ??= JobFiles.open(this.database, this.options).catch((err) => {
      this.opening = null;
      throw err;
    });
    return this.opening;
  }

  /** The storage if something opened it already, else null (callers that must not open it for nothing). */
  get opened(): Promise<JobFiles> | null {
    return this.opening;
  }

  async close(): Promise<void> {
    this.closed = true;
    const files = this.opening;
    this.opening = null;
    if (files) await (await files.catch(() => null))?.close();
  }
}
