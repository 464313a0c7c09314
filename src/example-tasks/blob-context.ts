/**
 * The handler context of tasks that read uploads and write result files: `TaskContext` plus
 * `ctx.results` and `ctx.uploads` (the contract in src/blobs/handles.ts). `withBlobs` checks at
 * run time that the worker really provided them, so a runtime without blob storage fails the
 * job with a clear message instead of a TypeError deep inside a handler.
 */
import type { ResultsHandle, UploadsHandle } from '../blobs/handles.js';
import { FatalError } from '../core/errors.js';
import type { TaskContext } from '../task-api/define.js';

export type BlobTaskContext<C = unknown> = TaskContext<C> & { results: ResultsHandle; uploads: UploadsHandle };

export function withBlobs<C>(ctx: TaskContext<C>, taskType: string): BlobTaskContext<C> {
  const c = ctx as Partial<BlobTaskContext<C>>;
  if (typeof c.results?.write !== 'function' || typeof c.uploads?.open !== 'function') {
    throw new FatalError(`task "${taskType}" needs ctx.results and ctx.uploads, which this worker does not provide (no blob storage configured)`, {
      code: 'BLOBS_UNAVAILABLE',
    });
  }
  return ctx as BlobTaskContext<C>;
}
