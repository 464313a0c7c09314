/**
 * Per-tenant upload quotas (`maxUploads`, `maxUploadBytes` of the tenant quotas): what a tenant
 * keeps in blob storage, counted from a ledger in the blob store itself, so every server sharing
 * the store (S3, one mounted directory) counts the same uploads:
 *
 *   upload-quota/<hex tenant>/<expiresAt ms, 15 digits>-<uploadId>-<bytes>     empty
 *
 * An upload reserves its bytes before a byte is streamed: its `Content-Length`, or without one
 * the room the tenant has left (at most the per-upload limit), and the stream is cut there. The
 * reservation is shrunk to the real size when the upload is stored, and deleted when it fails.
 * An entry past its expiry no longer counts (the upload's bytes are gone, or about to be) and is
 * deleted by the next count of its tenant, so an entry left by a server killed mid-upload frees
 * its room when that upload would have expired.
 *
 * Exact: in one process, reservations of a tenant are taken one at a time; between processes,
 * each one writes its entry and then counts again, and withdraws when the total is over (two
 * racing processes may both withdraw, never both stay).
 */
import { Readable } from 'node:stream';
import { UploadQuotaExceededError } from '../core/errors.js';
import type { BlobStore } from './store.js';

const PREFIX = 'upload-quota/';

export interface UploadQuota {
  maxUploads: number;
  maxUploadBytes: number;
}

interface Entry {
  key: string;
  expiresAtMs: number;
  id: string;
  bytes: number;
}

const tenantPrefix = (tenant: string) => `${PREFIX}${Buffer.from(tenant, 'utf8').toString('hex')}/`;

function entryKey(tenant: string, expiresAtMs: number, id: string, bytes: number): string {
  return `${tenantPrefix(tenant)}${String(Math.max(0, Math.floor(expiresAtMs))).padStart(15, '0')}-${id}-${bytes}`;
}

function parseEntry(key: string, prefixLength: number): Entry | null {
  const m = /^(\d{15})-([0-9a-f-]{36})-(\d+)$/.exec(key.slice(prefixLength));
  return m ? { key, expiresAtMs: Number(m[1]), id: m[2] as string, bytes: Number(m[3]) } : null;
}

/** Reservations per blob store and tenant, one at a time in this process (the ledger is shared; the lock only orders this process's own). */
const locks = new WeakMap<BlobStore, Map<string, Promise<unknown>>>();

async function serially<T>(blobs: BlobStore, tenant: string, fn: () => Promise<T>): Promise<T> {
  let byTenant = locks.get(blobs);
  if (!byTenant) {
    byTenant = new Map();
    locks.set(blobs, byTenant);
  }
  const previous = byTenant.get(tenant) ?? Promise.resolve();
  const run = previous.then(fn, fn);
  const settled = run.then(
    () => undefined,
    () => undefined,
  );
  byTenant.set(tenant, settled);
  try {
    return await run;
  } finally {
    if (byTenant.get(tenant) === settled) byTenant.delete(tenant);
  }
}

/** The tenant's live entries (expired ones deleted on the way, best effort). */
async function liveEntries(blobs: BlobStore, tenant: string, now: number): Promise<Entry[]> {
  const prefix = tenantPrefix(tenant);
  const live: Entry[] = [];
  const stale: string[] = [];
  for await (const item of blobs.list(prefix)) {
    const e = parseEntry(item.key, prefix.length);
    if (e === null) continue;
    if (e.expiresAtMs <= now) stale.push(e.key);
    else live.push(e);
  }
  for (const key of stale) await blobs.delete(key).catch(() => {});
  return live;
}

/** What a tenant keeps: uploads not yet expired and their bytes (reservations of uploads under way included). */
export async function uploadUsage(blobs: BlobStore, tenant: string, now: number = Date.now()): Promise<{ uploads: number; bytes: number }> {
  const live = await liveEntries(blobs, tenant, now);
  return { uploads: live.length, bytes: live.reduce((n, e) => n + e.bytes, 0) };
}

