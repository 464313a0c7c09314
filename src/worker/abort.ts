/** An attempt's abort state: why a handler's `ctx.signal` fired (core/abort.ts's AbortKind). */
import { type AbortKind, JobAbortedError } from '../core/abort.js';

/**
 * An attempt's abort state. Its AbortSignal is made only when the handler reads `ctx.signal`:
 * an AbortController costs more than a short job (an EventTarget per job, and its garbage),
 * and most short handlers never look. Made after an abort, the signal starts aborted.
 */
export class AttemptAbort {
  private controller: AbortController | null = null;
  private abortReason: JobAbortedError | null = null;
  /** performance.now() of the abort (0 while none): how long a handler has ignored it. */
  at = 0;

  get signal(): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController();
      if (this.abortReason !== null) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.abortReason !== null;
  }

  /** Why it aborted, or null while it has not. */
  get kind(): AbortKind | null {
    return this.abortReason?.kind ?? null;
  }

  /** The error the signal fired with, or null while it has not. */
  get reason(): JobAbortedError | null {
    return this.abortReason;
  }

  /** The first abort wins; later ones change nothing. */
  abort(kind: AbortKind): void {
    if (this.abortReason !== null) return;
    this.abortReason = new JobAbortedError(kind);
    this.at = performance.now();
    this.controller?.abort(this.abortReason);
  }
}
