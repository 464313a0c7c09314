/**
 * Result files (`ctx.results`): blobs under `results/<jobId>/<writeId>/<name>`, recorded on the
 * job by the store under the attempt's lease.
 *
 * Every write gets its own key (a fresh UUIDv7 `writeId`): a worker that lost its lease may
 * still be streaming when the new owner writes the same name, and it must be able to delete
 * what it wrote without touching the new owner's file. The record is made only after the blob
 * is complete, so a recorded file always exists; a blob whose record never happened (crash in
 * between, lost lease) is an orphan under the job's prefix, removed with the rest at expiry by
 * `deleteJobResults`.
 */
import type { Readable } from 'node:stream';
import { FatalError, LeaseLostError } from '../core/errors.js';
import { uuidv7 } from '../core/ids.js';
import type { ResultFile, ResultsHandle } from './handles.js';
import { guessContentType, isMediaType } from './media-type.js';
import { toReadable } from './meter.js';
import type { BlobStore } from './store.js';

/** A result file as the store records it: the public fields plus where its bytes are. */
export interface StoredResultFile extends ResultFile {
  key: string;
}

/** The job-record side of result files, implemented by the lead's store wiring. */
export interface ResultRecords {
  /** Adds `file` to the job, replacing a file of the same name, under the lease; false when the lease was lost. */
  record(file: StoredResultFile): Promise<boolean>;
  /** Removes the file named `name` from the job under the lease (no-op if absent); false when the lease was lost. */
  unrecord(name: string): Promise<boolean>;
  /** The files recorded on the job, in recording order. */
  list(): Promise<StoredResultFile[]>;
}

const NAME = /^[A-Za-z0-9._-]{1,200}$/;

export function isResultName(name: unknown): name is string {
  return typeof name === 'string' && NAME.test(name) && name !== '.' && name !== '..';
}

export const resultPrefix = (jobId: string) => `results/${jobId}/`;

export interface ResultsWriterOptions {
  /** Refuse result files larger than this. Default: unlimited. */
  maxBytes?: number;
}

export function createResultsWriter(blobs: BlobStore, jobId: string, records: ResultRecords, options: ResultsWriterOptions = {}): ResultsHandle {
  async function find(name: string): Promise<StoredResultFile | undefined> {
    return (await records.list()).find((f) => f.name === name);
  }
  return {
    async write(name, data, writeOptions = {}) {
      if (!isResultName(name))
        throw new FatalError(`invalid result file name "${String(name).slice(0, 80)}": 1–200 letters, digits and . _ -`, { code: 'INVALID_RESULT_NAME' });
      const contentType = writeOptions.contentType ?? guessContentType(name);
      if (!isMediaType(contentType))
        throw new FatalError(`invalid content type "${String(contentType).slice(0, 80)}" for result file ${name}`, { code: 'INVALID_CONTENT_TYPE' });
      const key = `${resultPrefix(jobId)}${uuidv7()}/${name}`;
      const previous = await find(name);
      const { size, sha256 } = await blobs.put(key, toReadable(data), {
        contentType,
        ...(options.maxBytes === undefined ? {} : { maxBytes: options.maxBytes }),
      });
      const file: StoredResultFile = { name, size, contentType, sha256, key };
      let recorded: boolean;
      try {
        recorded = await records.record(file);
      } catch (err) {
        await blobs.delete(key).catch(() => {});
        throw err;
      }
      if (!recorded) {
        await blobs.delete(key).catch(() => {});
        throw new LeaseLostError(jobId);
      }
      if (previous && previous.key !== key) await blobs.delete(previous.key).catch(() => {});
      return { name, size, contentType, sha256 };
    },
    async list() {
      return (await records.list()).map(({ name, size, contentType, sha256 }) => ({ name, size, contentType, sha256 }));
    },
    async open(name): Promise<Readable> {
      const file = await find(name);
      if (!file) throw new FatalError(`job ${jobId} has no result file "${String(name).slice(0, 80)}"`, { code: 'RESULT_NOT_FOUND' });
      return blobs.get(file.key);
    },
    async remove(name) {
      const file = await find(name);
      if (!file) return;
      if (!(await records.unrecord(name))) throw new LeaseLostError(jobId);
      await blobs.delete(file.key).catch(() => {});
    },
  };
}

/** Deletes every blob of the job's results (recorded files and orphans); returns how many. */
export function deleteJobResults(blobs: BlobStore, jobId: string): Promise<number> {
  return blobs.deletePrefix(resultPrefix(jobId));
}
