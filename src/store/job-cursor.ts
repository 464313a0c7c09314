/**
 * The cursor of a page of jobs (listJobs), the same on both stores: the last job's id, as
 * base64url so that clients treat it as opaque. A cursor that does not hold a job id is refused.
 */
import { isUuid } from '../core/ids.js';

export function encodeJobCursor(id: string): string {
  return Buffer.from(id, 'utf8').toString('base64url');
}

export function decodeJobCursor(cursor: string): string {
  const id = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!isUuid(id)) throw new Error('invalid cursor');
  return id;
}
