/** Why a handler's `ctx.signal` fired; the worker decides the job's next state from it. */

export type AbortKind =
  /** a user asked to cancel */
  | 'cancelled'
  /** the job ran past its timeout */
  | 'timeout'
  /** the worker is shutting down; the job is handed back */
  | 'shutdown'
  /** this worker no longer holds the lease (reaped, or finished elsewhere) */
  | 'lease-lost';

export class JobAbortedError extends Error {
  constructor(
    readonly kind: AbortKind,
    message?: string,
  ) {
    super(message ?? `job aborted: ${kind}`);
    this.name = 'AbortError';
  }
}

export function abortKindOf(signal: AbortSignal): AbortKind | null {
  return signal.aborted && signal.reason instanceof JobAbortedError ? signal.reason.kind : null;
}

/** Thrown by `ctx.checkpoint.save` (and similar) when the lease is gone. */
export class LeaseLostError extends Error {
  constructor(readonly jobId: string) {
    super(`lease on job ${jobId} was lost; this worker's writes are refused`);
    this.name = 'LeaseLostError';
  }
}
