/**
 * Unit tests for the rule on strings no store can hold (src/core/storable.ts), the
 * classification of store errors (src/core/store-errors.ts), the retry of handler-side store
 * writes (src/worker/store-retry.ts), the group commit's split of a refused batch
 * (src/store/batcher.ts) and the worker's job-by-job write of a refused cycle
 * (src/worker/outcome-isolation.ts). The same rule end to end, on both stores:
 * test/integration/unstorable.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import pino from 'pino';
import { classifyError, FatalError } from '../../src/core/errors.js';
import { EMPTY_PROGRESS, mergeProgress } from '../../src/core/progress.js';
import { escapeUnstorable, findUnstorable, findUnstorableInValue, hasUnstorable, unstorableMessage } from '../../src/core/storable.js';
import { isTransientStoreError } from '../../src/core/store-errors.js';
import { Batcher } from '../../src/store/batcher.js';
import type { Store, TransitionParams } from '../../src/store/store.js';
import { storedResult } from '../../src/core/json-copy.js';
import { OUTCOME_REFUSED, writeEachAlone } from '../../src/worker/outcome-isolation.js';
import { withStoreRetry } from '../../src/worker/store-retry.js';

/** Independent of the implementation: UTF-8 cannot carry a lone surrogate, so a round trip changes it. */
const oracleBad = (s: string) => s.includes('\u0000') || Buffer.from(s, 'utf8').toString('utf8') !== s;

const quiet = pino({ level: 'silent' });

/** A pino logger whose lines land in `lines` (parsed). */
function capture(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { log, lines };
}

