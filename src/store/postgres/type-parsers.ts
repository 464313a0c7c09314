/**
 * The store's pool reads columns with pg's parsers, but for `integer[]`: the ordinals a worker's
 * cycle applied come back as one such array per cycle, up to a thousand values, and pg's generic
 * array parser (postgres-array) reads it character by character, about 0.4 µs a value. The
 * common text (`{1,2,3}`, what PostgreSQL writes for a one-dimensional array without NULLs) is
 * split instead; anything else (NULLs, more dimensions, bounds) goes to pg's parser.
 */
import pg from 'pg';

const INT4_ARRAY = 1007;

/** An `integer[]` in PostgreSQL's text form as numbers, NULL elements as null. */
export function parseIntegerArray(text: string): (number | null)[] {
  if (text === '{}') return [];
  if (text.charCodeAt(0) === 123 && text.charCodeAt(text.length - 1) === 125) {
    const parts = text.slice(1, -1).split(',');
    const out = new Array<number>(parts.length);
    let ok = true;
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as string;
      const n = Number(part);
      // Number('') is 0 and Number(' 1') is 1: only plain digits pass.
      if (part === '' || !Number.isInteger(n) || part.charCodeAt(0) === 32 || part.charCodeAt(part.length - 1) === 32) {
        ok = false;
        break;
      }
      out[i] = n;
    }
    if (ok) return out;
  }
  return pgParser(INT4_ARRAY, 'text')(text) as (number | null)[];
}

/** pg's own parser of a type (its typings list only the scalar built-in types). */
const pgParser = pg.types.getTypeParser as unknown as (oid: number, format?: 'text' | 'binary') => (value: string) => unknown;

const INT8 = 20;

/**
 * `bigint` as the text PostgreSQL sent, which is what pg's parser returns too: it tests the text
 * against /^\d+$/ and returns the same string either way (a worker's claimed row has about five
 * such columns).
 */
const bigintText = (text: string): string => text;

/** The pool's `types`: pg's own parsers, with `parseIntegerArray` for `integer[]` and `bigintText` for `bigint`. */
export const STORE_TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    format === 'binary' ? pgParser(oid, format) : oid === INT4_ARRAY ? parseIntegerArray : oid === INT8 ? bigintText : pgParser(oid, format)) as typeof pg.types.getTypeParser,
};
