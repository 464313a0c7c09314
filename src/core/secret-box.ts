/**
 * Secrets at rest: values the store keeps that must not be readable from the database alone
 * (webhook secrets), sealed with AES-256-GCM under a 32-byte key the server holds
 * (`LONGHAUL_SECRETS_KEY`, or a key file beside a SQLite database).
 *
 *   v1:<base64url of 12-byte IV | ciphertext | 16-byte tag>
 *
 * The additional data binds a sealed value to where it is kept (e.g. the job's id), so a row
 * copied onto another job does not open. Values without the `v1:` prefix are stored before
 * sealing existed and are returned as they are (webhook secrets start with `whsec_`).
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

export const SEALED_PREFIX = 'v1:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A key as written: 64 hex digits, or the base64 (or base64url) of 32 bytes; refused by `where` otherwise. */
export function parseSecretsKey(raw: string, where = 'LONGHAUL_SECRETS_KEY'): Buffer {
  const text = raw.trim();
  let key: Buffer | null = null;
  if (/^[0-9a-fA-F]{64}$/.test(text)) key = Buffer.from(text, 'hex');
  else if (/^[A-Za-z0-9+/_-]{43}={0,1}$/.test(text)) key = Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  if (key === null || key.length !== 32) {
    throw new Error(`${where} must be 32 bytes written as 64 hex digits or in base64 (e.g. \`openssl rand -base64 32\`)`);
  }
  return key;
}

/** Seals `plain` under `key`; `context` must be given again to open it. */
export function sealSecret(key: Buffer, plain: string, context: string): string {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(context, 'utf8'));
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return SEALED_PREFIX + Buffer.concat([iv, body, cipher.getAuthTag()]).toString('base64url');
}

/** Whether a stored value is sealed (else it predates sealing and is plain text). */
export function isSealed(stored: string): boolean {
  return stored.startsWith(SEALED_PREFIX);
}

/** Opens a sealed value; throws (never echoing the value) when the key or the context is not the one it was sealed with. */
export function openSecret(key: Buffer, stored: string, context: string): string {
  const raw = Buffer.from(stored.slice(SEALED_PREFIX.length), 'base64url');
  if (raw.length < IV_BYTES + TAG_BYTES) throw new Error('a sealed secret is damaged (too short)');
  const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, IV_BYTES));
  decipher.setAAD(Buffer.from(context, 'utf8'));
  decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(raw.subarray(IV_BYTES, raw.length - TAG_BYTES)), decipher.final()]).toString('utf8');
  } catch {
    throw new Error('a sealed secret does not open with this key (was LONGHAUL_SECRETS_KEY changed, or the key file replaced?)');
  }
}

/**
 * Seals and opens with a key resolved once, on first need: a process that never stores or reads
 * a secret never needs the key (with PostgreSQL, where it must be configured).
 */
export class SecretBox {
  private key: Promise<Buffer> | null = null;
  constructor(private readonly resolveKey: () => Promise<Buffer>) {}

  private keyOnce(): Promise<Buffer> {
    this.key ??= this.resolveKey().catch((err) => {
      this.key = null; // tried again next time (a key file on a disk that was full, a setting fixed)
      throw err;
    });
    return this.key;
  }

  async seal(plain: string, context: string): Promise<string> {
    return sealSecret(await this.keyOnce(), plain, context);
  }

  async open(stored: string, context: string): Promise<string> {
    return isSealed(stored) ? openSecret(await this.keyOnce(), stored, context) : stored;
  }
}