describe('strings no store can hold', () => {
  it('finds U+0000 and lone surrogates, in values and keys, with their path', () => {
    assert.equal(findUnstorable({ s: 'ok', n: 1, list: ['a', 'b'] }, 'input'), null);
    assert.equal(findUnstorable('pair 🚀 \ud83d\ude80 text \\u0000', 'input'), null, 'a surrogate pair and an escape written as text are fine');
    assert.deepEqual(findUnstorable({ s: 'a\u0000b' }, 'input'), { path: 'input.s', inKey: false, what: 'U+0000' });
    assert.deepEqual(findUnstorable({ list: [1, { t: '\ud800' }] }, 'result'), { path: 'result.list[1].t', inKey: false, what: 'a lone surrogate U+D800' });
    assert.deepEqual(findUnstorable({ 'k\u0000': 1 }, 'metadata'), { path: 'metadata["k\\u0000"]', inKey: true, what: 'U+0000' });
    assert.deepEqual(findUnstorable({ 'odd key': { '\udc00': 2 } }, 'metadata'), {
      path: 'metadata["odd key"]["\\udc00"]',
      inKey: true,
      what: 'a lone surrogate U+DC00',
    });
    assert.deepEqual(findUnstorable('x\udfff', 'idempotencyKey'), { path: 'idempotencyKey', inKey: false, what: 'a lone surrogate U+DFFF' });
    // The first one in document order.
    assert.equal(findUnstorable({ a: ['ok', 'b\u0000'], b: '\ud800' }, 'input')?.path, 'input.a[1]');
    assert.match(unstorableMessage({ path: 'input.s', inKey: false, what: 'U+0000' }), /^input\.s holds U\+0000, which Longhaul does not store/);
    assert.match(unstorableMessage({ path: 'metadata["k"]', inKey: true, what: 'U+0000' }), /^metadata\["k"\] has a key holding U\+0000/);
  });

  it('agrees with an independent check on random strings and values', () => {
    const unit = fc.oneof(
      fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff', '\ud83d\ude80', 'a', 'é', '\\', 'u0000', '\uffff', '\u2028'),
      fc.string({ unit: 'binary', maxLength: 3 }),
    );
    const str = fc.array(unit, { maxLength: 6 }).map((parts) => parts.join(''));
    fc.assert(
      fc.property(str, (s) => {
        assert.equal(hasUnstorable(s), oracleBad(s), JSON.stringify(s));
        const escaped = escapeUnstorable(s);
        assert.equal(oracleBad(escaped), false, 'escaped text is storable');
        if (!oracleBad(s)) assert.equal(escaped, s, 'storable text is not changed');
      }),
      { numRuns: 2000 },
    );
    const json = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: 'small' }, str, fc.integer(), fc.constant(null), fc.array(tie('value'), { maxLength: 3 }), fc.dictionary(str, tie('value'), { maxKeys: 3 })),
    })).value;
    fc.assert(
      fc.property(json, (v) => {
        const strings: string[] = [];
        const walk = (x: unknown): void => {
          if (typeof x === 'string') strings.push(x);
          else if (Array.isArray(x)) x.forEach(walk);
          else if (x && typeof x === 'object') {
            for (const [k, c] of Object.entries(x)) {
              strings.push(k);
              walk(c);
            }
          }
        };
        walk(v);
        const bad = strings.some(oracleBad);
        assert.equal(findUnstorable(v, 'v') !== null, bad);
        assert.equal(findUnstorableInValue(v, 'v') !== null, bad, 'the JSON-text shortcut agrees');
      }),
      { numRuns: 1000 },
    );
  });

  it('escapes diagnostic text: error messages and codes, progress stages and messages', () => {
    assert.equal(escapeUnstorable('bad\u0000thing \ud800 🚀'), 'bad\\u0000thing \\ud800 🚀');
    const thrown = classifyError(Object.assign(new Error('bad\u0000thing'), { code: 'E\ud800' }));
    assert.deepEqual(thrown.error, { message: 'bad\\u0000thing', code: 'E\\ud800', retryable: true });
    assert.equal(classifyError(new FatalError('x\u0000', { code: 'C\u0000' })).error.message, 'x\\u0000');
    assert.equal(classifyError('thrown \u0000 string').error.message, 'thrown \\u0000 string');
    assert.equal(classifyError({ weird: '\ud800' }).error.message, '{"weird":"\\ud800"}', 'a non-error is written as JSON (which escapes it)');
    const p = mergeProgress(EMPTY_PROGRESS, { stage: 's\u0000', message: 'm\udc00' }, 0);
    assert.equal(p.stage, 's\\u0000');
    assert.equal(p.message, 'm\\udc00');
    assert.equal(mergeProgress(p, { percent: 5 }, 1).stage, 's\\u0000', 'kept as escaped');
  });

  it("refuses a handler's result that holds one, naming the path; copies every other result as JSON", () => {
    assert.deepEqual(storedResult({ s: 'fine', d: new Date(0) }), { ok: true, value: { s: 'fine', d: '1970-01-01T00:00:00.000Z' } });
    assert.deepEqual(storedResult(undefined), { ok: true, value: null });
    const bad = storedResult({ rows: [{ name: 'a\u0000' }] });
    assert.equal(bad.ok, false);
    assert.equal(!bad.ok && bad.error.code, 'UNSTORABLE_RESULT');
    assert.match(!bad.ok ? bad.error.message : '', /^result\.rows\[0\]\.name holds U\+0000/);
    assert.equal(!bad.ok && bad.error.retryable, false);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const notJson = storedResult(cyclic);
    assert.equal(!notJson.ok && notJson.error.code, 'RESULT_NOT_SERIALIZABLE');
  });
});

