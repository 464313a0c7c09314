/**
 * Reading JSON text: `parseJson` is `JSON.parse` without the engine bug that misreads keys.
 *
 * V8's JSON.parse in Node 24 and 26 (not 22) can read an object key written as one escape
 * sequence (`"\n"`, `"\""`, `"\u0001"`) as a backslash, `"\\"`, once the process has parsed an
 * object with the same keys before it and a `"\\"` key at that place (the engine reuses the
 * earlier object's layout for the key; nodejs/node#63785). Nothing reports it: a job's metadata
 * `{"\u0001": true}` read back from the store simply holds `{"\\": true}`, and the next write
 * stores the corruption. Longhaul's model-based test found it (test/contract/store-model.test.ts).
 *
 * Only such keys are misread; a text holding no key of that form is parsed by JSON.parse. A
 * text that may hold one (the test can also match inside a string value: that only costs time)
 * is parsed by lossless-json, a parser written in JavaScript that builds objects by assignment,
 * with JSON.parse's rules: numbers as `Number`, and the last of duplicate keys wins.
 *
 * Pure: no I/O.
 */
import { parse as parseInJavaScript } from 'lossless-json';

/** A quoted key that is exactly one escape sequence, followed by its colon. */
const ONE_ESCAPE_KEY = /"\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])"[ \t\n\r]*:/;

const JSON_RULES = {
  parseNumber: Number,
  onDuplicateKey: ({ newValue }: { newValue: unknown }) => newValue,
};

/** True when `text` may hold an object key that JSON.parse could misread (see above). */
export function mayHoldMisreadKey(text: string): boolean {
  return text.includes('\\') && ONE_ESCAPE_KEY.test(text);
}

/** `JSON.parse(text)`, with every key read as written. Throws a SyntaxError on invalid JSON. */
export function parseJson(text: string): unknown {
  if (!mayHoldMisreadKey(text)) return JSON.parse(text);
  return parseInJavaScript(text, undefined, JSON_RULES);
}
