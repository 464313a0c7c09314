/**
 * Signed, expiring URLs for result files: `<path>?exp=<unix seconds>&sig=<base64url HMAC-SHA256>`
 * where the HMAC covers the path and the expiry. Anyone holding the URL may download until
 * `exp`; changing any character of the path or of `exp` invalidates the signature.
 *
 * The secret comes from `LONGHAUL_URL_SIGNING_SECRET`, or (SQLite) is generated once and kept in
 * a file next to the database so restarts keep old URLs valid. Several API servers must share
 * one secret, so with PostgreSQL the variable is required.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { link, mkdir, open, readFile, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { parseDuration } from '../core/duration.js';

export const DEFAULT_URL_TTL_MS = 60 * 60_000;

export type SignatureCheck = 'valid' | 'invalid' | 'expired';

export interface SignOptions {
  /** Lifetime from `now`. Default: the signer's (1 hour). */
  ttlMs?: number;
  /** Unix ms; the URL never outlives this (e.g. the job's expiresAt). */
  notAfter?: number | null;
  now?: number;
}

const MIN_SECRET_CHARS = 32;

export class UrlSigner {
  private readonly key: Buffer;

  constructor(
    secret: string,
    readonly defaultTtlMs: number = DEFAULT_URL_TTL_MS,
  ) {
    if (typeof secret !== 'string' || secret.length < MIN_SECRET_CHARS) throw new Error(`URL signing secret must be at least ${MIN_SECRET_CHARS} characters`);
    if (!Number.isInteger(defaultTtlMs) || defaultTtlMs < 1000) throw new Error('signed URL lifetime must be at least 1000 ms');
    // A key of its own, so the configured secret could serve other purposes without cross-use.
    this.key = createHmac('sha256', secret).update('longhaul signed url v1').digest();
  }

  /** `path?exp=...&sig=...`; `path` must be the exact (already percent-encoded) path clients will request. */
  sign(path: string, options: SignOptions = {}): string {
    assertPath(path);
    const now = options.now ?? Date.now();
    let expiresAtMs = now + (options.ttlMs ?? this.defaultTtlMs);
    if (options.notAfter !== undefined && options.notAfter !== null) expiresAtMs = Math.min(expiresAtMs, options.notAfter);
    const exp = Math.floor(expiresAtMs / 1000);
    return `${path}?exp=${exp}&sig=${this.mac(path, exp).toString('base64url')}`;
  }

  /** Tampered or missing parameters are `invalid` (403); a genuine URL past its expiry is `expired` (410). */
  verify(path: string, exp: unknown, sig: unknown, now: number = Date.now()): SignatureCheck {
    if (typeof exp !== 'string' || !/^\d{1,12}$/.test(exp) || typeof sig !== 'string' || !/^[A-Za-z0-9_-]{43}$/.test(sig)) return 'invalid';
    const expected = this.mac(path, Number(exp));
    const given = Buffer.from(sig, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return 'invalid';
    return Number(exp) * 1000 <= now ? 'expired' : 'valid';
  }

  private mac(path: string, exp: number): Buffer {
    return createHmac('sha256', this.key).update(`${path}\n${exp}`).digest();
  }
}

function assertPath(path: string): void {
  if (!path.startsWith('/') || path.includes('?') || path.includes('#')) throw new Error(`cannot sign "${path}": expected an absolute path without query`);
}

/** `LONGHAUL_RESULT_URL_TTL_MS` (ms, or e.g. `15m`, `2h`): lifetime of signed result URLs, default 1 hour. */
export function resolveUrlTtlMs(env: Record<string, string | undefined> = process.env): number {
  const raw = env.LONGHAUL_RESULT_URL_TTL_MS?.trim();
  if (!raw) return DEFAULT_URL_TTL_MS;
  let ms: number;
  try {
    ms = parseDuration(raw);
  } catch {
    throw new Error(`LONGHAUL_RESULT_URL_TTL_MS must be a duration in ms (or e.g. 15m, 2h), got "${raw}"`);
  }
  if (ms < 1000 || ms > 7 * 86_400_000) throw new Error(`LONGHAUL_RESULT_URL_TTL_MS must be between 1 s and 7 days, got "${raw}"`);
  return ms;
}

export interface SigningSecretOptions {
  env?: Record<string, string | undefined>;
  /** The database: a SQLite path (the secret file goes next to it) or a postgres:// URL. */
  database: string;
}

/**
 * `LONGHAUL_URL_SIGNING_SECRET` when set; otherwise, for a SQLite file, the contents of
 * `<database>.url-signing-secret`, created on first use (mode 0600, create-if-absent is atomic so
 * processes starting together agree). An in-memory SQLite database gets a per-process secret.
 */
export async function resolveUrlSigningSecret({ env = process.env, database }: SigningSecretOptions): Promise<string> {
  const configured = env.LONGHAUL_URL_SIGNING_SECRET;
  if (configured !== undefined && configured.trim() !== '') {
    if (configured.length < MIN_SECRET_CHARS) throw new Error(`LONGHAUL_URL_SIGNING_SECRET must be at least ${MIN_SECRET_CHARS} characters`);
    return configured;
  }
  if (/^postgres(ql)?:\/\//.test(database)) {
    throw new Error(
      'LONGHAUL_URL_SIGNING_SECRET must be set with a PostgreSQL database: every API server signs and checks result URLs, so they need one shared secret (e.g. `openssl rand -base64 48`)',
    );
  }
  if (database === ':memory:' || database === '') return randomBytes(32).toString('base64url');
  return loadOrCreateSecretFile(`${database}.url-signing-secret`);
}

/** Reads the secret file, creating it first if absent; concurrent creators all end up with the winner's secret. */
export async function loadOrCreateSecretFile(path: string): Promise<string> {
  const existing = await readSecret(path);
  if (existing !== null) return existing;
  await mkdir(dirname(path), { recursive: true });
  const temp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  const handle = await open(temp, 'wx', 0o600);
  try {
    await handle.writeFile(`${randomBytes(32).toString('base64url')}\n`);
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    // link() fails with EEXIST when another process won: then its secret is the one.
    await link(temp, path).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
  } finally {
    await unlink(temp).catch(() => {});
  }
  const secret = await readSecret(path);
  if (secret === null) throw new Error(`could not create the secret file ${path}`);
  return secret;
}

async function readSecret(path: string): Promise<string | null> {
  try {
    const text = (await readFile(path, 'utf8')).trim();
    if (text.length < MIN_SECRET_CHARS) throw new Error(`the secret file ${path} is damaged (too short); delete it to generate a new one`);
    return text;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
