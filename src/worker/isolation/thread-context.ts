/**
 * The `ctx` a handler gets in its thread: the same `TaskContext` as in-process, made of what the
 * attempt's message carries (job, attempt, input, checkpoint value, progress so far) and of calls
 * to the attempt's real ctx in the worker (protocol.ts) for everything that writes or reads the
 * store or blob storage. Its signal is the thread's own, aborted when the worker forwards an
 * abort. Progress is merged here and sent at most every PROGRESS_SEND_MS (the worker coalesces
 * again before it writes); log lines are written by a pino logger here and logged by the
 * job's logger in the worker.
 */
import { Readable } from 'node:stream';
import pino, { type Logger } from 'pino';
import type { ResultFile, ResultsHandle, UploadInfo, UploadsHandle } from '../../blobs/handles.js';
import { parseJson } from '../../core/json-text.js';
import { EMPTY_PROGRESS, mergeProgress, type Progress, type ProgressUpdate } from '../../core/progress.js';
import type { CheckpointHandle, ChildOutcome, ChildrenSummary, ChildrenView, ChildSpec, FailurePolicy, TaskContext, TaskJobInfo } from '../../task-api/define.js';
import { type AbortKind, JobAbortedError } from '../../core/abort.js';
import { isDeepJson, storedResult } from '../../core/json-copy.js';
import { type CallOp, encodeError, type FromThread, ownBytes, type ProgressFields, type RunMessage, type StageBegin } from './protocol.js';

/** How often progress goes to the worker at most (it publishes at most every 50 ms itself). */
const PROGRESS_SEND_MS = 20;

/** What a thread ctx needs of its attempt: one-way messages and calls answered by the worker. */
export interface AttemptLink {
  post(message: FromThread): void;
  call<T>(op: CallOp, args: unknown[], transfer?: ArrayBuffer[]): Promise<T>;
}

type Call = <T>(op: CallOp, args: unknown[], transfer?: ArrayBuffer[]) => Promise<T>;

export class ThreadContext implements TaskContext {
  readonly attempt: number;
  readonly job: TaskJobInfo;
  readonly checkpoint: CheckpointHandle;
  readonly children: ChildrenView;
  readonly #seq: number;
  readonly #link: AttemptLink;
  readonly #controller = new AbortController();
  readonly #logLevel: string;
  readonly #call: Call;
  #progress: Progress;
  #progressDirty = false;
  /** From the start: a short handler's progress goes in one message, with its end. */
  #progressSentAt = Date.now();
  #progressTimer: NodeJS.Timeout | null = null;
  #log: Logger | undefined;
  #results: ResultsHandle | undefined;
  #uploads: UploadsHandle | undefined;

