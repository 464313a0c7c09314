/**
 * Uploads: files clients send (`POST /v1/uploads`) for jobs to read (`ctx.uploads`). No
 * database table: each upload is two blobs plus an index marker,
 *
 *   uploads/<id>/data                          the bytes
 *   uploads/<id>/meta.json                     {id, tenant, size, sha256, contentType, createdAt, expiresAt}
 *   upload-index/expire/<expiresAt ms>-<id>    empty; listed in key order by the sweeper
 *
 * The marker is written before the bytes, so an upload whose process died mid-way is still
 * found and removed by the sweeper. At expiry the bytes go and the metadata stays a while
 * longer as a tombstone (marker `upload-index/forget/<ms>-<id>`), so reads answer 410 rather
 * than 404 for a week after expiry.
 */
import { Readable } from 'node:stream';
import { FatalError, UploadQuotaExceededError } from '../core/errors.js';
import { isUuid, uuidv7 } from '../core/ids.js';
import type { UploadInfo, UploadsHandle } from './handles.js';
import { toReadable } from './meter.js';
import { readSmall } from './read-small.js';
import { BlobTooLargeError, type BlobSource, type BlobStore } from './store.js';
import { reserveUpload, type UploadQuota, type UploadReservation } from './upload-quota.js';
import { parseJson } from '../core/json-text.js';

export const DEFAULT_UPLOAD_TOMBSTONE_MS = 7 * 86_400_000;

const EXPIRE_INDEX = 'upload-index/expire/';
const FORGET_INDEX = 'upload-index/forget/';

export const uploadDataKey = (id: string) => `uploads/${id}/data`;
export const uploadMetaKey = (id: string) => `uploads/${id}/meta.json`;

function marker(index: string, atMs: number, id: string): string {
  return `${index}${String(Math.max(0, Math.floor(atMs))).padStart(15, '0')}-${id}`;
}

function parseMarker(index: string, key: string): { atMs: number; id: string } | null {
  const m = /^(\d{15})-([0-9a-f-]{36})$/.exec(key.slice(index.length));
  return m ? { atMs: Number(m[1]), id: m[2] as string } : null;
}

interface UploadMeta extends UploadInfo {
  tenant: string;
}

export interface StoreUploadParams {
  tenant: string;
  body: BlobSource;
  contentType: string;
  maxBytes: number;
  ttlMs: number;
  signal?: AbortSignal;
  now?: number;
  /** The tenant's upload quota (upload-quota.ts): room is reserved before the first byte. None: unlimited. */
  quota?: UploadQuota;
  /** The size the client declared (Content-Length): reserved as such; without it, the room left. */
  declaredBytes?: number;
}

/**
 * Streams an upload into blob storage and writes its metadata. With a quota, room is reserved
 * first (UploadQuotaExceededError when there is none, before anything is written). On any
 * failure (too large, over the quota, aborted, storage error) everything written so far is
 * removed, the reservation too, before the error is rethrown. The TTL runs from the moment the
 * upload started.
 */
export async function storeUpload(blobs: BlobStore, params: StoreUploadParams): Promise<UploadInfo> {
  const now = params.now ?? Date.now();
  const id = uuidv7(now);
  const expiresAtMs = now + params.ttlMs;
  const reservation: UploadReservation | null = params.quota
    ? await reserveUpload(blobs, {
        tenant: params.tenant,
        id,
        expiresAtMs,
        quota: params.quota,
        maxBytes: params.maxBytes,
        now,
        ...(params.declaredBytes !== undefined ? { declaredBytes: params.declaredBytes } : {}),
      })
    : null;
  const expireMarker = marker(EXPIRE_INDEX, expiresAtMs, id);
  try {
    await blobs.put(expireMarker, Readable.from([]));
  } catch (err) {
    await reservation?.release();
    throw err;
  }
  try {
    let stored: { size: number; sha256: string };
    try {
      stored = await blobs.put(uploadDataKey(id), params.body, {
        contentType: params.contentType,
        maxBytes: reservation ? Math.min(reservation.bytes, params.maxBytes) : params.maxBytes,
        ...(params.signal ? { signal: params.signal } : {}),
      });
    } catch (err) {
      // Cut at the tenant's remaining room rather than at the per-upload limit: the quota's refusal.
      if (err instanceof BlobTooLargeError && reservation?.roomLimited && params.quota) {
        throw new UploadQuotaExceededError(params.tenant, 'maxUploadBytes', params.quota.maxUploadBytes, 60, `this upload is larger than the ${reservation.bytes} bytes it had left`);
      }
      throw err;
    }
    const { size, sha256 } = stored;
    await reservation?.commit(size);
    const meta: UploadMeta = {
      id,
      tenant: params.tenant,
      size,
      sha256,
      contentType: params.contentType,
      createdAt: new Date(now).toISOString(),
      expiresAt: new Date(expiresAtMs).toISOString(),
    };
    await blobs.put(uploadMetaKey(id), toReadable(JSON.stringify(meta)), { contentType: 'application/json' });
    return publicInfo(meta);
  } catch (err) {
    // Best effort: whatever is left (process killed here) is removed by the sweeper via the marker.
    await blobs.deletePrefix(`uploads/${id}/`).catch(() => {});
    await blobs.delete(expireMarker).catch(() => {});
    await reservation?.release();
    throw err;
  }
}

