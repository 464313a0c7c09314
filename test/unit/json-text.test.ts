/**
 * parseJson (src/core/json-text.ts): JSON.parse without the Node 24/26 engine bug that reads an
 * object key written as one escape sequence as "\\" (nodejs/node#63785).
 *
 * On Node 24 and 26 (CI runs both) the first test fails if parseJson is plain JSON.parse; on
 * Node 22 the engine reads these keys right and the tests check the same results.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { mayHoldMisreadKey, parseJson } from '../../src/core/json-text.js';

/** Makes the engine remember a "\\" key after an "h" key (the shape the misread reuses). */
function poison(): void {
  JSON.parse('{"h":[],"\\\\":0}');
  JSON.parse('{"":{"":1,"\\\\":0},"\\\\":1}');
}

const ONE_ESCAPE_KEYS = ['"', '\n', '\u0001', '\u001f', '\b', '\f', '\r', '\t', '/'];

describe('parseJson: keys read as written', () => {
  it('a key that is one escape sequence is not read as a backslash after the engine saw a backslash key there', () => {
    poison();
    for (const k of ONE_ESCAPE_KEYS) {
      const text = JSON.stringify({ h: 1, [k]: 2 });
      assert.deepEqual(Object.keys(parseJson(text) as object), ['h', k], text);
      // The same key written as \uXXXX, and with whitespace around the colon.
      const u = `{"h":1,"\\u${k.charCodeAt(0).toString(16).padStart(4, '0')}" : 2}`;
      assert.deepEqual(Object.keys(parseJson(u) as object), ['h', k], u);
    }
    // A longer key with an escape, once a key with the same text as its escape was seen there
    // (fast-check found this one: "\u0001u0001" read as the six characters \u0001).
    JSON.parse('{"":null,"\\\\u0001":0,":":0}');
    const longer = { '': null, '\u0001u0001': 0, ':': 0 };
    assert.deepEqual(parseJson(JSON.stringify(longer)), longer);
    // In nested objects and arrays too.
    const deep = { a: [{ h: 1, '\u0001': { h: 1, '"': [1, { '': 0, '\n': 'x' }] } }] };
    assert.deepEqual(parseJson(JSON.stringify(deep)), deep);
  });

  it('round-trips random values with odd keys and strings, whatever the engine parsed before (fast-check)', () => {
    const oddText = fc
      .array(fc.constantFrom('\\', '"', '\n', '\u0001', '\u001f', '/', 'h', '', 'é', '\ud83d\ude80', '\u2028', 'u0001', '\\u0001', ':'), { maxLength: 3 })
      .map((parts) => parts.join(''));
    const value = fc.letrec((tie) => ({
      v: fc.oneof(
        { depthSize: 'small' },
        oddText,
        fc.integer(),
        fc.double({ noNaN: true, noDefaultInfinity: true }).map((x) => (x === 0 ? 0 : x)), // JSON writes -0 as 0
        fc.boolean(),
        fc.constant(null),
        fc.array(tie('v'), { maxLength: 3 }),
        fc.dictionary(oddText, tie('v'), { maxKeys: 3, noNullPrototype: true }),
      ),
    })).v;
    fc.assert(
      fc.property(fc.array(value, { minLength: 1, maxLength: 6 }), fc.boolean(), (values, pretty) => {
        // Every value is first parsed by the engine (teaching it each shape), then read back.
        for (const v of values) JSON.parse(JSON.stringify(v));
        for (const v of values) {
          const text = pretty ? JSON.stringify(v, null, 2) : JSON.stringify(v);
          assert.deepEqual(parseJson(text), v, text);
        }
      }),
      { numRuns: 3_000 },
    );
  });

  it('only texts that may hold such a key leave the engine’s parser', () => {
    assert.equal(mayHoldMisreadKey('{"a":1,"b":"x\\ny"}'), false, 'escapes in values only');
    assert.equal(mayHoldMisreadKey('{"ab\\n":1}'), true, 'an escape anywhere in a key');
    assert.equal(mayHoldMisreadKey('{"a":"x\\":"}'), false, 'an escaped quote and a colon inside a value');
    assert.equal(mayHoldMisreadKey('["\\n", ":"]'), false, 'strings in an array');
    assert.equal(mayHoldMisreadKey('{"\\n":1}'), true);
    assert.equal(mayHoldMisreadKey('{"\\u0001" :1}'), true);
    assert.equal(mayHoldMisreadKey('{"plain":1}'), false);
  });
});

