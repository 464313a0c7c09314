/**
 * Reading JSON text: `parseJson` is `JSON.parse` without the engine bug that misreads keys.
 *
 * V8's JSON.parse in Node 24 and 26 (not 22) can misread an object key written with an escape
 * sequence once the process has parsed an object with the same earlier keys: `"\n"`, `"\""` or
 * `"\u0001"` come back as `"\\"`, and `"\u0001u0001"` as the six characters `\u0001`, when such a
 * key was seen at that place before (the engine reuses the earlier object's layout for the key;
 * nodejs/node#63785). Nothing reports it: a job's metadata `{"\u0001": true}` read back from the
 * store simply holds `{"\\": true}`, and the next write stores the corruption. Longhaul's
 * model-based test found it (test/contract/store-model.test.ts).
 *
 * Keys written without an escape are read right, and so are escapes in values; a text with no
 * escaped key is parsed by JSON.parse. A text with one is parsed by lossless-json, a parser
 * written in JavaScript that builds objects by assignment, with JSON.parse's rules: numbers as
 * `Number`, and the last of duplicate keys wins.
 *
 * Pure: no I/O.
 */
import { parse as parseInJavaScript } from 'lossless-json';

const JSON_RULES = {
  parseNumber: Number,
  onDuplicateKey: ({ newValue }: { newValue: unknown }) => newValue,
};

const QUOTE = 34;
const BACKSLASH = 92;
const COLON = 58;

/**
 * True when `text` holds an object key with an escape sequence (see above). One pass over the
 * text, run only when it holds a backslash: a regular expression for the same question would
 * backtrack on texts full of escaped quotes.
 */
export function mayHoldMisreadKey(text: string): boolean {
  if (!text.includes('\\')) return false;
  const n = text.length;
  let i = 0;
  while (i < n) {
    i = text.indexOf('"', i);
    if (i < 0) return false;
    // A string from i: find its end, noting whether it holds an escape.
    let escaped = false;
    i++;
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === BACKSLASH) {
        escaped = true;
        i += 2;
      } else if (c === QUOTE) {
        break;
      } else {
        i++;
      }
    }
    i++;
    if (!escaped) continue;
    // It is a key when a colon follows (after JSON whitespace).
    let j = i;
    while (j < n && (text.charCodeAt(j) === 32 || text.charCodeAt(j) === 9 || text.charCodeAt(j) === 10 || text.charCodeAt(j) === 13)) j++;
    if (text.charCodeAt(j) === COLON) return true;
  }
  return false;
}

/** `JSON.parse(text)`, with every key read as written. Throws a SyntaxError on invalid JSON. */
export function parseJson(text: string): unknown {
  if (!mayHoldMisreadKey(text)) return JSON.parse(text);
  return parseInJavaScript(text, undefined, JSON_RULES);
}
