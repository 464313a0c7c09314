/**
 * `isolation` as defineTask checks it, and how errors cross a thread boundary (the classification
 * of a failure must not depend on where its handler ran). The threads themselves are tested in
 * test/integration/isolation.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { ChildFailedError, classifyError, FatalError, LeaseLostError, RetryableError, WaitTimeoutError } from '../../src/core/errors.js';
import { defineTask } from '../../src/task-api/define.js';
import { JobAbortedError } from '../../src/core/abort.js';
import { decodeError, encodeError } from '../../src/worker/isolation/protocol.js';
import { Suspended } from '../../src/workflow/run.js';

const here = import.meta.url;
const run = () => null;

describe('defineTask isolation', () => {
  it("'thread' with module: import.meta.url gives the defaults; in-process tasks have none", () => {
    const t = defineTask({ type: 'iso.a', isolation: 'thread', module: here, run });
    assert.deepEqual({ ...t.isolation }, { kind: 'thread', module: here, graceMs: 1000, maxThreads: undefined, idleMs: 30_000, resourceLimits: undefined });
    assert.equal(defineTask({ type: 'iso.b', run }).isolation, undefined);
  });

  it('takes settings, a URL object or an absolute path for module', () => {
    const t = defineTask({
      type: 'iso.c',
      isolation: { kind: 'thread', graceMs: 0, maxThreads: 2, idleMs: 5, resourceLimits: { maxOldGenerationSizeMb: 64 } },
      module: new URL(here),
      run,
    });
    assert.deepEqual({ ...t.isolation, resourceLimits: { ...t.isolation?.resourceLimits } }, { kind: 'thread', module: here, graceMs: 0, maxThreads: 2, idleMs: 5, resourceLimits: { maxOldGenerationSizeMb: 64 } });
    assert.equal(defineTask({ type: 'iso.d', isolation: 'thread', module: '/srv/app/tasks.js', run }).isolation?.module, pathToFileURL('/srv/app/tasks.js').href);
  });

  it('refuses what it cannot honour, saying what to write instead', () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ isolation: 'thread' }, /isolation needs to know the task's module: add module: import.meta.url/],
      [{ isolation: 'thread', module: './tasks.js' }, /module must be a file URL \(import.meta.url\) or an absolute path/],
      [{ isolation: 'thread', module: 42 }, /module must be a file URL/],
      [{ isolation: 'process', module: here }, /isolation 'process' is not available; use 'thread'/],
      [{ isolation: 'fiber', module: here }, /isolation must be 'thread' or \{ kind: 'thread', \.\.\. \}, got "fiber"/],
      [{ isolation: true, module: here }, /isolation must be 'thread'/],
      [{ isolation: { kind: 'thread', graceMs: -1 }, module: here }, /isolation.graceMs must be a non-negative number of ms/],
      [{ isolation: { kind: 'thread', maxThreads: 0 }, module: here }, /isolation.maxThreads must be a positive integer/],
      [{ isolation: { kind: 'thread', resourceLimits: { heapMb: 1 } }, module: here }, /isolation.resourceLimits has no limit "heapMb"/],
      [{ isolation: { kind: 'thread', resourceLimits: { maxOldGenerationSizeMb: 0 } }, module: here }, /maxOldGenerationSizeMb must be a positive number of MB/],
      [{ isolation: { kind: 'thread', grace: 5 }, module: here }, /isolation has no option "grace"/],
    ];
    for (const [options, message] of cases) {
      assert.throws(() => defineTask({ type: 'iso.bad', run, ...options } as Parameters<typeof defineTask>[0]), (err: Error) => err instanceof TypeError && message.test(err.message) && err.message.includes('task "iso.bad"'), JSON.stringify(options));
    }
    assert.throws(
      () => defineTask({ type: 'iso.stages', isolation: 'thread', module: here, stages: [{ name: 's', run }] }),
      /task "iso.stages": isolation is for a run handler; a task with stages runs in-process/,
    );
  });
});

describe('errors across a thread boundary', () => {
  const roundTrip = (err: unknown) => decodeError(structuredClone(encodeError(err)));

  it("the library's classes come back as themselves, with what classifyError reads", () => {
    const fatal = roundTrip(new FatalError('bad input', { code: 'BAD', details: { compensated: true } }));
    assert.ok(fatal instanceof FatalError);
    assert.deepEqual(classifyError(fatal), { error: { message: 'bad input', code: 'BAD', retryable: false, compensated: true } });
    const retry = roundTrip(new RetryableError('later', { code: 'LATER', delayMs: 250 }));
    assert.ok(retry instanceof RetryableError);
    assert.deepEqual(classifyError(retry), { error: { message: 'later', code: 'LATER', retryable: true }, delayMs: 250 });
    assert.ok(roundTrip(new LeaseLostError('j1')) instanceof LeaseLostError);
    assert.equal((roundTrip(new WaitTimeoutError('approve')) as WaitTimeoutError).signalName, 'approve');
    const child = roundTrip(new ChildFailedError(2, 3)) as ChildFailedError;
    assert.ok(child instanceof ChildFailedError && child.failed === 2 && child.cancelled === 3 && child.code === 'CHILD_FAILED');
    const abort = roundTrip(new JobAbortedError('timeout')) as JobAbortedError;
    assert.ok(abort instanceof JobAbortedError);
    assert.equal(abort.kind, 'timeout');
    assert.equal(abort.name, 'AbortError');
    assert.ok(roundTrip(new Suspended('waiting for 2 children')) instanceof Suspended);
  });

  it('any other Error keeps its name, message, stack, standard class and primitive fields (so its classification)', () => {
    const http = Object.assign(new Error('not found'), { status: 404, code: 'E_NOT_FOUND', response: { big: 'object' } });
    const back = roundTrip(http) as Error & { status?: number; code?: string; response?: unknown };
    assert.deepEqual(classifyError(back), classifyError(http));
    assert.equal(back.stack, http.stack);
    assert.equal(back.response, undefined, 'objects do not cross');
    const zod = new Error('invalid');
    zod.name = 'ZodError';
    assert.deepEqual(classifyError(roundTrip(zod)), { error: { message: 'invalid', code: 'ZodError', retryable: false } });
    assert.ok(roundTrip(new TypeError('x is not a function')) instanceof TypeError);
  });

  it('a thrown non-Error crosses as itself, or as text when it cannot be cloned', () => {
    assert.equal(roundTrip('just a string'), 'just a string');
    assert.deepEqual(roundTrip({ reason: 'plain object' }), { reason: 'plain object' });
    assert.equal(roundTrip({ f: () => 1, n: 1 }), '{"n":1}');
  });
});