describe('parseJson: the same rules as JSON.parse on either path', () => {
  // Each text once without and once with a one-escape key (the second goes through the JavaScript parser).
  const both = (body: string): [string, string] => [`{"a":${body}}`, `{"\\n":${body}}`];

  it('numbers, strings, duplicates and __proto__ read as JSON.parse reads them', () => {
    const bodies = [
      '-0',
      '1e400',
      '-1e400',
      '1.5e-10',
      '9007199254740993',
      '0.1',
      '[1,[2,[3]]]',
      '"\\ud800"',
      '"\\ud83d\\ude80"',
      '"\\u00e9\\/\\"\\\\"',
      '{"x":1,"x":2,"y":3}',
      '{"__proto__":{"polluted":true}}',
      ' { "s" : [ true , false , null ] } ',
      '""',
    ];
    for (const body of bodies) {
      for (const text of both(body)) {
        const expected: unknown = JSON.parse(text.replace('"\\n"', '"a"'));
        const got = parseJson(text) as Record<string, unknown>;
        const value = Object.values(got)[0];
        assert.deepEqual(value, Object.values(expected as object)[0], text);
        if (body === '-0') assert.ok(Object.is(value, -0), 'negative zero kept');
        if (body.includes('__proto__')) {
          assert.ok(Object.hasOwn(value as object, '__proto__'), '__proto__ is an own key');
          assert.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype changed');
        }
        if (body.includes('"x":1,"x":2')) assert.deepEqual(Object.keys(value as object), ['x', 'y'], 'the first place, the last value');
      }
    }
  });

  it('invalid texts throw a SyntaxError on either path', () => {
    const bad = ['{"a":1,}', "{'a':1}", '01', 'NaN', '"\\x"', '"a\u0001b"', '{"a" 1}', '[1', '{"a":1} x', '', 'undefined'];
    for (const body of bad) {
      for (const text of [body, `{"\\n":${body}}`]) {
        assert.throws(() => parseJson(text), SyntaxError, text);
      }
    }
  });
});

describe('every JSON text Longhaul reads goes through parseJson', () => {
  // Texts that hold no object keys (arrays of scalars written by our own SQL) or are our own files.
  const ALLOWED = new Map<string, string>([
    ['src/core/json-text.ts', 'the one place'],
    ['src/cli/main.ts', 'package.json'],
    ['src/store/sqlite/rows.ts', 'a row as an array of scalars built by json_array'],
    ['src/store/sqlite/sqlite-store.ts', 'the transition log: an array of arrays of scalars'],
    ['src/store/postgres/rows.ts', 'the transition log: an array of arrays of scalars'],
  ]);

  function files(dir: string): string[] {
    return readdirSync(dir).flatMap((name) => {
      const path = join(dir, name);
      return statSync(path).isDirectory() ? files(path) : path.endsWith('.ts') ? [path] : [];
    });
  }

  it('no JSON.parse or Response.json() elsewhere in src/', () => {
    const root = new URL('../..', import.meta.url).pathname;
    const offenders: string[] = [];
    for (const path of files(join(root, 'src'))) {
      const rel = path.slice(root.length);
      const code = readFileSync(path, 'utf8')
        .split('\n')
        .filter((line) => !/^\s*(\*|\/\/)/.test(line))
        .join('\n');
      if (/\.json\(\)/.test(code)) offenders.push(`${rel}: .json()`);
      if (/JSON\.parse\(/.test(code) && !ALLOWED.has(rel)) offenders.push(`${rel}: JSON.parse`);
    }
    assert.deepEqual(offenders, []);
  });
});
