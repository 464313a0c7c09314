/**
 * Handler threads of one task type in one worker: a bounded pool, each thread running one
 * attempt at a time. Threads are made on demand, reused while idle (a reused thread has the
 * module loaded and its code warm: that is what makes an isolated job cheap), closed after
 * `idleMs` idle, and replaced when one ends (terminated, crashed, out of memory, exited): the
 * pool only counts it out, and the next job that needs a thread makes a new one.
 *
 * An idle thread does not keep the process alive (unref'd); a busy one does, like any running
 * handler.
 */
import { extname } from 'node:path';
import { type ResourceLimits, Worker } from 'node:worker_threads';
import { FatalError, RetryableError } from '../../core/errors.js';
import { decodeError, type FromThread, type RunMessage, type ThreadInit, type ToThread } from './protocol.js';

/**
 * The thread's entry, next to this file: `.js` in dist/, `.ts` under tsx (whose loader the
 * thread gets from the process's execArgv, which a Worker inherits).
 */
const ENTRY = new URL(`./thread-entry${extname(new URL(import.meta.url).pathname) || '.js'}`, import.meta.url);

/** Why a thread ended under an attempt; retryable: the next attempt gets a new thread. */
export class ThreadError extends RetryableError {
  constructor(code: 'THREAD_CRASHED' | 'THREAD_OUT_OF_MEMORY' | 'THREAD_EXITED' | 'THREAD_TERMINATED', message: string, stack?: string) {
    super(message, { code });
    this.name = 'ThreadError';
    if (stack !== undefined) this.stack = `${this.name}: ${message}\n    --- in the thread ---\n${stack.split('\n').slice(1).join('\n')}`;
  }
}

/** What the attempt a thread runs hears of it (host.ts). */
export interface ThreadSink {
  message(m: FromThread): void;
  /** The thread ended while running the attempt: `error` says how. */
  ended(error: Error): void;
}

export interface PoolSettings {
  /** Threads at most, busy or idle. */
  max: number;
  idleMs: number;
  resourceLimits: ResourceLimits | undefined;
}

/** One handler thread. */
export class PooledThread {
  private readonly worker: Worker;
  /** Resolves once the task's module is loaded; rejects when it cannot be (then the thread is gone). */
  readonly ready: Promise<void>;
  private seq = 0;
  private sink: ThreadSink | null = null;
  private crash: Error | null = null;
  /** Set when this side ended the thread, with why. */
  private terminatedFor: string | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  /** The thread has exited. */
  gone = false;
  /** The task's module is loaded (the thread said 'ready'). */
  private loaded = false;

  constructor(init: ThreadInit, settings: PoolSettings, onGone: (t: PooledThread) => void) {
    this.worker = new Worker(ENTRY, { workerData: init, ...(settings.resourceLimits ? { resourceLimits: settings.resourceLimits } : {}), name: `longhaul ${init.type}` });
    let loaded: (() => void) | null = null;
    let failed: ((e: Error) => void) | null = null;
    this.ready = new Promise<void>((resolve, reject) => {
      loaded = resolve;
      failed = reject;
    });
    this.ready.catch(() => undefined);
    this.worker.on('message', (m: FromThread) => {
      if (m.t === 'ready') {
        this.loaded = true;
        loaded?.();
      }
      else if (m.t === 'load-failed') {
        const cause = decodeError(m.error);
        failed?.(new FatalError(`task "${init.type}" could not be loaded in its thread: ${cause instanceof Error ? cause.message : String(cause)}`, { code: m.code, cause }));
        this.terminate('its module failed to load');
      } else if ('seq' in m && m.seq === this.seq) this.sink?.message(m);
    });
    // An uncaught exception or an out-of-memory end: 'error' comes first, then 'exit'.
    this.worker.on('error', (err: unknown) => {
      this.crash ??= err instanceof Error ? err : new Error(String(err));
    });
    this.worker.on('exit', (code) => {
      this.gone = true;
      if (this.idleTimer) clearTimeout(this.idleTimer);
      const error = this.endError(code, settings);
      // Ended while importing the task's module (not by this side): the module cannot be loaded.
      if (!this.loaded && this.terminatedFor === null) {
        const how = code === 13 ? 'its top-level await never settled (exit code 13)' : error.message;
        failed?.(new FatalError(`task "${init.type}" could not be loaded in its thread: ${how}`, { code: 'THREAD_MODULE_FAILED', cause: error }));
      } else failed?.(error);
      const sink = this.sink;
      this.sink = null;
      sink?.ended(error);
      onGone(this);
    });
  }

