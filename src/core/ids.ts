/**
 * UUIDv7 ids (RFC 9562): 48 bits of Unix milliseconds, then randomness. Ids made in one
 * process are strictly increasing even within a millisecond (a 12-bit counter in rand_a,
 * method 1 of the RFC), so they double as a stable sort key and list cursor. Kept over the
 * `uuid` package: about 4 times as fast, and monotonic with an injected clock's time, which
 * `uuid`'s v7 is not (bench/peers/uuidv7.ts, bench/RESULTS.md).
 */
import { getRandomValues } from 'node:crypto';

let lastMs = -1;
let counter = 0;
const pool = new Uint8Array(10 * 256);
let poolOffset = pool.length;

function randomBytes10(): Uint8Array {
  if (poolOffset >= pool.length) {
    getRandomValues(pool);
    poolOffset = 0;
  }
  const out = pool.subarray(poolOffset, poolOffset + 10);
  poolOffset += 10;
  return out;
}

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

export function uuidv7(now: number = Date.now()): string {
  const rnd = randomBytes10();
  let ms = now;
  if (ms <= lastMs) {
    ms = lastMs;
    counter++;
    if (counter > 0xfff) {
      // Counter exhausted within one millisecond: borrow the next millisecond.
      ms = ++lastMs;
      counter = (rnd[0] ?? 0) & 0x3f;
    }
  } else {
    lastMs = ms;
    counter = (((rnd[0] ?? 0) << 4) | ((rnd[1] ?? 0) >> 4)) & 0x3ff; // leave headroom for increments
  }
  const b = new Uint8Array(16);
  b[0] = Math.floor(ms / 2 ** 40) & 0xff;
  b[1] = Math.floor(ms / 2 ** 32) & 0xff;
  b[2] = (ms >>> 24) & 0xff;
  b[3] = (ms >>> 16) & 0xff;
  b[4] = (ms >>> 8) & 0xff;
  b[5] = ms & 0xff;
  b[6] = 0x70 | ((counter >> 8) & 0x0f);
  b[7] = counter & 0xff;
  b[8] = 0x80 | ((rnd[2] ?? 0) & 0x3f);
  for (let i = 9; i < 16; i++) b[i] = rnd[i - 6] ?? 0;
  let s = '';
  for (let i = 0; i < 16; i++) {
    s += HEX[b[i] ?? 0];
    if (i === 3 || i === 5 || i === 7 || i === 9) s += '-';
  }
  return s;
}

/**
 * A UUID in its canonical text (36 characters, lower-case hex, dashes at 8, 13, 18 and 23). A
 * loop over the characters, not a regular expression: the worker checks every job it ends
 * (postgres/transitions.ts), and the loop costs a fraction of the match.
 */
export function isUuid(value: unknown): value is string {
  if (typeof value !== 'string' || value.length !== 36) return false;
  for (let i = 0; i < 36; i++) {
    const c = value.charCodeAt(i);
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== 45) return false;
    } else if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 102))) return false;
  }
  return true;
}

/**
 * Ids in code-unit order: for canonical (lower-case) UUIDs the order of PostgreSQL's uuid and of
 * SQLite's text, in which stores lock rows and sort the queue's ties.
 */
export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The millisecond timestamp a UUIDv7 carries. */
export function uuidv7Time(id: string): number {
  return Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
}

/** The smallest UUIDv7 of millisecond `ms`: ids ≥ it were made at or after `ms`. */
export function uuidv7Floor(ms: number): string {
  const hex = Math.max(0, Math.floor(ms)).toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7000-8000-000000000000`;
}
