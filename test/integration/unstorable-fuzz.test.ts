/**
 * Fuzz, on SQLite and on PostgreSQL: random strings, with U+0000, lone surrogates, surrogate
 * pairs, their escapes written as text and other odd characters, in every field a job has: an
 * input and a metadata value and key, an idempotency key, a handler's result, a thrown error's
 * message, a progress stage and message, and a checkpoint. Every outcome is predicted by an
 * oracle written here (independent of src/core/storable.ts) from the rule in docs/api.md, and
 * must be the same on both stores; the worker must then run the next job, and close() finish.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul } from '../../src/longhaul.js';
import { defineTask } from '../../src/task-api/define.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

// ---- the oracle ---------------------------------------------------------------------------------

/** U+0000, or a code unit UTF-8 cannot carry (a lone surrogate: the round trip changes it). */
const badString = (s: string) => s.includes('\u0000') || Buffer.from(s, 'utf8').toString('utf8') !== s;

/** Every string in a JSON value, keys included. */
function strings(v: unknown, out: string[] = []): string[] {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) for (const x of v) strings(x, out);
  else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      out.push(k);
      strings(x, out);
    }
  }
  return out;
}
const badValue = (v: unknown) => strings(v).some(badString);

/** Diagnostic text as the rule says it is kept: each U+0000 or lone surrogate as `\uXXXX`. */
function escaped(s: string): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const next = s.charCodeAt(i + 1);
    if (c >= 0xd800 && c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      out += String.fromCharCode(c, next);
      i++;
    } else if (c === 0 || (c >= 0xd800 && c <= 0xdfff)) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += String.fromCharCode(c);
  }
  return out;
}

// ---- what is drawn ------------------------------------------------------------------------------

const unit = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff') },
  { weight: 2, arbitrary: fc.constantFrom('\ud83d\ude80', '\\u0000', '\\ud800', '\u0001', '\u001f', '\u2028', '\uffff', '"', '\\', "'", 'é') },
  { weight: 5, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 4 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 3 }) },
);
/** Mostly clean strings, one time in six with something odd in it (a case has many strings). */
const text = fc.oneof(
  { weight: 5, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 8 }) },
  { weight: 1, arbitrary: fc.array(unit, { minLength: 1, maxLength: 5 }).map((p) => p.join('')) },
);
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    text,
    fc.integer(),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 3 }),
    fc.dictionary(text, tie('value'), { maxKeys: 3 }),
  ),
})).value;

interface Case {
  input: unknown;
  metadata: Record<string, unknown>;
  idempotencyKey: string | undefined;
  stage: string;
  message: string;
  checkpoint: unknown;
  thrown: string | undefined;
  result: unknown;
}
const caseArb: fc.Arbitrary<Case> = fc.record({
  input: json,
  metadata: fc.dictionary(text, json, { maxKeys: 2 }),
  idempotencyKey: fc.option(text, { nil: undefined }),
  stage: text,
  message: text,
  checkpoint: json,
  thrown: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: text }),
  result: json,
});

// ---- the handler --------------------------------------------------------------------------------

const CASES = new Map<string, Case>();
const tasks = [
  defineTask({
    type: 'fz.all',
    maxAttempts: 1,
    async run(input, ctx) {
      const c = CASES.get((input as { case: string }).case) as Case;
      ctx.progress({ percent: 10, stage: c.stage, message: c.message });
      let checkpoint: string;
      try {
        await ctx.checkpoint.save(c.checkpoint);
        checkpoint = 'saved';
      } catch (err) {
        checkpoint = (err as { code?: string }).code ?? 'threw';
      }
      // The result tells whether the checkpoint was refused; it is read back below.
      if (c.thrown !== undefined) throw new Error(c.thrown);
      return { checkpoint, value: c.result };
    },
  }),
];

/** What the rule says happens to a case. */
function predict(c: Case): Record<string, unknown> {
  if (badValue(c.metadata) || badValue(c.input) || (c.idempotencyKey !== undefined && badString(c.idempotencyKey))) return { submit: 'UNSTORABLE_STRING' };
  const checkpoint = badValue(c.checkpoint) ? 'UNSTORABLE_CHECKPOINT' : 'saved';
  const progress = { stage: escaped(c.stage), message: escaped(c.message) };
  if (c.thrown !== undefined) {
    // An empty message is the error's name.
    return { status: 'failed', error: { message: `${c.thrown === '' ? 'Error' : escaped(c.thrown)} (attempts exhausted: 1/1)`, code: 'Error' }, progress };
  }
  if (badValue(c.result)) return { status: 'failed', error: { code: 'UNSTORABLE_RESULT' }, progress };
  return { status: 'succeeded', result: { checkpoint, value: JSON.parse(JSON.stringify(c.result) ?? 'null') }, progress };
}