  constructor(run: RunMessage, link: AttemptLink, logLevel: string) {
    this.attempt = run.attempt;
    this.job = Object.freeze({ ...run.job });
    this.#seq = run.seq;
    this.#link = link;
    this.#logLevel = logLevel;
    this.#progress = run.progress === null ? EMPTY_PROGRESS : { ...EMPTY_PROGRESS, ...run.progress };
    // Progress first: what the handler reported before a call reaches the worker before it.
    this.#call = (op, args, transfer) => {
      this.flushProgress();
      return link.call(op, args, transfer);
    };
    this.checkpoint = new ThreadCheckpoint(run.checkpoint, this.#call);
    this.children = childrenProxy(run.childrenTotal, this.#call);
    if (run.aborted !== null) this.abort(run.aborted);
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The worker aborted the attempt (cancel, timeout, lost lease, shutdown, suspended). */
  abort(kind: AbortKind): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(new JobAbortedError(kind));
  }

  readonly progress = (update: ProgressUpdate | number): void => {
    this.#progress = mergeProgress(this.#progress, update, Date.now());
    this.#progressDirty = true;
    const wait = this.#progressSentAt + PROGRESS_SEND_MS - Date.now();
    if (wait <= 0) this.flushProgress();
    else if (this.#progressTimer === null) {
      this.#progressTimer = setTimeout(() => this.flushProgress(), wait);
      this.#progressTimer.unref();
    }
  };

  /** Sends the latest progress now, if it changed since it was last sent. */
  flushProgress(): void {
    if (this.#progressTimer !== null) clearTimeout(this.#progressTimer);
    this.#progressTimer = null;
    if (!this.#progressDirty) return;
    this.#progressDirty = false;
    this.#progressSentAt = Date.now();
    // The whole value, as an update: merged in the worker it gives the same value as the
    // handler's updates one by one would have (an explicit percent wins over items).
    this.#link.post({ t: 'progress', seq: this.#seq, update: updateOf(this.#progress) });
  }

  readonly stage = async <T>(name: string, fn: () => Promise<T> | T): Promise<T> => {
    // The worker's ctx.stage sets progress.stage itself: the value here must know it too.
    this.#progress = mergeProgress(this.#progress, { stage: name }, Date.now());
    const begin = await this.#call<StageBegin>('stage.begin', [name]);
    if (!begin.run) return begin.value as T;
    let value: T;
    try {
      value = await fn();
    } catch (err) {
      await this.#call('stage.end', [begin.token, false, encodeError(err), false]).catch(() => undefined);
      throw err;
    }
    // Journaled only when the store keeps it as it is (as in-process): else the stage runs again next time.
    const stored = storedResult(value);
    const saveable = stored.ok && (value === undefined || isDeepJson(value, stored.value));
    await this.#call('stage.end', [begin.token, true, saveable ? stored.value : undefined, saveable]);
    return value;
  };

  readonly spawn = (children: readonly ChildSpec[], options?: { failurePolicy?: FailurePolicy }): Promise<ChildrenSummary> => this.#call('spawn', [children, options]);
  readonly sleep = (ms: number): Promise<void> => this.#call('sleep', [ms]);
  readonly sleepUntil = (time: Date | string | number): Promise<void> => this.#call('sleepUntil', [time]);
  readonly waitFor = <T = unknown>(name: string, options?: { timeoutMs?: number }): Promise<T> => this.#call('waitFor', [name, options]);

  get log(): Logger {
    this.#log ??= pino(
      { level: this.#logLevel, base: null, timestamp: false },
      {
        write: (line: string) => {
          this.flushProgress();
          this.#link.post({ t: 'log', seq: this.#seq, line });
        },
      },
    );
    return this.#log;
  }

  get results(): ResultsHandle {
    this.#results ??= new ThreadResults(this.#call);
    return this.#results;
  }

  get uploads(): UploadsHandle {
    this.#uploads ??= new ThreadUploads(this.#call);
    return this.#uploads;
  }
}

function updateOf(p: Progress): ProgressUpdate {
  const u: ProgressUpdate = {};
  const fields: ProgressFields = p;
  if (fields.percent !== null) u.percent = fields.percent;
  if (fields.stage !== null) u.stage = fields.stage;
  if (fields.itemsDone !== null) u.itemsDone = fields.itemsDone;
  if (fields.itemsTotal !== null) u.itemsTotal = fields.itemsTotal;
  if (fields.message !== null) u.message = fields.message;
  return u;
}

class ThreadCheckpoint implements CheckpointHandle {
  #value: unknown;
  readonly save: (data: unknown) => Promise<void>;

  constructor(value: unknown, call: Call) {
    this.#value = value;
    this.save = async (data: unknown) => {
      // A JSON copy, which is what the store keeps (a structured clone would keep a Date or a
      // class instance's fields where JSON keeps its toJSON()).
      await call('checkpoint.save', [data === undefined ? undefined : parseJson(JSON.stringify(data) as string)]);
      this.#value = data;
    };
  }

  get value(): unknown {
    return this.#value;
  }
}

function childrenProxy(total: number, call: Call): ChildrenView {
  const list: ChildrenView['list'] = (options) => call('children.list', [options]);
  return {
    total,
    counts: () => call('children.counts', []),
    list,
    async *[Symbol.asyncIterator](): AsyncGenerator<ChildOutcome> {
      let cursor: string | null = null;
      do {
        const page: { items: ChildOutcome[]; nextCursor: string | null } = await list({ cursor, limit: 500 });
        yield* page.items;
        cursor = page.nextCursor;
      } while (cursor !== null);
    },
  };
}

function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array | string> {
  return typeof v === 'object' && v !== null && typeof (v as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function';
}

class ThreadResults implements ResultsHandle {
  constructor(private readonly call: Call) {}

  async write(name: string, data: string | Uint8Array | Readable | AsyncIterable<Uint8Array>, options?: { contentType?: string }): Promise<ResultFile> {
    if (data instanceof Uint8Array) {
      const bytes = ownBytes(data);
      return this.call('results.write', [name, bytes, options], [bytes.buffer]);
    }
    if (!isAsyncIterable(data)) return this.call('results.write', [name, data, options]);
    // A stream: chunk by chunk, each acknowledged once the worker's write took it (backpressure).
    const sid = await this.call<number>('results.writeStream', [name, options]);
    try {
      for await (const chunk of data) {
        const bytes = ownBytes(chunk);
        await this.call('stream.push', [sid, bytes], [bytes.buffer]);
      }
    } catch (err) {
      await this.call('stream.abort', [sid, encodeError(err)]).catch(() => undefined);
      throw err;
    }
    return this.call('stream.end', [sid]);
  }

  list(): Promise<ResultFile[]> {
    return this.call('results.list', []);
  }

  async open(name: string): Promise<Readable> {
    return remoteReadable(await this.call<number>('results.open', [name]), this.call);
  }

  remove(name: string): Promise<void> {
    return this.call('results.remove', [name]);
  }
}

class ThreadUploads implements UploadsHandle {
  constructor(private readonly call: Call) {}

  stat(id: string): Promise<UploadInfo> {
    return this.call('uploads.stat', [id]);
  }

  async open(id: string, options?: { start?: number }): Promise<Readable> {
    return remoteReadable(await this.call<number>('uploads.open', [id, options]), this.call);
  }
}

/** A stream opened in the worker, read here one chunk per call. */
function remoteReadable(sid: number, call: Call): Readable {
  let open = true;
  return new Readable({
    read() {
      call<Uint8Array | null>('stream.pull', [sid]).then(
        (chunk) => {
          if (chunk === null) {
            open = false;
            this.push(null);
          } else this.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        },
        (err: unknown) => this.destroy(err as Error),
      );
    },
    destroy(err, done) {
      if (open) {
        open = false;
        call('stream.close', [sid]).catch(() => undefined);
      }
      done(err);
    },
  });
}