describe('store errors: passing or refused', () => {
  it('tells outages from refusals', () => {
    const e = (code: string, message = 'x') => Object.assign(new Error(message), { code });
    // What node:sqlite throws: SQLite's extended result code as `errcode`.
    const sqlite = (errcode: number, message: string) => Object.assign(new Error(message), { code: 'ERR_SQLITE_ERROR', errcode, errstr: message });
    for (const err of [
      e('ECONNREFUSED'),
      e('ECONNRESET'),
      e('57P01', 'terminating connection due to administrator command'),
      e('57P03', 'the database system is starting up'),
      e('08006'),
      e('53300'),
      e('40001'),
      e('40P01'),
      sqlite(5, 'database is locked'),
      sqlite(517, 'database is locked'), // SQLITE_BUSY_SNAPSHOT
      new Error('Connection terminated unexpectedly'),
      new Error('timeout exceeded when trying to connect'),
      Object.assign(new AggregateError([e('ECONNREFUSED'), e('ECONNREFUSED')], 'connect failed'), {}),
    ]) {
      assert.equal(isTransientStoreError(err), true, `${(err as { code?: string }).code ?? ''} ${err.message}`);
    }
    for (const err of [
      e('22P05', 'unsupported Unicode escape sequence'),
      e('22021', 'invalid byte sequence for encoding "UTF8": 0x00'),
      e('22P02', 'invalid input syntax for type json'),
      e('23505', 'duplicate key'),
      e('08P01', 'protocol violation'),
      sqlite(18, 'string or blob too big'),
      sqlite(2067, 'UNIQUE constraint failed: t.x'),
      new TypeError('cannot read properties of undefined'),
      new Error('Cannot use a pool after calling end on the pool'),
      'a string',
      null,
    ]) {
      assert.equal(isTransientStoreError(err), false, String((err as Error | null)?.message ?? err));
    }
  });
});

describe('handler-side store writes through an outage', () => {
  const outage = () => Object.assign(new Error('Connection terminated unexpectedly'), {});
  const fields = { jobId: 'j1', type: 't', attempt: 1, tenant: 'default' };

  it('retries passing errors with growing delays, logs the first retry and the end (not each), and returns the write’s answer', async () => {
    const { log, lines } = capture();
    let calls = 0;
    const delays: number[] = [];
    const out = await withStoreRetry(
      async () => {
        calls++;
        if (calls <= 4) throw outage();
        return 'saved';
      },
      { what: 'checkpoint', log, fields, budgetMs: 60_000, sleep: async (ms) => void delays.push(ms), random: () => 1 },
    );
    assert.equal(out, 'saved');
    assert.equal(calls, 5);
    assert.deepEqual(delays, [50, 100, 200, 400]);
    const retries = lines.filter((l) => l.msg === 'store write (checkpoint) failed; retrying');
    assert.deepEqual(
      retries.map((l) => [l.jobId, l.type, l.attempt, l.tenant, l.retry, l.delayMs]),
      [['j1', 't', 1, 'default', 1, 50]],
      'one line when the retries start, not one per retry',
    );
    assert.ok(lines.some((l) => l.msg === 'store write (checkpoint) succeeded after retrying' && l.retries === 4 && l.jobId === 'j1'));
    assert.equal(lines.length, 2);
  });

  it('never retries a refused write, and gives up when the budget is spent or the lease is gone', async () => {
    let calls = 0;
    const refused = Object.assign(new Error('unsupported Unicode escape sequence'), { code: '22P05' });
    await assert.rejects(
      withStoreRetry(
        async () => {
          calls++;
          throw refused;
        },
        { what: 'checkpoint', log: quiet, fields, budgetMs: 60_000, sleep: async () => {} },
      ),
      refused,
    );
    assert.equal(calls, 1);

    let now = 0;
    calls = 0;
    const { log, lines } = capture();
    await assert.rejects(
      withStoreRetry(
        async () => {
          calls++;
          throw outage();
        },
        {
          what: 'progress',
          log,
          fields,
          budgetMs: 1_000,
          clock: () => now,
          sleep: async (ms) => {
            now += ms;
          },
          random: () => 1,
        },
      ),
      /Connection terminated/,
    );
    // 50 + 100 + 200 + 400 = 750 ms slept; the next (800) would pass the 1 s budget.
    assert.equal(calls, 5);
    assert.ok(lines.some((l) => l.msg === 'store write (progress) failed; retries exhausted'));

    calls = 0;
    await assert.rejects(
      withStoreRetry(
        async () => {
          calls++;
          throw outage();
        },
        { what: 'checkpoint', log: quiet, fields, budgetMs: 60_000, stopped: () => calls >= 2, sleep: async () => {} },
      ),
    );
    assert.equal(calls, 2, 'stops once told the lease is gone');
  });
});

