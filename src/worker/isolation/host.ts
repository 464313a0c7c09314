/**
 * The worker's side of an isolated attempt: sends it to a pooled thread, answers the calls its
 * thread ctx makes with the attempt's real ctx (the same object an in-process handler gets, so
 * checkpoints, result files, stages and waits are fenced, retried and journaled the same way),
 * forwards the attempt's abort, and ends it.
 *
 * Stopping for real: once the attempt's signal fires (cancel, timeout, lost lease, shutdown,
 * suspended wait) the thread is told at once, and a handler still running `graceMs` later has
 * its thread terminated: the attempt ends with THREAD_TERMINATED (the job itself ends as the
 * signal says: cancelled for a cancel or a timeout). A thread that dies under an attempt
 * (uncaught exception, out of memory, process.exit) fails that attempt with a retryable
 * ThreadError; the worker and its other attempts go on.
 */
import { PassThrough, type Readable } from 'node:stream';
import type { Logger } from 'pino';
import { parseJson } from '../../core/json-text.js';
import type { TaskContext } from '../../task-api/define.js';
import type { TaskIsolation } from '../../task-api/isolation.js';
import type { Active } from '../attempt.js';
import type { PooledThread, ThreadPool, ThreadSink } from './pool.js';
import { ThreadError } from './pool.js';
import { type CallOp, decodeError, encodeError, type FromThread, ownBytes, type ProgressFields, type StageBegin, type WireError } from './protocol.js';

/** A stage output that is not JSON as it is: the worker's ctx.stage does not journal it (its deep-JSON check fails on a class instance). */
class NotJournaled {}

type Reply = { value: unknown; transfer?: ArrayBuffer[] };

interface WriteStream {
  kind: 'write';
  pass: PassThrough;
  done: Promise<unknown>;
}

