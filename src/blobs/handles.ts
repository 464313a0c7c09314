/**
 * What a task handler sees of blob storage: `ctx.results` (files the job produces) and
 * `ctx.uploads` (files clients uploaded for jobs to read). The worker runtime builds these for
 * each attempt; they will be added to `TaskContext` as `ctx.results` and `ctx.uploads`.
 */
import type { Readable } from 'node:stream';

/** A file recorded on a job as part of its result. */
export interface ResultFile {
  name: string;
  size: number;
  contentType: string;
  sha256: string;
}

export interface ResultsHandle {
  /**
   * Streams `data` to blob storage as the result file `name` (1–200 characters of letters,
   * digits and `. _ -`) and records it on the job under the attempt's lease. Writing the same
   * name again replaces the file. Never buffers a stream whole.
   */
  write(name: string, data: string | Uint8Array | Readable | AsyncIterable<Uint8Array>, options?: { contentType?: string }): Promise<ResultFile>;
  /** The result files recorded on the job so far (earlier attempts' included: a resumed attempt may build on them). */
  list(): Promise<ResultFile[]>;
  /** Reads back a result file written earlier (e.g. parts to concatenate after a resume). */
  open(name: string): Promise<Readable>;
  /** Removes a result file (blob and record); no error when it does not exist. */
  remove(name: string): Promise<void>;
}

export interface UploadInfo {
  id: string;
  size: number;
  sha256: string;
  contentType: string;
  createdAt: string;
  expiresAt: string;
}

export interface UploadsHandle {
  /** Metadata of an upload of the job's tenant; throws FatalError when it does not exist or expired. */
  stat(id: string): Promise<UploadInfo>;
  /** A stream of the upload's bytes, optionally from byte `start` (to resume after a crash). */
  open(id: string, options?: { start?: number }): Promise<Readable>;
}
