/** Abort plumbing of the client: a controller tied to the caller's signal, and an abortable sleep. */

/** A controller that aborts when `signal` does (with its reason); `dispose` unties it. */
export function linkedController(signal: AbortSignal | undefined): { ctrl: AbortController; dispose: () => void } {
  const ctrl = new AbortController();
  if (!signal) return { ctrl, dispose: () => undefined };
  if (signal.aborted) {
    ctrl.abort(signal.reason);
    return { ctrl, dispose: () => undefined };
  }
  const onAbort = () => ctrl.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  return { ctrl, dispose: () => signal.removeEventListener('abort', onAbort) };
}

/** Resolves after `ms`; rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