export type UploadLookup = { status: 'ok'; info: UploadInfo } | { status: 'expired'; info: UploadInfo } | { status: 'missing' };

/** An upload of `tenant`: another tenant's upload is `missing`, exactly like an unknown id. */
export async function findUpload(blobs: BlobStore, tenant: string, id: string, now: number = Date.now()): Promise<UploadLookup> {
  if (!isUuid(id)) return { status: 'missing' };
  const meta = await readMeta(blobs, id);
  if (!meta || meta.tenant !== tenant) return { status: 'missing' };
  const info = publicInfo(meta);
  return Date.parse(meta.expiresAt) <= now ? { status: 'expired', info } : { status: 'ok', info };
}

async function readMeta(blobs: BlobStore, id: string): Promise<UploadMeta | null> {
  let text: string;
  try {
    text = await readSmall(await blobs.get(uploadMetaKey(id)));
  } catch (err) {
    if ((err as { code?: string }).code === 'BLOB_NOT_FOUND') return null;
    throw err;
  }
  const meta = parseJson(text) as UploadMeta;
  if (meta.id !== id || typeof meta.tenant !== 'string') throw new Error(`upload ${id}: metadata is damaged`);
  return meta;
}

function publicInfo(meta: UploadMeta): UploadInfo {
  return { id: meta.id, size: meta.size, sha256: meta.sha256, contentType: meta.contentType, createdAt: meta.createdAt, expiresAt: meta.expiresAt };
}

/** `ctx.uploads` for a job of `tenant`. */
export function createUploadsHandle(blobs: BlobStore, tenant: string, clock: () => number = Date.now): UploadsHandle {
  async function usable(id: string): Promise<UploadInfo> {
    const found = await findUpload(blobs, tenant, id, clock());
    if (found.status === 'missing') throw new FatalError(`upload ${String(id)} does not exist`, { code: 'UPLOAD_NOT_FOUND' });
    if (found.status === 'expired') throw new FatalError(`upload ${id} expired at ${found.info.expiresAt}`, { code: 'UPLOAD_EXPIRED' });
    return found.info;
  }
  return {
    stat: usable,
    async open(id, options = {}) {
      const info = await usable(id);
      const start = options.start ?? 0;
      if (!Number.isSafeInteger(start) || start < 0) throw new FatalError(`upload ${id}: start must be a non-negative integer`, { code: 'INVALID_RANGE' });
      if (start >= info.size) return Readable.from([]);
      return blobs.get(uploadDataKey(id), { start });
    },
  };
}

export interface UploadSweepResult {
  /** Uploads whose bytes were deleted (their metadata stays as a tombstone). */
  expired: number;
  /** Tombstones removed for good. */
  forgotten: number;
}

/**
 * Deletes the bytes of uploads past their expiry and, `tombstoneMs` later, their metadata.
 * Cheap when there is nothing to do: the index is listed in time order and the walk stops at
 * the first marker still in the future. At most `limit` uploads per call, so one sweeper tick
 * stays short; call it again while it reports work.
 */
export async function sweepExpiredUploads(
  blobs: BlobStore,
  now: number = Date.now(),
  options: { tombstoneMs?: number; limit?: number } = {},
): Promise<UploadSweepResult> {
  const limit = options.limit ?? 1000;
  const tombstoneMs = options.tombstoneMs ?? DEFAULT_UPLOAD_TOMBSTONE_MS;
  const result: UploadSweepResult = { expired: 0, forgotten: 0 };
  for await (const entry of blobs.list(EXPIRE_INDEX)) {
    const m = parseMarker(EXPIRE_INDEX, entry.key);
    if (m && m.atMs > now) break;
    if (result.expired >= limit) break;
    if (m) {
      await blobs.delete(uploadDataKey(m.id));
      await blobs.put(marker(FORGET_INDEX, now + tombstoneMs, m.id), Readable.from([]));
      result.expired++;
    }
    await blobs.delete(entry.key);
  }
  for await (const entry of blobs.list(FORGET_INDEX)) {
    const m = parseMarker(FORGET_INDEX, entry.key);
    if (m && m.atMs > now) break;
    if (result.forgotten >= limit) break;
    if (m) {
      await blobs.deletePrefix(`uploads/${m.id}/`);
      result.forgotten++;
    }
    await blobs.delete(entry.key);
  }
  return result;
}
