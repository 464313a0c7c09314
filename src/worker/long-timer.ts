/**
 * Timers for delays beyond what `setTimeout` takes: Node runs a timeout longer than
 * 2^31-1 ms (24.8 days) after 1 ms, so a job timeout or a drain time that long would fire
 * at once. A long delay is waited out in steps of at most that maximum.
 */
const MAX_DELAY = 2 ** 31 - 1;

export interface LongTimer {
  cancel(): void;
}

/** Calls `fn` once after `ms` (any finite non-negative delay); unref'd, like the worker's other timers. */
export function longTimeout(fn: () => void, ms: number): LongTimer {
  const due = Date.now() + ms;
  let timer: NodeJS.Timeout;
  const arm = (left: number): void => {
    timer = setTimeout(
      () => {
        const rest = due - Date.now();
        if (rest > 0) arm(rest);
        else fn();
      },
      Math.min(Math.max(0, left), MAX_DELAY),
    );
    timer.unref?.();
  };
  arm(ms);
  return { cancel: () => clearTimeout(timer) };
}

/** Resolves after `ms` without keeping the process alive. */
export function sleepLong(ms: number): Promise<void> {
  return new Promise((resolve) => longTimeout(resolve, ms));
}