describe('one write refused for its data fails only its own caller', () => {
  it('the group commit writes a refused batch item by item: only the refused item rejects', async () => {
    const writes: number[][] = [];
    const batcher = new Batcher<number, string>(async (items) => {
      writes.push(items);
      if (items.includes(13)) throw Object.assign(new Error('refused 13'), { code: '22P05' });
      return items.map((i) => `ok ${i}`);
    });
    const results = await Promise.allSettled([1, 2, 13, 4].map((i) => batcher.add(i)));
    assert.deepEqual(
      results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message)),
      ['ok 1', 'ok 2', 'refused 13', 'ok 4'],
    );
    assert.deepEqual(writes, [[1, 2, 13, 4], [1], [2], [13], [4]]);
  });

  it('the group commit does not split a batch during an outage: every caller gets the error', async () => {
    let calls = 0;
    const batcher = new Batcher<number, number>(async () => {
      calls++;
      throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    });
    const results = await Promise.allSettled([1, 2, 3].map((i) => batcher.add(i)));
    assert.ok(results.every((r) => r.status === 'rejected'));
    assert.equal(calls, 1);
  });

  it('a worker cycle refused for its data is written outcome by outcome; a refused outcome fails its job instead', async () => {
    const written: TransitionParams[] = [];
    const store = {
      async transition({ items }: { items: TransitionParams[] }) {
        const [p] = items as [TransitionParams];
        if (p.id === 'poisoned' && p.patch?.result !== undefined) throw Object.assign(new Error('refused'), { code: '22P05' });
        if (p.id === 'down') throw Object.assign(new Error('gone'), { code: 'ECONNRESET' });
        if (p.id === 'hopeless') throw Object.assign(new Error('refused again'), { code: '22021' });
        written.push(p);
        return [p.id !== 'lost'];
      },
    } as unknown as Store;
    const base = { from: 'running' as const, lease: 3, workerId: 'w', at: 1000 };
    const items: TransitionParams[] = [
      { ...base, id: 'fine', to: 'succeeded', reason: 'completed', patch: { result: { ok: 1 } } },
      { ...base, id: 'poisoned', to: 'succeeded', reason: 'completed', patch: { result: { s: 'x' } } },
      { ...base, id: 'lost', to: 'succeeded', reason: 'completed', patch: { result: 1 } },
      { ...base, id: 'down', to: 'retrying', reason: 'retry scheduled', patch: { runAt: 2000 } },
      { ...base, id: 'hopeless', to: 'failed', reason: 'fatal', patch: {} },
    ];
    const out = await writeEachAlone(store, items, quiet);
    assert.deepEqual(
      out.map((r) => r.kind),
      ['written', 'written', 'written', 'again', 'dropped'],
    );
    assert.equal(out[0]?.kind === 'written' && out[0].applied, true);
    assert.equal(out[2]?.kind === 'written' && out[2].applied, false, 'a lost compare-and-swap is reported as such');
    const fallback = out[1]?.kind === 'written' ? out[1].params : null;
    assert.equal(fallback?.to, 'failed');
    assert.equal(fallback?.lease, 3, 'still fenced by the lease');
    assert.equal(fallback?.patch?.result, undefined, 'none of the refused data is written');
    assert.equal(fallback?.patch?.error?.code, OUTCOME_REFUSED);
    assert.match(fallback?.patch?.error?.message ?? '', /^the store refused to record this attempt's outcome \(succeeded\): refused \(22P05\)$/);
    assert.deepEqual(
      written.map((p) => [p.id, p.to]),
      [
        ['fine', 'succeeded'],
        ['poisoned', 'failed'],
        ['lost', 'succeeded'],
      ],
    );
  });
});
