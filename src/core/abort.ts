/**
 * Keeping the reason work stopped. Node's abortable APIs (`stream.pipeline` and
 * `addAbortSignal`, `events.once`, `timers/promises`, `fs`) reject with a bare `AbortError`
 * that keeps the signal's reason only as its `cause`. Longhaul's signals carry why (a user's
 * cancel, a timeout, a shutdown, a client gone away): code that stops on one reports that
 * reason, as `signal.throwIfAborted()` does.
 */

/**
 * The error to report for work that failed: `signal`'s reason when `err` is the AbortError the
 * signal caused, otherwise `err` itself. Only an AbortError is replaced: work that failed on its
 * own (a size limit, a disk error) keeps its error even when the signal fired meanwhile, as it
 * may because of that failure (a request stream closed early looks like a client gone away).
 */
export function abortReasonOr(signal: AbortSignal | undefined, err: unknown): unknown {
  return signal?.aborted && isAbortError(err) ? signal.reason : err;
}

/** Node's abort errors (`AbortError`, code `ABORT_ERR`) and DOM ones (`name` 'AbortError'). */
function isAbortError(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || (err as { code?: unknown }).code === 'ABORT_ERR');
}

/** `work`, rejecting with `signal`'s reason itself (not a bare AbortError) once the signal fired. */
export async function withAbortReason<T>(signal: AbortSignal | undefined, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw abortReasonOr(signal, err);
  }
}

/** Why a handler's `ctx.signal` fired; the worker decides the job's next state from it. */
export type AbortKind =
  /** a user asked to cancel */
  | 'cancelled'
  /** the job ran past its timeout */
  | 'timeout'
  /** the worker is shutting down; the job is handed back */
  | 'shutdown'
  /** this worker no longer holds the lease (reaped, or finished elsewhere) */
  | 'lease-lost'
  /** the handler waits (ctx.spawn, sleep, waitFor): the job is waiting, its handler runs again later */
  | 'suspended';

export class JobAbortedError extends Error {
  constructor(
    readonly kind: AbortKind,
    message?: string,
  ) {
    super(message ?? `job aborted: ${kind}`);
    this.name = 'AbortError';
  }
}
