/**
 * Stopping a stream when a handler's signal fires, with the signal's reason as the stream's
 * error: `stream.addAbortSignal` destroys it with a bare AbortError instead (see core/abort.ts).
 *
 * It also must not run before the stream is piped. `addAbortSignal` on a signal that already
 * fired destroys the stream at once; from Node 24 on, a `pipeline()` given that stream then
 * throws "Cannot pipe to a closed or destroyed stream" from inside Node, never to its caller,
 * and the stream's error is emitted with nobody listening: either one ends the process.
 */
import type { Readable, Writable } from 'node:stream';

/**
 * Destroys `stream` with `signal.reason` when the signal fires, or at once if it already has.
 * Call it after the stream is piped (its error listeners attached). The listener is removed
 * when the stream closes.
 */
export function destroyOnAbort(signal: AbortSignal, stream: Readable | Writable): void {
  const onAbort = () => stream.destroy(signal.reason);
  if (signal.aborted) {
    onAbort();
    return;
  }
  signal.addEventListener('abort', onAbort, { once: true });
  stream.once('close', () => signal.removeEventListener('abort', onAbort));
}
