/**
 * The one rule for text that cannot be stored (docs/api.md, "Strings Longhaul stores"):
 * PostgreSQL's `text` cannot hold U+0000, and neither `text` nor JSON processing accepts a lone
 * UTF-16 surrogate (U+D800–U+DFFF not in a pair). Longhaul applies the same rule on every store,
 * so that a job behaves the same on SQLite and on PostgreSQL:
 *
 * - the user's data (input, metadata, idempotency key, tenant, parent id, a handler's result or
 *   checkpoint) is never changed: a value holding such a string, as a value or as a key, is
 *   refused with the path of the first one (`input.s`, `metadata["k\u0000"]`);
 * - diagnostic text (error messages and codes, progress messages and stages, webhook delivery
 *   errors) is escaped: each such code unit becomes the six characters `\u0000`, `\ud800`.
 *
 * Pure: no I/O.
 */
import { parseJson } from './json-text.js';

/** U+0000, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is exactly what this looks for
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, 'g');
/**
 * `JSON.stringify` writes every U+0000 and every lone surrogate as an escape (`\u0000`,
 * `\ud800`), so a text without one holds neither: a cheap first test before walking a value.
 * (A match may be harmless, e.g. a string holding a backslash followed by `u0000`.)
 */
const MAYBE_IN_JSON = /\\u(?:0000|[dD][89a-fA-F])/;

/** Where a value holds an unstorable string, and what it is. */
export interface UnstorableAt {
  /** `root.a[2]`, `root["odd key"]`: the path of the string, or of the object holding the key. */
  path: string;
  /** True when the object key (not a value) is the offending string. */
  inKey: boolean;
  /** `U+0000` or `a lone surrogate U+D800`. */
  what: string;
}

/** True when `text` holds U+0000 or a lone surrogate. */
export function hasUnstorable(text: string): boolean {
  return UNSTORABLE.test(text);
}

function describe(text: string): string {
  const m = UNSTORABLE.exec(text);
  const unit = m?.[0].charCodeAt(0) ?? 0;
  return unit === 0 ? 'U+0000' : `a lone surrogate U+${unit.toString(16).toUpperCase()}`;
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** `root.key` or `root["key"]` (JSON-escaped, so the path itself is plain text). */
function child(path: string, key: string): string {
  return IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/**
 * The first string (value or key) in a JSON value that no store accepts, depth first, or null.
 * `root` names the value (`input`, `result`, `checkpoint`).
 */
export function findUnstorable(value: unknown, root: string): UnstorableAt | null {
  const stack: Array<[unknown, string]> = [[value, root]];
  while (stack.length > 0) {
    const [v, path] = stack.pop() as [unknown, string];
    if (typeof v === 'string') {
      if (UNSTORABLE.test(v)) return { path, inKey: false, what: describe(v) };
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    const children: Array<[unknown, string]> = [];
    if (Array.isArray(v)) {
      v.forEach((item, i) => {
        children.push([item, `${path}[${i}]`]);
      });
    } else {
      for (const [k, item] of Object.entries(v)) {
        if (UNSTORABLE.test(k)) return { path: child(path, k), inKey: true, what: describe(k) };
        children.push([item, child(path, k)]);
      }
    }
    // Reversed onto the stack: the first child is looked at first.
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i] as [unknown, string]);
  }
  return null;
}

/**
 * The same for a value whose `JSON.stringify` text is at hand: most values are told apart by
 * one scan of that text, and only a suspect one is walked.
 */
export function findUnstorableInJson(value: unknown, json: string, root: string): UnstorableAt | null {
  return MAYBE_IN_JSON.test(json) ? findUnstorable(value, root) : null;
}

/**
 * The same for any value, as `JSON.stringify` would store it (what a store writes). Throws what
 * `JSON.stringify` throws (a cycle, a BigInt); a value with no JSON form holds nothing.
 */
export function findUnstorableInValue(value: unknown, root: string): UnstorableAt | null {
  const json = JSON.stringify(value);
  if (json === undefined || !MAYBE_IN_JSON.test(json)) return null;
  return findUnstorable(parseJson(json), root);
}

/** What is wrong at the path: `holds U+0000, which Longhaul does not store (...)`. */
export function unstorableIssue(at: UnstorableAt): string {
  return `${at.inKey ? 'has a key holding' : 'holds'} ${at.what}, which Longhaul does not store (PostgreSQL cannot); encode binary data, e.g. as base64`;
}

/** The sentence that refuses a value: `input.s holds U+0000, which Longhaul does not store (...)`. */
export function unstorableMessage(at: UnstorableAt): string {
  return `${at.path} ${unstorableIssue(at)}`;
}

/** Diagnostic text with each U+0000 and lone surrogate written as `\u0000`, `\ud800` (six characters). */
export function escapeUnstorable(text: string): string {
  if (!UNSTORABLE.test(text)) return text;
  return text.replace(UNSTORABLE_ALL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