/** Bytes kept per tenant, every tenant with a live upload (the `/metrics` gauge; one listing of the ledger). */
export async function uploadBytesByTenant(blobs: BlobStore, now: number = Date.now()): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const item of blobs.list(PREFIX)) {
    const slash = item.key.indexOf('/', PREFIX.length);
    if (slash < 0) continue;
    const e = parseEntry(item.key, slash + 1);
    if (e === null || e.expiresAtMs <= now) continue;
    const tenant = Buffer.from(item.key.slice(PREFIX.length, slash), 'hex').toString('utf8');
    out.set(tenant, (out.get(tenant) ?? 0) + e.bytes);
  }
  return out;
}

/** A reservation held while an upload streams. */
export interface UploadReservation {
  /** The most bytes the upload may bring (the stream is cut past it). */
  readonly bytes: number;
  /** Whether `bytes` is the tenant's remaining room rather than what the client declared or the per-upload limit. */
  readonly roomLimited: boolean;
  /** The upload is stored with `size` bytes: the reservation shrinks to it. */
  commit(size: number): Promise<void>;
  /** The upload failed: the reservation goes. */
  release(): Promise<void>;
}

export interface ReserveParams {
  tenant: string;
  id: string;
  expiresAtMs: number;
  quota: UploadQuota;
  /** The upload's declared size (Content-Length), if any. */
  declaredBytes?: number;
  /** The per-upload limit (LONGHAUL_MAX_UPLOAD_BYTES). */
  maxBytes: number;
  now: number;
}

/** Reserves room for one upload, or throws UploadQuotaExceededError (nothing written). */
export async function reserveUpload(blobs: BlobStore, p: ReserveParams): Promise<UploadReservation> {
  const key = await serially(blobs, p.tenant, async () => {
    const live = await liveEntries(blobs, p.tenant, p.now);
    const bytes = decide(live, p);
    const k = entryKey(p.tenant, p.expiresAtMs, p.id, bytes);
    await blobs.put(k, Readable.from([]));
    // Another server may have reserved at the same time: count again, with this entry, and
    // withdraw when the total is over (it never counts this entry twice: it may count one of theirs).
    const again = await liveEntries(blobs, p.tenant, p.now);
    try {
      decide(
        again.filter((e) => e.key !== k),
        { ...p, declaredBytes: bytes },
      );
    } catch (err) {
      await blobs.delete(k).catch(() => {});
      throw err;
    }
    return { key: k, bytes };
  });
  let current = key.key;
  return {
    bytes: key.bytes,
    roomLimited: p.declaredBytes === undefined && key.bytes < p.maxBytes,
    async commit(size: number) {
      if (size === key.bytes) return;
      // The new entry before the old one goes: a count in between sees too much, never too little.
      await serially(blobs, p.tenant, async () => {
        const next = entryKey(p.tenant, p.expiresAtMs, p.id, size);
        await blobs.put(next, Readable.from([]));
        await blobs.delete(current).catch(() => {});
        current = next;
      });
    },
    async release() {
      await blobs.delete(current).catch(() => {});
    },
  };
}

/** The bytes to reserve given the tenant's other live entries, or the refusal. */
function decide(live: readonly Entry[], p: ReserveParams): number {
  const { maxUploads, maxUploadBytes } = p.quota;
  const used = live.reduce((n, e) => n + e.bytes, 0);
  // Room frees when the tenant's oldest upload expires.
  const oldest = live.reduce((min, e) => Math.min(min, e.expiresAtMs), Number.POSITIVE_INFINITY);
  const retryAfterSeconds = Number.isFinite(oldest) ? Math.max(1, Math.ceil((oldest - p.now) / 1000)) : 60;
  if (live.length + 1 > maxUploads) {
    throw new UploadQuotaExceededError(p.tenant, 'maxUploads', maxUploads, retryAfterSeconds, `it keeps ${live.length} uploads`);
  }
  const room = maxUploadBytes - used;
  if (p.declaredBytes !== undefined) {
    if (p.declaredBytes > room) {
      throw new UploadQuotaExceededError(p.tenant, 'maxUploadBytes', maxUploadBytes, retryAfterSeconds, `it keeps ${used} bytes, and this upload declares ${p.declaredBytes}`);
    }
    return p.declaredBytes;
  }
  if (room <= 0) throw new UploadQuotaExceededError(p.tenant, 'maxUploadBytes', maxUploadBytes, retryAfterSeconds, `it keeps ${used} bytes`);
  return Math.min(room, p.maxBytes);
}
