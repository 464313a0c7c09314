/**
 * API keys kept in the database (`longhaul keys create`): their format, how one is made, and how
 * a presented key is checked against its row. Pure but for the random source.
 *
 * A key is `lh_<id>_<secret>`: `id` is 12 characters of a-z and 2-7 (60 random bits, the row's
 * primary key, shown by `keys list`), `secret` 43 base64url characters (256 random bits). The
 * database keeps the SHA-256 of the whole key, never the key. A lookup is by id, then the
 * hashes are compared in constant time. A plain hash is enough: a slow password hash (bcrypt,
 * scrypt) defends low-entropy secrets against guessing from a stolen table, and a 256-bit
 * random secret cannot be guessed from its SHA-256 whatever the speed of the hash.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** A key kept in the database, as its row holds it. */
export interface ApiKeyRecord {
  /** The key's public part (`lh_<id>_…`), also the row's id. */
  id: string;
  tenant: string;
  /** Acts as an admin (like a tenant of LONGHAUL_ADMIN_TENANTS): other tenants' jobs, purge, metrics. */
  admin: boolean;
  /** SHA-256 of the whole key, lower-case hex. */
  hash: string;
  createdAt: number;
  /** Updated at most once a minute per key and process; null until first used. */
  lastUsedAt: number | null;
  /** Null while the key is valid. */
  revokedAt: number | null;
}

/** What every database key starts with. */
export const API_KEY_PREFIX = 'lh_';

const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
const ID = /^[a-z2-7]{12}$/;
const KEY = /^lh_([a-z2-7]{12})_[A-Za-z0-9_-]{43}$/;

/** SHA-256 of a key, lower-case hex: what the database keeps. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** A new key: the text to give its owner once, its id and its hash. */
export function generateApiKey(): { key: string; id: string; hash: string } {
  // 12 bytes, 5 bits of each (256 is a multiple of 32: each character is uniform).
  const id = Array.from(randomBytes(12), (b) => ID_ALPHABET[b & 31]).join('');
  const key = `${API_KEY_PREFIX}${id}_${randomBytes(32).toString('base64url')}`;
  return { key, id, hash: hashApiKey(key) };
}

/** The id of a presented key in the database keys' format, or null (another kind of key, or junk). */
export function apiKeyId(presented: string): string | null {
  const m = KEY.exec(presented);
  return m ? (m[1] as string) : null;
}

/** Whether an id has the format of database key ids (what `keys revoke` accepts). */
export function isApiKeyId(id: string): boolean {
  return ID.test(id);
}

/** Whether a presented key is the one whose hash a record holds; constant time in the key. */
export function apiKeyMatches(record: Pick<ApiKeyRecord, 'hash'>, presented: string): boolean {
  const stored = Buffer.from(record.hash, 'hex');
  const given = createHash('sha256').update(presented, 'utf8').digest();
  return stored.length === given.length && timingSafeEqual(stored, given);
}

/** The part of a key `keys list` shows so that its owner recognises it: the prefix and the id. */
export function apiKeyPrefix(id: string): string {
  return `${API_KEY_PREFIX}${id}_`;
}
