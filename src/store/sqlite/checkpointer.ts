/**
 * WAL checkpoints beside the writer instead of inside its commits.
 *
 * With synchronous=NORMAL a checkpoint fsyncs the WAL before copying its pages into the
 * database file, and fsyncs the database file once everything is copied. SQLite's automatic
 * checkpoint runs inside the COMMIT that crosses its threshold, so the writer waits for both:
 * on the reference machine (bench/RESULTS.md) about 19 ms per 1,000 frames, close to 40% of
 * a worker's time at full speed.
 *
 * Here, once the store's connection has written `everyRows` rows, a worker thread with its own
 * connection runs PASSIVE checkpoints (they never block the writer) until what the writer
 * appended meanwhile is small. The writer then checkpoints that remainder itself between two
 * transactions: SQLite only restarts the WAL from its beginning once every frame is copied,
 * which a checkpointer running beside a busy writer would never see. The store's own
 * automatic checkpoint stays on at a high threshold, as a backstop.
 *
 * Durability is SQLite's own: the same checkpoints, with the same fsyncs, on another thread.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { Worker } from 'node:worker_threads';

/**
 * The thread: CommonJS, so it runs the same from src/ (tsx) and from dist/. It opens the file
 * the store already created (it fails, and the store falls back, if that file is gone).
 */
const THREAD = `
const { existsSync } = require('node:fs');
const { parentPort, workerData } = require('node:worker_threads');
// Node 22 warns that node:sqlite is experimental once per thread: the process's own thread has
// already said so (or its application chose to hide it), so this internal thread stays quiet.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) =>
  rest[0] === 'ExperimentalWarning' && String(warning).startsWith('SQLite is an experimental feature') ? undefined : emitWarning.call(process, warning, ...rest);
const { DatabaseSync } = require('node:sqlite');
if (!existsSync(workerData.path)) throw new Error('the database file is gone: ' + workerData.path);
const db = new DatabaseSync(workerData.path);
db.exec('PRAGMA busy_timeout = 1000');
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const state = new Int32Array(workerData.state);
parentPort.on('message', (message) => {
  if (message === 'close') {
    db.close();
    parentPort.close();
    return;
  }
  try {
    // Each pass copies the frames present when it started; stop once a pass started with few new ones.
    let previous = -1;
    for (let pass = 0; pass < workerData.maxPasses; pass++) {
      const r = checkpoint.get();
      if (r.busy !== 0 || r.log <= 0) break;
      if (previous >= 0 && r.log - previous <= workerData.remainder) break;
      previous = r.log;
    }
    Atomics.store(state, 0, 1);
  } catch (err) {
    Atomics.store(state, 0, 2);
    parentPort.postMessage(String((err && err.message) || err));
  }
});
`;

/** `state[0]`: the thread sets DONE (or 2 on failure) when a round ends; the store resets it to IDLE. */
const IDLE = 0;
const DONE = 1;

export interface CheckpointerOptions {
  /** Rows written between two checkpoint rounds (about 0.7 WAL frames each at full speed). */
  everyRows?: number;
  /** A pass that started with at most this many new frames is the last one. */
  remainder?: number;
}

export class WalCheckpointer {
  private worker: Worker | null = null;
  private readonly state = new Int32Array(new SharedArrayBuffer(4));
  private readonly finish: StatementSync;
  private readonly everyRows: number;
  private readonly remainder: number;
  private written = 0;
  private inFlight = false;
  private failed = false;
  private exited: Promise<void> | null = null;

  constructor(
    private readonly db: DatabaseSync,
    private readonly path: string,
    options: CheckpointerOptions = {},
  ) {
    this.everyRows = options.everyRows ?? 2000;
    this.remainder = options.remainder ?? 64;
    this.finish = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
  }

  /** Whether checkpoints still run on the thread (false once it failed: SQLite's own then take over). */
  get active(): boolean {
    return !this.failed;
  }

  /** Called after every commit of the store's connection, outside any transaction. */
  afterCommit(rows: number): void {
    if (this.inFlight) {
      const state = Atomics.load(this.state, 0);
      if (state === IDLE) return;
      this.inFlight = false;
      Atomics.store(this.state, 0, IDLE);
      if (state === DONE) this.finish.get();
      else this.fail();
      return;
    }
    if (this.failed) return;
    this.written += rows;
    if (this.written < this.everyRows) return;
    this.written = 0;
    const worker = this.worker ?? this.spawn();
    if (!worker) return;
    this.inFlight = true;
    worker.postMessage('checkpoint');
  }

  private spawn(): Worker | null {
    try {
      const worker = new Worker(THREAD, {
        eval: true,
        name: 'longhaul-wal-checkpointer',
        // Not the parent's flags (--import tsx, --cpu-prof, ...): the thread is plain CommonJS.
        execArgv: [],
        workerData: { path: this.path, state: this.state.buffer, maxPasses: 8, remainder: this.remainder },
      });
      worker.unref();
      worker.on('error', () => this.fail());
      worker.on('message', () => this.fail());
      this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
      this.worker = worker;
      return worker;
    } catch {
      this.fail();
      return null;
    }
  }

  /** Back to SQLite's automatic checkpoints at their default threshold. */
  private fail(): void {
    if (this.failed) return;
    this.failed = true;
    this.inFlight = false;
    if (this.db.isOpen) this.db.exec('PRAGMA wal_autocheckpoint = 1000');
    void this.worker?.terminate();
  }

  /** Stops the thread; call before closing the store's connection. */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    this.failed = true;
    if (!worker) return;
    // The thread is unref'd while it works; a close must keep the process alive until it has
    // exited, or a caller awaiting close() as its last step would see its process end first.
    worker.ref();
    worker.postMessage('close');
    const timer = setTimeout(() => void worker.terminate(), 5000);
    await this.exited;
    clearTimeout(timer);
  }
}
