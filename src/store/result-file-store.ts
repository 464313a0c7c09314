/** The result-file part of the storage contract (see store.ts): the records of the files a job's handler wrote. */
import type { LeaseRef } from './store.js';

/** A result file recorded on a job (see src/blobs/results.ts), with its download count. */
export interface ResultFileRecord {
  name: string;
  size: number;
  contentType: string;
  sha256: string;
  /** Where the bytes are in blob storage. */
  key: string;
  downloads: number;
}

/**
 * The files a job's handler wrote (the bytes are in blob storage, src/blobs/; this part keeps
 * what they are and where). Guarantees:
 * - Records and removals happen only under the job's current lease while it is running, like
 *   the queue's other lease-carrying writes: a handler that lost its job cannot add files to it.
 * - A name is one file per job: recording it again replaces the record. Lists keep recording order.
 * - Nothing here touches the bytes: the caller deletes a job's blobs, then forgets its records
 *   (deleteResults). A download is counted on the record (countDownload).
 */
export interface ResultFileStore {
  /** Records a result file on a running job under its lease, replacing one of the same name; false when the lease is gone. */
  recordResult(params: LeaseRef & { file: Omit<ResultFileRecord, 'downloads'>; now: number }): Promise<boolean>;
  /** Removes the result file `name` under the lease (no-op when absent); false when the lease is gone. */
  unrecordResult(params: LeaseRef & { name: string }): Promise<boolean>;
  /** The result files of each job (in recording order); jobs without files are absent from the map. */
  listResults(params: { ids: readonly string[] }): Promise<Map<string, ResultFileRecord[]>>;
  /** Forgets every result file of the job (after its blobs were deleted). */
  deleteResults(params: { id: string }): Promise<void>;
  /** Counts one download of the job's result file `name`. */
  countDownload(params: { id: string; name: string }): Promise<void>;
}
