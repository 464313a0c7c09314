/**
 * A handler thread: imports the task's module (`Task.isolation.module`), finds the task by
 * type, then runs one attempt at a time as the worker sends them (protocol.ts), each with a
 * ThreadContext. Loaded by pool.ts with `new Worker(...)`: from dist/ as JavaScript, or under
 * tsx as TypeScript (the thread inherits the process's `--import tsx`).
 *
 * Nothing here guards against the handler: a busy loop, an uncaught exception or
 * `process.exit()` ends or holds this thread only, and the worker deals with it (pool.ts).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { FatalError } from '../../core/errors.js';
import { collectTasks, type Task } from '../../task-api/define.js';
import { storedResult } from '../../core/json-copy.js';
import { type CallOp, decodeError, encodeError, type FromThread, type RunMessage, type ThreadInit, type ToThread } from './protocol.js';
import { type AttemptLink, ThreadContext } from './thread-context.js';

const port = parentPort;
if (port === null) throw new Error('thread-entry.ts runs in a worker thread (see src/worker/isolation/pool.ts)');
const init = workerData as ThreadInit;

function post(message: FromThread, transfer?: ArrayBuffer[]): void {
  (port as NonNullable<typeof port>).postMessage(message, transfer);
}

/** One attempt in this thread: its ctx, and the calls it awaits. */
class Attempt implements AttemptLink {
  readonly ctx: ThreadContext;
  private nextCall = 0;
  private ended = false;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();

  constructor(readonly run: RunMessage) {
    this.ctx = new ThreadContext(run, this, init.logLevel);
  }

  post(message: FromThread): void {
    post(message);
  }

  call<T>(op: CallOp, args: unknown[], transfer?: ArrayBuffer[]): Promise<T> {
    if (this.ended) return Promise.reject(new Error('the attempt that made this call has ended'));
    const call = ++this.nextCall;
    return new Promise<T>((resolve, reject) => {
      // A value that cannot be cloned (a function in a child's input...) fails the call here.
      post({ t: 'call', seq: this.run.seq, call, op, args }, transfer);
      this.pending.set(call, { resolve: resolve as (v: unknown) => void, reject });
    });
  }

  reply(m: Extract<ToThread, { t: 'reply' }>): void {
    const p = this.pending.get(m.call);
    if (p === undefined) return;
    this.pending.delete(m.call);
    if (m.ok) p.resolve(m.value);
    else p.reject(decodeError(m.error));
  }

  /** The handler returned: what it left waiting will never be answered. */
  end(): void {
    this.ended = true;
    for (const p of this.pending.values()) p.reject(new Error('the attempt that made this call has ended'));
    this.pending.clear();
  }
}

let current: Attempt | null = null;

async function runAttempt(task: Task, attempt: Attempt): Promise<void> {
  const { seq } = attempt.run;
  let done: FromThread;
  try {
    const value = await (task.run as NonNullable<Task['run']>)(attempt.run.input, attempt.ctx);
    // The stored copy crosses (as in-process, a value no store can keep fails the attempt).
    const stored = storedResult(value);
    done = stored.ok ? { t: 'done', seq, ok: true, value: stored.value } : { t: 'done', seq, ok: false, error: encodeError(new FatalError(stored.error.message, { code: stored.error.code })) };
  } catch (err) {
    done = { t: 'done', seq, ok: false, error: encodeError(err) };
  }
  attempt.ctx.flushProgress();
  if (current === attempt) current = null;
  attempt.end();
  try {
    post(done);
  } catch (err) {
    // A thrown value that cannot be cloned after all.
    post({ t: 'done', seq, ok: false, error: encodeError(err) });
  }
}

async function load(): Promise<Task | FromThread> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(init.module)) as Record<string, unknown>;
  } catch (err) {
    return { t: 'load-failed', code: 'THREAD_MODULE_FAILED', error: encodeError(err) };
  }
  let task: Task | undefined;
  try {
    task = collectTasks(mod).find((t) => t.type === init.type);
  } catch (err) {
    return { t: 'load-failed', code: 'THREAD_MODULE_FAILED', error: encodeError(err) };
  }
  if (task?.run === undefined) {
    const message = `module ${init.module} exports no task "${init.type}" with a run handler (export the task from the module its \`module\` names)`;
    return { t: 'load-failed', code: 'THREAD_TASK_NOT_FOUND', error: encodeError(new Error(message)) };
  }
  return task;
}

const loaded = await load();
if ('t' in loaded) post(loaded);
else {
  const task = loaded;
  port.on('message', (m: ToThread) => {
    if (m.t === 'run') {
      const attempt = new Attempt(m.run);
      current = attempt;
      void runAttempt(task, attempt);
    } else if (current !== null && m.seq === current.run.seq) {
      if (m.t === 'abort') current.ctx.abort(m.kind);
      else current.reply(m);
    }
  });
  post({ t: 'ready' });
}
