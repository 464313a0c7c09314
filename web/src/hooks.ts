/** Small hooks: a cancellable async read, and a throttled refresh on feed changes. */
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { feed } from './feed';
import type { JobSnapshot as Job } from 'longhaul/client';

export interface Async<T> {
  data: T | undefined;
  error: Error | undefined;
  loading: boolean;
  reload: () => void;
}

/** Runs `load` when `deps` change and on reload(); a stale answer never overwrites a newer one. */
export function useAsync<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[]): Async<T> {
  const [state, setState] = useState<{ data: T | undefined; error: Error | undefined; loading: boolean }>({ data: undefined, error: undefined, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const controller = new AbortController();
    setState((s) => ({ ...s, loading: true }));
    load(controller.signal).then(
      (data) => {
        if (!controller.signal.aborted) setState({ data, error: undefined, loading: false });
      },
      (error: Error) => {
        if (!controller.signal.aborted) setState((s) => ({ data: s.data, error, loading: false }));
      },
    );
    return () => controller.abort();
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

/** Calls `fn` for feed frames (and after the feed reconnects, with null). */
export function useFeed(fn: (job: Job | null, event: string) => void): void {
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => {
    const offJob = feed.onJob((job, event) => ref.current(job, event));
    const offReconnect = feed.onReconnect(() => ref.current(null, 'reconnect'));
    return () => {
      offJob();
      offReconnect();
    };
  }, []);
}

/** A function that runs `fn` at most once per `ms` (trailing call kept). */
export function useThrottled(fn: () => void, ms: number): () => void {
  const ref = useRef(fn);
  ref.current = fn;
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(
    () => () => {
      if (timer.current) clearTimeout(timer.current);
    },
    [],
  );
  return useCallback(() => {
    if (timer.current) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      ref.current();
    }, ms);
  }, [ms]);
}

/** Re-renders every `ms` (relative times, ETAs). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}