/** What happened to a case. */
async function run(lh: Longhaul, c: Case, id: string): Promise<Record<string, unknown>> {
  CASES.set(id, c);
  let job: JobSnapshot;
  try {
    job = await lh.submit('fz.all', { case: id, input: c.input }, { metadata: c.metadata, ...(c.idempotencyKey === undefined ? {} : { idempotencyKey: `${id}:${c.idempotencyKey}` }) });
  } catch (err) {
    return { submit: (err as { code?: string }).code ?? String(err) };
  }
  const deadline = Date.now() + 20_000;
  for (;;) {
    const s = (await lh.get(job.id)) as JobSnapshot;
    if (['succeeded', 'failed', 'cancelled'].includes(s.status)) {
      // Submitted data reads back from the store exactly as it was sent.
      assert.deepEqual((s.input as { input: unknown }).input, JSON.parse(JSON.stringify(c.input) ?? 'null'));
      assert.deepEqual(s.metadata, JSON.parse(JSON.stringify(c.metadata)));
      const progress = { stage: s.progress.stage, message: s.progress.message };
      if (s.status === 'succeeded') return { status: s.status, result: s.result, progress };
      const error = s.error?.code === 'Error' ? { message: s.error.message, code: s.error.code } : { code: s.error?.code };
      return { status: s.status, error, progress };
    }
    if (Date.now() > deadline) throw new Error(`job ${job.id} did not end: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 15));
  }
}

// ---- on both stores -----------------------------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), 'longhaul-fuzz-'));
let pgDb: TestDatabase | null = null;
after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await pgDb?.drop();
});

const TARGETS: Array<{ name: string; database(): Promise<string> }> = [
  { name: 'SQLite', database: async () => join(dir, 'fuzz.db') },
  {
    name: 'PostgreSQL',
    database: async () => {
      pgDb = await createTestDatabase('lh_fuzz');
      return pgDb.url;
    },
  },
];

/** Outcomes per store, by case number: the stores must agree. */
const byStore = new Map<string, unknown[]>();
const SEED = Number(process.env.FUZZ_SEED ?? 0x15a);

for (const target of TARGETS) {
  describe(`fuzzed strings in every field, on ${target.name}`, () => {
    it('give the documented outcome, never a stuck worker; the worker then runs the next job and close() completes', async () => {
      const lh = await Longhaul.open({
        database: await target.database(),
        tasks,
        logger: pino({ level: 'silent' }),
        channel: false,
        files: { urlSigningSecret: 'fuzz-test-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(dir, `blobs-${target.name}`)) },
      });
      const outcomes: unknown[] = [];
      byStore.set(target.name, outcomes);
      const counts = new Map<string, number>();
      let n = 0;
      try {
        await lh.startWorker({ concurrency: 8, pollIntervalMs: 10, progressIntervalMs: 10 });
        await fc.assert(
          fc.asyncProperty(fc.array(caseArb, { minLength: 1, maxLength: 4 }), async (cases) => {
            const ids = cases.map(() => `${target.name}-${++n}`);
            const got = await Promise.all(cases.map((c, i) => run(lh, c, ids[i] as string)));
            cases.forEach((c, i) => {
              const expected = predict(c);
              const outcome = got[i] as Record<string, unknown>;
              const kind = String(outcome.submit ?? outcome.status) + (outcome.error ? `:${(outcome.error as { code: string }).code}` : '');
              counts.set(kind, (counts.get(kind) ?? 0) + 1);
              if ((outcome.result as { checkpoint?: string } | undefined)?.checkpoint === 'UNSTORABLE_CHECKPOINT') counts.set('checkpoint refused', (counts.get('checkpoint refused') ?? 0) + 1);
              outcomes.push(outcome);
              assert.deepEqual(outcome, expected, `case ${JSON.stringify(c)}`);
            });
          }),
          { numRuns: 60, seed: SEED },
        );
        if (process.env.FUZZ_STATS) console.log(target.name, JSON.stringify(Object.fromEntries(counts)));
        // Every kind of outcome was reached.
        for (const kind of ['UNSTORABLE_STRING', 'succeeded', 'failed:Error', 'failed:UNSTORABLE_RESULT', 'checkpoint refused']) {
          assert.ok((counts.get(kind) ?? 0) >= 2, `${kind} reached: ${JSON.stringify(Object.fromEntries(counts))}`);
        }
        // The worker runs the next job.
        const plain: Case = { input: null, metadata: {}, idempotencyKey: undefined, stage: 's', message: 'm', checkpoint: 1, thrown: undefined, result: 'ok' };
        assert.deepEqual(await run(lh, plain, `${target.name}-plain`), { status: 'succeeded', result: { checkpoint: 'saved', value: 'ok' }, progress: { stage: 's', message: 'm' } });
      } finally {
        const closed = await Promise.race([lh.close({ drainMs: 1_000 }).then(() => true), new Promise((r) => setTimeout(() => r(false), 15_000).unref())]);
        assert.equal(closed, true, 'close() finished');
      }
    });
  });
}

describe('both stores', () => {
  it('agree on every fuzzed case', () => {
    const [a, b] = [byStore.get('SQLite'), byStore.get('PostgreSQL')];
    assert.ok(a && b && a.length > 60, 'both ran');
    assert.deepEqual(b, a);
  });
});
