/**
 * A cancel, a timeout or a shutdown stops work with a reason (`signal.reason`); the work must
 * reject with that reason, not with the bare AbortError Node's streams and timers make of it.
 * Also: a stream stopped by a signal that fired before it was piped must not end the process
 * (from Node 24 on, `addAbortSignal` then `pipeline` did: an error thrown inside Node and an
 * 'error' event nobody listened to, both uncaught; node:test fails the test that was running).
 */
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { pipeline as pipelineCallback, Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { abortReasonOr, withAbortReason } from '../../src/core/abort.js';
import { readRecords } from '../../src/example-tasks/csv/record-reader.js';
import { demoSleep } from '../../src/example-tasks/examples.js';
import { destroyOnAbort } from '../../src/example-tasks/stream-abort.js';
import { makeRun, TempBlobs } from '../fixtures/csv-context.js';

function aborted(reason: unknown): AbortSignal {
  const ac = new AbortController();
  ac.abort(reason);
  return ac.signal;
}

const passThrough = () =>
  new Transform({
    transform(chunk, _encoding, callback) {
      callback(null, chunk);
    },
  });

describe('abort reasons', () => {
  it("withAbortReason turns a timer's or a pipeline's AbortError back into the signal's reason", async () => {
    const reason = new Error('cancelled: the user asked');
    const ac = new AbortController();
    setTimeout(() => ac.abort(reason), 10);
    // Without it, Node rejects with an AbortError whose cause is the reason.
    await assert.rejects(sleep(10_000, undefined, { signal: aborted(reason) }), (err: unknown) => (err as Error).name === 'AbortError' && err !== reason);
    await assert.rejects(withAbortReason(ac.signal, sleep(10_000, undefined, { signal: ac.signal })), (err: unknown) => err === reason);
    const never = new Readable({ read() {} });
    await assert.rejects(
      withAbortReason(aborted(reason), pipeline(never, passThrough(), { signal: aborted(reason) })),
      (err: unknown) => err === reason,
    );
  });

  it('abortReasonOr replaces only an AbortError, and only once the signal fired', () => {
    const abortError = new DOMException('This operation was aborted', 'AbortError');
    assert.equal(abortReasonOr(aborted('timeout'), abortError), 'timeout');
    assert.equal(abortReasonOr(new AbortController().signal, abortError), abortError);
    assert.equal(abortReasonOr(undefined, abortError), abortError);
    // Work that failed on its own keeps its error, even if the signal fired meanwhile.
    const tooLarge = new Error('upload larger than 1 MiB');
    assert.equal(abortReasonOr(aborted(new Error('client disconnected')), tooLarge), tooLarge);
  });

  it('destroyOnAbort on a piped stream whose signal already fired: the reader gets the reason, the process stays up', async () => {
    const reason = new Error('shutdown');
    const meter = passThrough();
    pipelineCallback(Readable.from(['a', 'b']), meter, () => {});
    destroyOnAbort(aborted(reason), meter);
    await assert.rejects(Readable.from(meter).toArray(), (err: unknown) => err === reason);
  });

  it('destroyOnAbort while streaming: the reason reaches the reader, and the listener goes when the stream closes', async () => {
    const reason = new Error('timeout');
    const ac = new AbortController();
    const slow = new Readable({ read() {} });
    const meter = passThrough();
    pipelineCallback(slow, meter, () => {});
    destroyOnAbort(ac.signal, meter);
    assert.equal(getEventListeners(ac.signal, 'abort').length, 1);
    setTimeout(() => ac.abort(reason), 20);
    await assert.rejects(Readable.from(meter).toArray(), (err: unknown) => err === reason);

    const done = new AbortController();
    const finished = passThrough();
    pipelineCallback(Readable.from(['x']), finished, () => {});
    destroyOnAbort(done.signal, finished);
    assert.deepEqual((await finished.toArray()).map(String), ['x']);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(getEventListeners(done.signal, 'abort').length, 0, 'no listener left on a signal that outlives the stream');
  });

  it('the CSV reader given a signal that already fired rejects with its reason', async () => {
    const reason = new Error('cancelled before the read began');
    const reader = readRecords(Readable.from([Buffer.from('id,email\n1,a@b.co\n')]), { start: 0, signal: aborted(reason), maxRecordBytes: 1024 });
    await assert.rejects(
      (async () => {
        for await (const _ of reader.records) {
          // no record may arrive
        }
      })(),
      (err: unknown) => err === reason,
    );
  });

  it('demo.sleep cancelled mid-sleep rejects with the reason', async () => {
    const blobs = await TempBlobs.create();
    try {
      const reason = new Error('cancel demo');
      const run = makeRun<{ step: number }>({ blobs });
      setTimeout(() => run.controller.abort(reason), 30);
      const t0 = performance.now();
      await assert.rejects(async () => (demoSleep.run as NonNullable<typeof demoSleep.run>)({ steps: 5, stepMs: 5_000 }, run.ctx), (err: unknown) => err === reason);
      assert.ok(performance.now() - t0 < 2_000, 'stopped at the abort, not after the step');
    } finally {
      await blobs.destroy();
    }
  });
});