  private endError(code: number, settings: PoolSettings): Error {
    if (this.terminatedFor !== null) return new ThreadError('THREAD_TERMINATED', `the handler's thread was terminated: ${this.terminatedFor}`);
    const crash = this.crash;
    if ((crash as { code?: unknown } | null)?.code === 'ERR_WORKER_OUT_OF_MEMORY') {
      const limits = settings.resourceLimits ? ` (resourceLimits ${JSON.stringify(settings.resourceLimits)})` : '';
      return new ThreadError('THREAD_OUT_OF_MEMORY', `the handler's thread ran out of memory${limits}: ${crash?.message}`);
    }
    if (crash !== null) return new ThreadError('THREAD_CRASHED', `uncaught exception in the handler's thread: ${crash.name}: ${crash.message}`, crash.stack);
    return new ThreadError('THREAD_EXITED', `the handler's thread exited with code ${code} (process.exit() in the handler?)`);
  }

  /** Starts an attempt (the thread is ready and runs nothing); returns its seq. */
  start(run: Omit<RunMessage, 'seq'>, sink: ThreadSink): number {
    this.seq++;
    this.sink = sink;
    this.busy();
    this.send({ t: 'run', run: { ...run, seq: this.seq } });
    return this.seq;
  }

  /** The attempt is over (its handler returned): nothing more of it is heard. */
  finish(): void {
    this.sink = null;
  }

  send(message: ToThread, transfer?: ArrayBuffer[]): void {
    if (!this.gone) this.worker.postMessage(message, transfer);
  }

  terminate(why: string): void {
    if (this.gone || this.terminatedFor !== null) return;
    this.terminatedFor = why;
    void this.worker.terminate();
  }

  /** Neither gone nor being terminated: it can run another attempt. */
  get usable(): boolean {
    return !this.gone && this.terminatedFor === null;
  }

  private busy(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    this.worker.ref();
  }

  /** Waits for the next attempt; terminated after `ms` of waiting. */
  idle(ms: number, onExpired: () => void): void {
    this.worker.unref();
    this.idleTimer = setTimeout(onExpired, ms);
    this.idleTimer.unref();
  }
}

export class ThreadPool {
  private readonly idle: PooledThread[] = [];
  private count = 0;
  private readonly waiting: Array<{ take(t: PooledThread): void }> = [];
  /** Set when its worker stopped: a thread freed from now on ends instead of waiting idle. */
  private closed = false;

  constructor(
    private readonly init: ThreadInit,
    private readonly settings: PoolSettings,
  ) {}

  /** Threads alive, busy or idle. */
  get size(): number {
    return this.count;
  }

  /** A thread for one attempt: an idle one, a new one, or the next one freed (rejects with `signal.reason` if it aborts first). */
  acquire(signal: AbortSignal): Promise<PooledThread> {
    const reused = this.idle.pop();
    if (reused !== undefined) return Promise.resolve(reused);
    if (this.count < this.settings.max) return Promise.resolve(this.spawn());
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<PooledThread>((resolve, reject) => {
      const entry = {
        take: (t: PooledThread) => {
          signal.removeEventListener('abort', onAbort);
          resolve(t);
        },
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(entry);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  /** The attempt is over and its thread runs nothing: the next waiting attempt gets it, or it waits idle. */
  release(t: PooledThread): void {
    t.finish();
    if (!t.usable) return;
    if (this.closed) {
      t.terminate('idle');
      return;
    }
    const next = this.waiting.shift();
    if (next !== undefined) {
      next.take(t);
      return;
    }
    this.idle.push(t);
    t.idle(this.settings.idleMs, () => {
      const i = this.idle.indexOf(t);
      if (i >= 0) this.idle.splice(i, 1);
      t.terminate('idle');
    });
  }

  /** Its worker stopped: the idle threads end now, busy ones when their attempt does. */
  close(): void {
    this.closed = true;
    for (const t of this.idle.splice(0)) t.terminate('idle');
  }

  private spawn(): PooledThread {
    this.count++;
    return new PooledThread(this.init, this.settings, (t) => this.gone(t));
  }

  /** A thread ended: counted out, and replaced for a waiting attempt. */
  private gone(t: PooledThread): void {
    this.count--;
    const i = this.idle.indexOf(t);
    if (i >= 0) this.idle.splice(i, 1);
    const next = this.waiting.shift();
    if (next !== undefined) next.take(this.spawn());
  }
}