interface ReadStream {
  kind: 'read';
  stream: Readable;
  chunks: AsyncIterator<Uint8Array | string>;
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve(v: T): void;
  reject(e: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Runs the attempt's handler in a thread of `pool`; settles as the handler does (or as its thread ends). */
export async function runInThread(pool: ThreadPool, active: Active, ctx: TaskContext, isolation: TaskIsolation, log: Logger): Promise<unknown> {
  const signal = active.abortState.signal;
  const thread = await pool.acquire(signal);
  try {
    await loaded(thread, signal, isolation.graceMs);
  } catch (err) {
    pool.release(thread); // gone, or being terminated: counted out
    throw err;
  }
  return new HostedAttempt(pool, thread, active, ctx, isolation, log).run(signal);
}

/** Waits for a new thread's module to load; a load that outlasts the attempt's signal by graceMs ends the thread. */
function loaded(thread: PooledThread, signal: AbortSignal, graceMs: number): Promise<void> {
  let timer: NodeJS.Timeout | null = null;
  let onAbort: (() => void) | null = null;
  const stopped = new Promise<never>((_, reject) => {
    const arm = () => {
      timer = setTimeout(() => {
        const why = `its module was still loading ${graceMs} ms after the attempt's signal (${(signal.reason as { kind?: string } | undefined)?.kind ?? 'aborted'})`;
        thread.terminate(why);
        reject(new ThreadError('THREAD_TERMINATED', `the handler's thread was terminated: ${why}`));
      }, graceMs);
    };
    if (signal.aborted) arm();
    else {
      onAbort = arm;
      signal.addEventListener('abort', arm, { once: true });
    }
  });
  stopped.catch(() => undefined);
  return Promise.race([thread.ready, stopped]).finally(() => {
    if (timer !== null) clearTimeout(timer);
    if (onAbort !== null) signal.removeEventListener('abort', onAbort);
  });
}

class HostedAttempt implements ThreadSink {
  private seq = 0;
  private over = false;
  private settle: Deferred<unknown> = deferred();
  private graceTimer: NodeJS.Timeout | null = null;
  private readonly streams = new Map<number, WriteStream | ReadStream>();
  private nextStream = 0;
  private readonly stages = new Map<number, { body: Deferred<unknown>; saved: Deferred<unknown> }>();
  private nextStage = 0;
  private signal: AbortSignal | null = null;

  constructor(
    private readonly pool: ThreadPool,
    private readonly thread: PooledThread,
    private readonly active: Active,
    private readonly ctx: TaskContext,
    private readonly isolation: TaskIsolation,
    private readonly log: Logger,
  ) {}

  run(signal: AbortSignal): Promise<unknown> {
    const { job } = this.active;
    this.signal = signal;
    const p = job.progress;
    const progress: ProgressFields | null = p.updatedAt === null ? null : { percent: p.percent, stage: p.stage, itemsDone: p.itemsDone, itemsTotal: p.itemsTotal, message: p.message };
    this.seq = this.thread.start(
      {
        input: job.input,
        attempt: this.ctx.attempt,
        job: { id: job.id, type: job.type, tenant: job.tenant, metadata: job.metadata, maxAttempts: job.maxAttempts, createdAt: new Date(job.createdAt).toISOString() },
        checkpoint: this.ctx.checkpoint.value,
        progress,
        childrenTotal: job.childrenTotal,
        aborted: this.active.abortState.kind,
      },
      this,
    );
    if (signal.aborted) this.armGrace();
    else signal.addEventListener('abort', this.onAbort, { once: true });
    return this.settle.promise;
  }

  private readonly onAbort = (): void => {
    const kind = this.active.abortState.kind;
    if (this.over || kind === null) return;
    this.thread.send({ t: 'abort', seq: this.seq, kind });
    this.armGrace();
  };

  /** The signal fired: the handler has graceMs to return before its thread is terminated. */
  private armGrace(): void {
    if (this.graceTimer !== null) return;
    this.graceTimer = setTimeout(() => {
      if (this.over) return;
      const kind = this.active.abortState.kind;
      const why = `its handler did not return within ${this.isolation.graceMs} ms of its signal (${kind})`;
      const { job } = this.active;
      this.log.warn({ jobId: job.id, type: job.type, attempt: job.attempts, tenant: job.tenant, abort: kind, graceMs: this.isolation.graceMs }, 'terminating a handler thread: its handler ignored its signal');
      this.thread.terminate(why);
      this.end({ ok: false, error: new ThreadError('THREAD_TERMINATED', `the handler's thread was terminated: ${why}`) });
    }, this.isolation.graceMs);
  }

  message(m: FromThread): void {
    if (this.over) return;
    switch (m.t) {
      case 'done':
        this.end(m.ok ? { ok: true, value: m.value } : { ok: false, error: decodeError(m.error) });
        return;
      case 'progress':
        this.ctx.progress(m.update);
        return;
      case 'log':
        this.logLine(m.line);
        return;
      case 'call':
        void this.serve(m.call, m.op, m.args);
        return;
    }
  }

  ended(error: Error): void {
    this.end({ ok: false, error });
  }

  private end(result: { ok: true; value: unknown } | { ok: false; error: unknown }): void {
    if (this.over) return;
    this.over = true;
    if (this.graceTimer !== null) clearTimeout(this.graceTimer);
    this.signal?.removeEventListener('abort', this.onAbort);
    for (const s of this.streams.values()) {
      if (s.kind === 'write') s.pass.destroy(new Error('the attempt ended before its result file was written'));
      else s.stream.destroy();
    }
    this.streams.clear();
    for (const s of this.stages.values()) s.body.reject(new Error('the attempt ended during its stage'));
    this.stages.clear();
    this.pool.release(this.thread);
    if (result.ok) this.settle.resolve(result.value);
    else this.settle.reject(result.error);
  }

  /** A line of the thread's logger, logged by the attempt's own (with the job's fields). */
  private logLine(line: string): void {
    let record: Record<string, unknown>;
    try {
      record = parseJson(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const { level, msg, ...fields } = record;
    const logger = this.ctx.log;
    const label = (typeof level === 'number' ? logger.levels.labels[level] : undefined) ?? 'info';
    const write = (logger as unknown as Record<string, (obj: object, msg?: string) => void>)[label];
    if (typeof write !== 'function') return;
    if (typeof msg === 'string') write.call(logger, fields, msg);
    else write.call(logger, fields);
  }

  private async serve(call: number, op: CallOp, args: unknown[]): Promise<void> {
    let reply: { ok: true; value: unknown; transfer?: ArrayBuffer[] } | { ok: false; error: WireError };
    try {
      reply = { ok: true, ...(await this.handle(op, args)) };
    } catch (err) {
      reply = { ok: false, error: encodeError(err) };
    }
    try {
      if (reply.ok) this.thread.send({ t: 'reply', seq: this.seq, call, ok: true, value: reply.value }, reply.transfer);
      else this.thread.send({ t: 'reply', seq: this.seq, call, ok: false, error: reply.error });
    } catch (err) {
      this.thread.send({ t: 'reply', seq: this.seq, call, ok: false, error: encodeError(err) });
    }
  }

  private async handle(op: CallOp, args: unknown[]): Promise<Reply> {
    const { ctx } = this;
    const a = args as [never, never, never, never];
    switch (op) {
      case 'checkpoint.save':
        return { value: await ctx.checkpoint.save(a[0]) };
      case 'stage.begin':
        return { value: await this.stageBegin(a[0]) };
      case 'stage.end':
        return { value: await this.stageEnd(a[0], a[1], a[2], a[3]) };
      case 'spawn':
        return { value: await ctx.spawn(a[0], a[1]) };
      case 'sleep':
        return { value: await ctx.sleep(a[0]) };
      case 'sleepUntil':
        return { value: await ctx.sleepUntil(a[0]) };
      case 'waitFor':
        return { value: await ctx.waitFor(a[0], a[1]) };
      case 'children.counts':
        return { value: await ctx.children.counts() };
      case 'children.list':
        return { value: await ctx.children.list(a[0]) };
      case 'results.write':
        return { value: await ctx.results.write(a[0], a[1], a[2]) };
      case 'results.writeStream': {
        const pass = new PassThrough();
        const done = ctx.results.write(a[0], pass, a[1]);
        done.catch(() => undefined);
        return { value: this.addStream({ kind: 'write', pass, done }) };
      }
      case 'results.list':
        return { value: await ctx.results.list() };
      case 'results.open':
        return { value: this.addReadable(await ctx.results.open(a[0])) };
      case 'results.remove':
        return { value: await ctx.results.remove(a[0]) };
      case 'uploads.stat':
        return { value: await ctx.uploads.stat(a[0]) };
      case 'uploads.open':
        return { value: this.addReadable(await ctx.uploads.open(a[0], a[1])) };
      case 'stream.push':
        return { value: await this.push(a[0], a[1]) };
      case 'stream.end': {
        const s = this.writeStream(a[0]);
        this.streams.delete(a[0]);
        s.pass.end();
        return { value: await s.done };
      }
      case 'stream.abort': {
        const s = this.writeStream(a[0]);
        this.streams.delete(a[0]);
        s.pass.destroy(decodeError(a[1]) as Error);
        await s.done.catch(() => undefined);
        return { value: undefined };
      }
      case 'stream.pull':
        return this.pull(a[0]);
      case 'stream.close': {
        const s = this.streams.get(a[0]);
        this.streams.delete(a[0]);
        if (s?.kind === 'read') s.stream.destroy();
        return { value: undefined };
      }
      default:
        throw new TypeError(`unknown call from a handler thread: ${String(op)}`);
    }
  }

  /**
   * Runs the stage through the attempt's ctx.stage, whose body is the thread's: either the
   * stage ran before (its saved output is the answer) or ctx.stage calls the body, and the
   * thread is told to run it; its `stage.end` settles the body, and is answered once ctx.stage
   * has journaled the output.
   */
  private stageBegin(name: string): Promise<StageBegin> {
    const token = ++this.nextStage;
    const body = deferred<unknown>();
    const saved = deferred<unknown>();
    const answer = deferred<StageBegin>();
    let ran = false;
    this.ctx
      .stage(name, () => {
        ran = true;
        this.stages.set(token, { body, saved });
        answer.resolve({ run: true, token });
        return body.promise;
      })
      .then(
        (value) => (ran ? saved.resolve(undefined) : answer.resolve({ run: false, value })),
        (err: unknown) => (ran ? saved.reject(err) : answer.reject(err)),
      );
    saved.promise.catch(() => undefined);
    return answer.promise;
  }

  private stageEnd(token: number, ok: boolean, payload: unknown, saveable: boolean): Promise<unknown> {
    const stage = this.stages.get(token);
    if (stage === undefined) throw new Error('no such stage running');
    this.stages.delete(token);
    if (ok) stage.body.resolve(saveable ? payload : new NotJournaled());
    else stage.body.reject(decodeError(payload as WireError));
    return stage.saved.promise;
  }

  private addStream(s: WriteStream | ReadStream): number {
    const sid = ++this.nextStream;
    this.streams.set(sid, s);
    return sid;
  }

  private addReadable(stream: Readable): number {
    return this.addStream({ kind: 'read', stream, chunks: stream[Symbol.asyncIterator]() });
  }

  private writeStream(sid: number): WriteStream {
    const s = this.streams.get(sid);
    if (s?.kind !== 'write') throw new Error(`no result file is being written as stream ${sid}`);
    return s;
  }

  /** Writes a chunk; resolves when the write took it (backpressure), rejects when the write failed. */
  private push(sid: number, chunk: Uint8Array): Promise<void> {
    const s = this.writeStream(sid);
    const taken = new Promise<void>((resolve, reject) => {
      s.pass.write(chunk, (err) => (err ? reject(err) : resolve()));
    });
    // A write that failed (bad name, lost lease) stops reading: its error is the answer.
    return Promise.race([taken, s.done.then(() => Promise.reject(new Error('the result file was closed before its end')))]);
  }

  private async pull(sid: number): Promise<Reply> {
    const s = this.streams.get(sid);
    if (s?.kind !== 'read') throw new Error(`no file is open as stream ${sid}`);
    const next = await s.chunks.next();
    if (next.done) {
      this.streams.delete(sid);
      return { value: null };
    }
    const bytes = ownBytes(next.value);
    return { value: bytes, transfer: [bytes.buffer] };
  }
}
