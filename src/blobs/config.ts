/**
 * Blob storage configuration from `LONGHAUL_*` variables: which store (S3 when
 * `LONGHAUL_S3_BUCKET` is set, else the filesystem), where, and the upload limits.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseDuration } from '../core/duration.js';
import { checkOptional, loadOptional, OPTIONAL_PACKAGES } from '../core/optional-packages.js';
import { FsBlobStore } from './fs-store.js';
import type { S3BlobStoreOptions } from './s3-store.js';
import type { BlobStore } from './store.js';

type Env = Record<string, string | undefined>;

export type BlobStoreConfig = { kind: 'fs'; dir: string } | ({ kind: 's3' } & S3BlobStoreOptions);

export const DEFAULT_MAX_UPLOAD_BYTES = 1024 * 1024 * 1024;
export const DEFAULT_UPLOAD_TTL_MS = 24 * 3_600_000;

/**
 * The filesystem default lives next to the database: `./longhaul.db` → `./longhaul.db.blobs/`.
 * With PostgreSQL there is no database file, so it is `./longhaul.blobs` in the working
 * directory (several machines need S3 or one shared directory); with an in-memory SQLite
 * database it is null, meaning "a fresh temporary directory" (see openBlobStore).
 */
export function resolveBlobStoreConfig({ env = process.env, database }: { env?: Env; database: string }): BlobStoreConfig | { kind: 'fs'; dir: null } {
  const bucket = nonEmpty(env.LONGHAUL_S3_BUCKET);
  if (bucket) {
    const forcePathStyle = nonEmpty(env.LONGHAUL_S3_FORCE_PATH_STYLE);
    if (forcePathStyle && !/^(true|false|1|0)$/i.test(forcePathStyle))
      throw new Error(`LONGHAUL_S3_FORCE_PATH_STYLE must be true or false, got "${forcePathStyle}"`);
    const accessKeyId = nonEmpty(env.LONGHAUL_S3_ACCESS_KEY_ID);
    const secretAccessKey = nonEmpty(env.LONGHAUL_S3_SECRET_ACCESS_KEY);
    if (Boolean(accessKeyId) !== Boolean(secretAccessKey))
      throw new Error('set both LONGHAUL_S3_ACCESS_KEY_ID and LONGHAUL_S3_SECRET_ACCESS_KEY, or neither (to use the default AWS credential chain)');
    const endpoint = nonEmpty(env.LONGHAUL_S3_ENDPOINT);
    if (endpoint && !/^https?:\/\//.test(endpoint)) throw new Error(`LONGHAUL_S3_ENDPOINT must be an http(s) URL, got "${endpoint}"`);
    let prefix = nonEmpty(env.LONGHAUL_S3_PREFIX) ?? '';
    if (prefix !== '' && !prefix.endsWith('/')) prefix += '/';
    return {
      kind: 's3',
      bucket,
      ...(nonEmpty(env.LONGHAUL_S3_REGION) ? { region: nonEmpty(env.LONGHAUL_S3_REGION) as string } : {}),
      ...(endpoint ? { endpoint } : {}),
      ...(accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey } : {}),
      forcePathStyle: forcePathStyle ? /^(true|1)$/i.test(forcePathStyle) : false,
      prefix,
    };
  }
  const dir = nonEmpty(env.LONGHAUL_BLOB_DIR);
  if (dir) return { kind: 'fs', dir: resolve(dir) };
  if (/^postgres(ql)?:\/\//.test(database)) return { kind: 'fs', dir: resolve('longhaul.blobs') };
  if (database === ':memory:' || database === '') return { kind: 'fs', dir: null };
  return { kind: 'fs', dir: resolve(`${database}.blobs`) };
}

export async function openBlobStore(config: BlobStoreConfig | { kind: 'fs'; dir: null }): Promise<BlobStore> {
  if (config.kind === 's3') {
    const { kind: _kind, ...options } = config;
    // Loaded on demand: the AWS SDK is large, an optional package, and filesystem deployments never need it.
    const { S3BlobStore } = await loadOptional(OPTIONAL_PACKAGES.s3, () => import('./s3-store.js'));
    return new S3BlobStore(options);
  }
  return FsBlobStore.open(config.dir ?? (await mkdtemp(join(tmpdir(), 'longhaul-blobs-'))));
}

/**
 * When the environment configures S3 (`LONGHAUL_S3_BUCKET`), checks that the AWS SDK's packages
 * are installed, without loading them: MissingPackageError if not. Blob storage opens on first
 * use; an instance calls this when it opens, so that the missing package is reported then.
 */
export function checkBlobStorePackages(env: Env = process.env): void {
  if (nonEmpty(env.LONGHAUL_S3_BUCKET)) checkOptional(OPTIONAL_PACKAGES.s3, (specifier) => import.meta.resolve(specifier));
}

export interface UploadLimits {
  maxUploadBytes: number;
  uploadTtlMs: number;
}

/** `LONGHAUL_MAX_UPLOAD_BYTES` (default 1 GiB) and `LONGHAUL_UPLOAD_TTL_MS` (default 24 h; `30m`, `2d` also accepted). */
export function resolveUploadLimits(env: Env = process.env): UploadLimits {
  const maxRaw = nonEmpty(env.LONGHAUL_MAX_UPLOAD_BYTES);
  let maxUploadBytes = DEFAULT_MAX_UPLOAD_BYTES;
  if (maxRaw) {
    maxUploadBytes = Number(maxRaw);
    if (!Number.isSafeInteger(maxUploadBytes) || maxUploadBytes < 1) throw new Error(`LONGHAUL_MAX_UPLOAD_BYTES must be a positive integer, got "${maxRaw}"`);
  }
  const ttlRaw = nonEmpty(env.LONGHAUL_UPLOAD_TTL_MS);
  let uploadTtlMs = DEFAULT_UPLOAD_TTL_MS;
  if (ttlRaw) {
    try {
      uploadTtlMs = parseDuration(ttlRaw);
    } catch {
      throw new Error(`LONGHAUL_UPLOAD_TTL_MS must be a duration in ms (or e.g. 30m, 24h), got "${ttlRaw}"`);
    }
    if (uploadTtlMs < 1000) throw new Error(`LONGHAUL_UPLOAD_TTL_MS must be at least 1000 ms, got "${ttlRaw}"`);
  }
  return { maxUploadBytes, uploadTtlMs };
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}
