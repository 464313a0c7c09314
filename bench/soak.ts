/**
 * Soak: `longhaul dev` under steady load for a fixed time, sampling the server's
 * memory and latencies, to show whether memory stays flat.
 *
 *   npm run build
 *   node --import tsx bench/soak.ts --minutes 30 [--rate 150] [--feeds 100] [--streams 200] [--reopens 2000] [--ws 100]
 *
 * The load, all on 127.0.0.1:
 * - `--rate` jobs/s submitted with POST /v1/jobs; each job (`soak.steps`) reports progress
 *   `--steps` times, `--step-ms` apart, then succeeds;
 * - `--feeds` connections on GET /v1/events (the tenant-wide SSE feed), held the whole run;
 * - `--streams` per-job SSE streams (GET /v1/jobs/{id}/events), each on one of the newest jobs,
 *   reopened on a newer one `--reopens` times a second in all: a stream still open when its
 *   turn comes is closed by the client, most end on their own at the job's terminal frame;
 * - `--ws` WebSocket connections on GET /v1/ws, held the whole run: each job submitted is
 *   subscribed to on one of them in turn (`{"op":"subscribe"}`), and followed to its terminal
 *   snapshot; the delay from each change (the snapshot's `updatedAt`) to its receipt is
 *   measured ("ws" columns).
 *
 * Every `--sample-s` seconds it records the server's RSS (/proc/<pid>/status: anonymous and
 * file-backed apart, since SQLite maps the database file), its JS heap (`process.memoryUsage()`
 * read through the inspector protocol after a full GC: the live heap; `--no-gc` reads it as it
 * is), its CPU time, the submit latency p50/p99, the feed delay (the change's time, which is the
 * frame's `id:`, to its receipt), and the per-job streams' delay to the first frame and from
 * each change to its receipt. The server runs with `--inspect=127.0.0.1:0` for that: a debugger
 * port on loopback in this benchmark only, nothing in the product. At the end: a table, the
 * least-squares slope of each memory series after `--warmup-min` in MiB per minute, the jobs'
 * final counts, and one JSON line (the last line of stdout).
 *
 * For leak hunting, `--heap-snapshots DIR --snapshot-at 2,8` writes heap snapshots at those
 * minutes (the server pauses for a few seconds each); compare them with bench/heap-diff.ts.
 * `--lib DIR` runs another build (bench/snapshot.sh), `--node-flags "..."` passes flags to the
 * server's node; the environment is passed on (e.g. MALLOC_ARENA_MAX).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { boolFlag, gitState, loadNote, numFlag, percentile, strFlag, table } from './lib/util.js';

const minutes = numFlag('minutes', 10);
const rate = numFlag('rate', 150);
const steps = numFlag('steps', 4);
const stepMs = numFlag('step-ms', 25);
const feeds = numFlag('feeds', 100);
const streams = numFlag('streams', 200);
const wsClients = numFlag('ws', 0);
const reopens = numFlag('reopens', 2000);
const sampleS = numFlag('sample-s', minutes >= 20 ? 30 : 10);
const warmupMin = numFlag('warmup-min', Math.min(5, Math.max(1, minutes / 5)));
const concurrency = numFlag('concurrency', 50);
const forceGc = !boolFlag('no-gc');
const lib = resolve(strFlag('lib') ?? 'dist');
const snapshotDir = strFlag('heap-snapshots');
const snapshotAt = (strFlag('snapshot-at') ?? '')
  .split(',')
  .filter((s) => s !== '')
  .map(Number);
const nodeFlags = (strFlag('node-flags') ?? '').split(' ').filter((s) => s !== '');
const outFile = strFlag('out');
/** Feed connections whose frames are parsed for delays (the others only count bytes). */
const measuredFeeds = Math.min(feeds, numFlag('measured-feeds', 4));
/** Streams pick one of this many newest jobs. */
const RECENT = 32;
const MAX_SUBMITS_IN_FLIGHT = 256;
const MiB = 1024 * 1024;

if (!(minutes > 0 && rate > 0 && steps >= 0 && reopens >= 0 && sampleS >= 1)) throw new Error('bad parameters');

// ---- the server ----------------------------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), 'longhaul-soak-'));
const tasksFile = join(dir, 'soak-tasks.mjs');
writeFileSync(
  tasksFile,
  `import { setTimeout as sleep } from 'node:timers/promises';
import { defineTask } from ${JSON.stringify(pathToFileURL(join(lib, 'index.js')).href)};
// Reports progress input.steps times, input.stepMs apart, with the call time as its message.
export const steps = defineTask({
  type: 'soak.steps',
  async run(input, ctx) {
    for (let i = 1; i <= input.steps; i++) {
      await sleep(input.stepMs);
      ctx.progress({ itemsDone: i, itemsTotal: input.steps, message: String(Date.now()) });
    }
    return { steps: input.steps };
  },
});
`,
);

interface Server {
  child: ChildProcess;
  base: URL;
  inspector: string;
  stderr: string[];
  warnings: number;
}

function startServer(): Promise<Server> {
  const args = [...nodeFlags, '--inspect=127.0.0.1:0', join(lib, 'cli/main.js'), 'dev', '--port', '0', '--database', join(dir, 'soak.db')];
  args.push('--tasks', tasksFile, '--concurrency', String(concurrency));
  // The soak's streams are one tenant's (keyless dev): the per-tenant stream cap (100 by default) is raised to hold them all.
  const streamCap = String(Math.max(100, 2 * (feeds + streams + wsClients)));
  const child = spawn(process.execPath, args, {
    env: { ...process.env, LONGHAUL_LOG_LEVEL: 'warn', LONGHAUL_MAX_STREAMS_PER_TENANT: process.env.LONGHAUL_MAX_STREAMS_PER_TENANT ?? streamCap },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const server: Partial<Server> & { stderr: string[]; warnings: number } = { child, stderr: [], warnings: 0 };
  return new Promise((resolveStart, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`longhaul dev did not start:\n${out}\n${err}`)), 30_000);
    const ready = () => {
      if (!server.base || !server.inspector) return;
      clearTimeout(timer);
      resolveStart(server as Server);
    };
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m && !server.base) {
        server.base = new URL(m[1] as string);
        ready();
      }
    });
    child.stderr?.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /Debugger listening on (ws:\/\/\S+)/.exec(err);
      if (m && !server.inspector) {
        server.inspector = m[1] as string;
        ready();
      }
      const lines = err.split('\n');
      err = lines.pop() ?? '';
      for (const line of lines) {
        // pino lines at warn (40) and above; the inspector's own messages are not the server's.
        if (!line.startsWith('{')) continue;
        server.warnings++;
        if (server.stderr.length < 20) server.stderr.push(line.slice(0, 400));
      }
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`longhaul dev exited (${code ?? signal}):\n${out}\n${err}`));
    });
  });
}

/** A minimal Chrome DevTools protocol client (the server's inspector). */
class Inspector {
  private nextId = 1;
  private readonly calls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private chunkSink: ((chunk: string) => void) | null = null;

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data: Buffer) => {
      const msg = JSON.parse(data.toString('utf8')) as {
        id?: number;
        result?: unknown;
        error?: { message: string };
        method?: string;
        params?: { chunk: string };
      };
      if (msg.method === 'HeapProfiler.addHeapSnapshotChunk') this.chunkSink?.(msg.params?.chunk ?? '');
      if (msg.id === undefined) return;
      const call = this.calls.get(msg.id);
      this.calls.delete(msg.id);
      if (msg.error) call?.reject(new Error(msg.error.message));
      else call?.resolve(msg.result);
    });
  }

  static connect(url: string): Promise<Inspector> {
    const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 1 << 30 });
    return new Promise((res, rej) => {
      ws.once('open', () => res(new Inspector(ws)));
      ws.once('error', rej);
    });
  }

  call<T>(method: string, params: object = {}): Promise<T> {
    const id = this.nextId++;
    this.ws.send(JSON.stringify({ id, method, params }));
    return new Promise((res, rej) => this.calls.set(id, { resolve: res as (v: unknown) => void, reject: rej }));
  }

  async evaluate<T>(expression: string): Promise<T> {
    const r = await this.call<{ result: { value: T }; exceptionDetails?: unknown }>('Runtime.evaluate', { expression, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`evaluate failed: ${JSON.stringify(r.exceptionDetails)}`);
    return r.result.value;
  }

  async heapSnapshot(file: string): Promise<void> {
    const parts: string[] = [];
    this.chunkSink = (c) => parts.push(c);
    try {
      await this.call('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    } finally {
      this.chunkSink = null;
    }
    writeFileSync(file, parts.join(''));
  }

  close(): void {
    this.ws.close();
  }
}

/** kB fields of /proc/<pid>/status, in MiB. */
function procMemory(pid: number): { rss: number; anon: number; file: number; shmem: number } {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN) / 1024;
  return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile'), shmem: kb('RssShmem') };
}

/** Resident MiB of the process's mappings of the database file (SQLite reads it through mmap). */
function mappedDatabase(pid: number, file: string): number {
  let kb = 0;
  let inDb = false;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inDb = line.endsWith(file);
    else if (inDb && line.startsWith('Rss:')) kb += Number(line.slice(4).trim().split(' ')[0]);
  }
  return kb / 1024;
}

function fileMiB(file: string): number {
  try {
    return statSync(file).size / MiB;
  } catch {
    return 0;
  }
}

/** utime + stime of a process, in seconds. */
function procCpu(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

// ---- the load ------------------------------------------------------------------------------

interface Interval {
  submitMs: number[];
  submitted: number;
  submitErrors: number;
  feedDelayMs: number[];
  streamFirstMs: number[];
  streamDelayMs: number[];
  wsDelayMs: number[];
  wsErrors: number;
  opened: number;
  endedByServer: number;
  closedByClient: number;
  /** Closed by the client before any frame came. */
  noFrame: number;
  streamErrors: number;
  feedFrames: number;
  feedErrors: number;
  succeeded: number;
}

const fresh = (): Interval => ({
  submitMs: [],
  submitted: 0,
  submitErrors: 0,
  feedDelayMs: [],
  streamFirstMs: [],
  streamDelayMs: [],
  wsDelayMs: [],
  wsErrors: 0,
  opened: 0,
  endedByServer: 0,
  closedByClient: 0,
  noFrame: 0,
  streamErrors: 0,
  feedFrames: 0,
  feedErrors: 0,
  succeeded: 0,
});

let cur = fresh();
const totals = {
  submitted: 0,
  submitErrors: 0,
  submitRetries: 0,
  succeededOnFeed: 0,
  opened: 0,
  endedByServer: 0,
  closedByClient: 0,
  noFrame: 0,
  streamErrors: 0,
  feedErrors: 0,
  errorFrames: 0,
  wsSubscribed: 0,
  wsEnded: 0,
  wsErrors: 0,
};
const errorSamples: string[] = [];
const noteError = (what: string) => {
  if (errorSamples.length < 20) errorSamples.push(what);
};
const recent: string[] = [];
let running = true;

/** Splits an SSE byte stream into frames; calls `frame(text, receivedAt)` per complete frame. */
function frames(res: http.IncomingMessage, frame: (text: string, at: number) => void): void {
  res.setEncoding('utf8');
  let buf = '';
  res.on('data', (chunk: string) => {
    const at = Date.now();
    buf += chunk;
    let i = buf.indexOf('\n\n');
    while (i >= 0) {
      frame(buf.slice(0, i), at);
      buf = buf.slice(i + 2);
      i = buf.indexOf('\n\n');
    }
  });
}

/** The `id:` of a frame (the change's time in ms), or NaN for comments. */
function frameId(text: string): number {
  if (!text.startsWith('id: ')) return Number.NaN;
  return Number(text.slice(4, text.indexOf('\n')));
}

async function submitter(base: URL): Promise<void> {
  // Idle sockets are dropped well before the server's keep-alive timeout (72 s), which could
  // otherwise close one just as a request goes out on it.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32, timeout: 20_000 });
  const body = JSON.stringify({ type: 'soak.steps', input: { steps, stepMs } });
  const start = performance.now();
  let sent = 0;
  let inFlight = 0;
  const one = (mayRetry = true) => {
    inFlight++;
    const t0 = performance.now();
    const req = http.request(
      {
        host: base.hostname,
        port: base.port,
        path: '/v1/jobs',
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () => {
          inFlight--;
          if (res.statusCode !== 202) {
            cur.submitErrors++;
            totals.submitErrors++;
            noteError(`submit ${res.statusCode}: ${text.slice(0, 200)}`);
            return;
          }
          cur.submitMs.push(performance.now() - t0);
          cur.submitted++;
          totals.submitted++;
          const id = (JSON.parse(text) as { id: string }).id;
          recent.push(id);
          if (recent.length > RECENT) recent.shift();
          if (sockets.length > 0) (sockets[nextSocket++ % sockets.length] as WsClient).subscribe(id);
        });
      },
    );
    req.on('error', (err) => {
      inFlight--;
      // A kept-alive socket the server closed as the request went out: the request never
      // reached it, so it is sent again once (Node's documented pattern), and counted.
      if (mayRetry && req.reusedSocket && (err as NodeJS.ErrnoException).code === 'ECONNRESET') {
        totals.submitRetries++;
        one(false);
        return;
      }
      cur.submitErrors++;
      totals.submitErrors++;
      noteError(`submit: ${err.message}`);
    });
    req.end(body);
  };
  while (running) {
    const owed = Math.floor(((performance.now() - start) / 1000) * rate) - sent;
    for (let i = 0; i < owed && inFlight < MAX_SUBMITS_IN_FLIGHT; i++, sent++) one();
    await sleep(5);
  }
  while (inFlight > 0) await sleep(10);
  agent.destroy();
}

function feedConnection(base: URL, measured: boolean, index: number): { close(): void } {
  let req: http.ClientRequest | null = null;
  const open = () => {
    if (!running) return;
    req = http.get({ host: base.hostname, port: base.port, path: '/v1/events', agent: false }, (res) => {
      if (res.statusCode !== 200) {
        cur.feedErrors++;
        totals.feedErrors++;
        noteError(`feed ${res.statusCode}`);
      }
      res.on('end', () => {
        if (!running) return;
        cur.feedErrors++;
        totals.feedErrors++;
        noteError(`feed ${index} ended by the server`);
        setTimeout(open, 1000);
      });
      if (!measured) {
        res.resume();
        return;
      }
      frames(res, (text, at) => {
        const id = frameId(text);
        if (Number.isNaN(id)) return;
        cur.feedFrames++;
        cur.feedDelayMs.push(at - id);
        if (index === 0 && text.includes('event: status') && text.includes('"status":"succeeded"')) {
          cur.succeeded++;
          totals.succeededOnFeed++;
        }
      });
    });
    req.on('error', (err) => {
      if (!running) return;
      cur.feedErrors++;
      totals.feedErrors++;
      noteError(`feed ${index}: ${err.message}`);
      setTimeout(open, 1000);
    });
  };
  open();
  return { close: () => req?.destroy() };
}

/** One WebSocket connection on /v1/ws, following the jobs it is given to their end (reconnects if closed). */
class WsClient {
  private ws: WebSocket | null = null;
  /** Jobs followed on this connection and the updatedAt of the last snapshot of each (0: none yet). */
  private readonly following = new Map<string, number>();

  constructor(
    private readonly base: URL,
    private readonly index: number,
  ) {
    this.open();
  }

  private fail(what: string): void {
    cur.wsErrors++;
    totals.wsErrors++;
    noteError(`ws ${this.index}: ${what}`);
  }

  private open(): void {
    if (!running) return;
    const ws = new WebSocket(`ws://${this.base.host}/v1/ws`, { perMessageDeflate: false });
    this.ws = ws;
    ws.on('open', () => {
      for (const id of this.following.keys()) ws.send(JSON.stringify({ op: 'subscribe', id }));
    });
    ws.on('message', (data: Buffer) => {
      const at = Date.now();
      const msg = JSON.parse(data.toString()) as { type: string; job?: { id: string; status: string; updatedAt: string }; code?: string; message?: string };
      if (msg.type === 'error') {
        totals.errorFrames++;
        this.fail(`error message ${msg.code}: ${msg.message}`);
        return;
      }
      if (msg.type !== 'snapshot' || !msg.job) return;
      const { id, status } = msg.job;
      const changedAt = Date.parse(msg.job.updatedAt);
      const last = this.following.get(id);
      // The first snapshot is the state at subscribe time, not a change: not a delay.
      if (last !== undefined && last > 0 && changedAt > last) cur.wsDelayMs.push(at - changedAt);
      if (status === 'succeeded' || status === 'failed' || status === 'cancelled' || status === 'expired') {
        this.following.delete(id);
        totals.wsEnded++;
      } else this.following.set(id, changedAt);
    });
    ws.on('error', (err) => this.fail(err.message));
    ws.on('close', () => {
      if (!running) return;
      this.fail('closed by the server');
      setTimeout(() => this.open(), 1000);
    });
  }

  subscribe(id: string): void {
    this.following.set(id, 0);
    totals.wsSubscribed++;
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ op: 'subscribe', id }));
  }

  close(): void {
    this.ws?.close();
  }
}

const sockets: WsClient[] = [];
let nextSocket = 0;

/** One per-job stream slot: opens a stream on a new job every `periodMs`, closing one still open. */
async function streamSlot(base: URL, agent: http.Agent, periodMs: number): Promise<void> {
  // Spread the slots' turns over one period.
  await sleep(Math.random() * periodMs);
  while (running) {
    const t0 = Date.now();
    const id = recent[Math.floor(Math.random() * recent.length)];
    if (id === undefined) {
      await sleep(50);
      continue;
    }
    cur.opened++;
    totals.opened++;
    await new Promise<void>((done) => {
      let first = true;
      let ended = false;
      const req = http.get({ host: base.hostname, port: base.port, path: `/v1/jobs/${id}/events`, agent }, (res) => {
        if (res.statusCode !== 200) {
          cur.streamErrors++;
          totals.streamErrors++;
          noteError(`stream ${res.statusCode}`);
        }
        frames(res, (text, at) => {
          if (text.startsWith('event: error')) {
            totals.errorFrames++;
            noteError(`stream error frame: ${text.slice(0, 200)}`);
            return;
          }
          const changedAt = frameId(text);
          if (Number.isNaN(changedAt)) return;
          if (first) {
            first = false;
            cur.streamFirstMs.push(at - t0);
          } else {
            cur.streamDelayMs.push(at - changedAt);
          }
        });
        res.on('end', () => {
          ended = true;
          cur.endedByServer++;
          totals.endedByServer++;
          clearTimeout(timer);
          done();
        });
      });
      req.on('error', (err) => {
        if (ended) return;
        ended = true;
        cur.streamErrors++;
        totals.streamErrors++;
        noteError(`stream: ${err.message}`);
        clearTimeout(timer);
        done();
      });
      const timer = setTimeout(
        () => {
          if (ended) return;
          ended = true;
          cur.closedByClient++;
          totals.closedByClient++;
          if (first) {
            cur.noFrame++;
            totals.noFrame++;
          }
          req.destroy();
          done();
        },
        Math.max(1, t0 + periodMs - Date.now()),
      );
    });
    const wait = t0 + periodMs - Date.now();
    if (wait > 0) await sleep(wait);
  }
}

// ---- sampling ------------------------------------------------------------------------------

interface Sample {
  min: number;
  rss: number;
  anon: number;
  file: number;
  dbMap: number;
  /** The database file and its WAL, MiB on disk. */
  dbFile: number;
  heap: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  resources: number;
  cpu: number;
  genCpu: number;
  jobsPerSec: number;
  submitP50: number;
  submitP99: number;
  feedP50: number;
  feedP99: number;
  firstP50: number;
  firstP99: number;
  streamP50: number;
  streamP99: number;
  wsP50: number;
  wsP99: number;
  reopensPerSec: number;
  succeededPerSec: number;
  /** Jobs accepted and not yet seen succeeded on the first feed connection. */
  backlog: number;
  noFramePerSec: number;
  errors: number;
  load: number;
}

function slope(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return num / den;
}

const q = (list: number[], p: number) =>
  percentile(
    list.sort((a, b) => a - b),
    p,
  );
const f1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '-');
const f0 = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : '-');

const HEADERS = [
  'min',
  'RSS',
  'anon',
  'file',
  'db map',
  'db file',
  'heap',
  'heap tot',
  'ext',
  'cpu%',
  'gen%',
  'jobs/s',
  'sub p50',
  'sub p99',
  'feed p50',
  'feed p99',
  '1st p50',
  '1st p99',
  'ev p50',
  'ev p99',
  'ws p50',
  'ws p99',
  'opens/s',
  'done/s',
  'backlog',
  'no 1st/s',
  'err',
  'load',
];
function row(s: Sample): string[] {
  return [
    s.min.toFixed(2),
    f1(s.rss),
    f1(s.anon),
    f1(s.file),
    f1(s.dbMap),
    f1(s.dbFile),
    f1(s.heap),
    f1(s.heapTotal),
    f1(s.external),
    f0(s.cpu),
    f0(s.genCpu),
    f0(s.jobsPerSec),
    f1(s.submitP50),
    f1(s.submitP99),
    f0(s.feedP50),
    f0(s.feedP99),
    f1(s.firstP50),
    f1(s.firstP99),
    f0(s.streamP50),
    f0(s.streamP99),
    f0(s.wsP50),
    f0(s.wsP99),
    f0(s.reopensPerSec),
    f0(s.succeededPerSec),
    f0(s.backlog),
    f0(s.noFramePerSec),
    String(s.errors),
    s.load.toFixed(1),
  ];
}

// ---- the run -------------------------------------------------------------------------------

console.log(
  `soak: ${minutes} min, ${rate} jobs/s (${steps} progress reports ${stepMs} ms apart), ${feeds} feed connections, ${streams} per-job streams reopened ${reopens}/s, ${wsClients} WebSocket clients, ` +
    `worker concurrency ${concurrency}, sample every ${sampleS} s, slope after ${warmupMin} min${forceGc ? ', heap after a full GC' : ''}`,
);
console.log(`lib ${lib}; ${gitState(['src', 'bench/soak.ts'])}; node ${process.version}; ${loadNote('at start', true)}`);
if (nodeFlags.length > 0) console.log(`server node flags: ${nodeFlags.join(' ')}`);
if (process.env.MALLOC_ARENA_MAX) console.log(`MALLOC_ARENA_MAX=${process.env.MALLOC_ARENA_MAX}`);

const server = await startServer();
const pid = server.child.pid as number;
const inspector = await Inspector.connect(server.inspector);
console.log(
  `server pid ${pid} on ${server.base.href}; samples (MiB, ms; "1st" = per-job stream open to first frame, "ev" = change to receipt on them, "no 1st" = closed by the client before any frame, "backlog" = accepted and not yet seen succeeded):\n`,
);

const samples: Sample[] = [];
const t0 = performance.now();
const elapsedMin = () => (performance.now() - t0) / 60_000;
let lastCpu = procCpu(pid);
let lastAt = performance.now();
let lastGen = process.cpuUsage();
const snapshotsDone = new Set<number>();
if (snapshotDir) mkdirSync(snapshotDir, { recursive: true });

for (let i = 0; i < wsClients; i++) sockets.push(new WsClient(server.base, i));
const submitting = submitter(server.base);
const feedConns = Array.from({ length: feeds }, (_, i) => feedConnection(server.base, i < measuredFeeds, i));
const streamAgent = new http.Agent({ keepAlive: true, maxSockets: streams + 8 });
const periodMs = reopens > 0 ? (streams / reopens) * 1000 : Number.POSITIVE_INFINITY;
const slots = reopens > 0 ? Array.from({ length: streams }, () => streamSlot(server.base, streamAgent, periodMs)) : [];

console.log(table(HEADERS, []).split('\n')[0]);
let nextSample = sampleS * 1000;
while (elapsedMin() < minutes) {
  const wait = nextSample - (performance.now() - t0);
  if (wait > 0) await sleep(wait);
  nextSample += sampleS * 1000;
  const interval = cur;
  cur = fresh();
  const now = performance.now();
  const secs = (now - lastAt) / 1000;
  const cpuNow = procCpu(pid);
  const cpu = ((cpuNow - lastCpu) / secs) * 100;
  lastCpu = cpuNow;
  const gen = process.cpuUsage(lastGen);
  lastGen = process.cpuUsage();
  lastAt = now;
  if (forceGc) await inspector.call('HeapProfiler.collectGarbage');
  const mu = await inspector.evaluate<string>('JSON.stringify({ ...process.memoryUsage(), resources: process.getActiveResourcesInfo().length })');
  const m = JSON.parse(mu) as { heapUsed: number; heapTotal: number; external: number; arrayBuffers: number; resources: number };
  const proc = procMemory(pid);
  const s: Sample = {
    min: elapsedMin(),
    ...proc,
    dbMap: mappedDatabase(pid, join(dir, 'soak.db')),
    dbFile: fileMiB(join(dir, 'soak.db')) + fileMiB(join(dir, 'soak.db-wal')),
    heap: m.heapUsed / MiB,
    heapTotal: m.heapTotal / MiB,
    external: m.external / MiB,
    arrayBuffers: m.arrayBuffers / MiB,
    resources: m.resources,
    cpu,
    genCpu: ((gen.user + gen.system) / 1e6 / secs) * 100,
    jobsPerSec: interval.submitted / secs,
    submitP50: q(interval.submitMs, 0.5),
    submitP99: q(interval.submitMs, 0.99),
    feedP50: q(interval.feedDelayMs, 0.5),
    feedP99: q(interval.feedDelayMs, 0.99),
    firstP50: q(interval.streamFirstMs, 0.5),
    firstP99: q(interval.streamFirstMs, 0.99),
    streamP50: q(interval.streamDelayMs, 0.5),
    streamP99: q(interval.streamDelayMs, 0.99),
    wsP50: q(interval.wsDelayMs, 0.5),
    wsP99: q(interval.wsDelayMs, 0.99),
    reopensPerSec: interval.opened / secs,
    succeededPerSec: interval.succeeded / secs,
    backlog: feeds > 0 ? totals.submitted - totals.succeededOnFeed : Number.NaN,
    noFramePerSec: interval.noFrame / secs,
    errors: interval.submitErrors + interval.streamErrors + interval.feedErrors + interval.wsErrors,
    load: loadavg()[0] ?? Number.NaN,
  };
  samples.push(s);
  console.log(table(HEADERS, [row(s)]).split('\n')[2]);
  for (const at of snapshotAt) {
    if (snapshotDir && !snapshotsDone.has(at) && s.min >= at) {
      snapshotsDone.add(at);
      const file = join(snapshotDir, `soak-${String(at).padStart(3, '0')}min.heapsnapshot`);
      await inspector.heapSnapshot(file);
      console.log(`  heap snapshot written: ${file}`);
    }
  }
}

// Stop the load, then let the jobs already accepted finish.
running = false;
await submitting;
for (const c of feedConns) c.close();
for (const w of sockets) w.close();
await Promise.all(slots);
streamAgent.destroy();
const getJson = async (path: string) => (await fetch(new URL(path, server.base))).json() as Promise<{ counts: Record<string, number> }>;
let counts: Record<string, number> = {};
for (let i = 0; i < 120; i++) {
  counts = (await getJson('/v1/stats')).counts;
  if ((counts.queued ?? 0) + (counts.running ?? 0) + (counts.pending ?? 0) + (counts.retrying ?? 0) === 0) break;
  await sleep(500);
}
inspector.close();
const exited = new Promise((r) => server.child.once('exit', r));
server.child.kill('SIGTERM');
await Promise.race([exited, sleep(15_000)]);
if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill('SIGKILL');

const after = samples.filter((s) => s.min >= warmupMin);
const slopes = {
  rss: slope(after.map((s) => [s.min, s.rss])),
  anon: slope(after.map((s) => [s.min, s.anon])),
  file: slope(after.map((s) => [s.min, s.file])),
  dbMap: slope(after.map((s) => [s.min, s.dbMap])),
  heap: slope(after.map((s) => [s.min, s.heap])),
};
console.log(
  `\nslopes after ${warmupMin} min (${after.length} samples), MiB/min: RSS ${slopes.rss.toFixed(3)} (anonymous ${slopes.anon.toFixed(3)}, file-backed ${slopes.file.toFixed(3)}, of which the database's map ${slopes.dbMap.toFixed(3)}), heap ${slopes.heap.toFixed(3)}`,
);
console.log(
  `submitted ${totals.submitted} jobs (${totals.submitErrors} refused or failed, ${totals.submitRetries} sent again after a reset of a kept-alive socket); final counts ${JSON.stringify(counts)}; ` +
    `per-job streams opened ${totals.opened} (${totals.endedByServer} ended by the server, ${totals.closedByClient} closed by the client, ${totals.noFrame} of them before any frame, ${totals.streamErrors} errors, ${totals.errorFrames} error frames); ` +
    `WebSocket subscriptions ${totals.wsSubscribed} (${totals.wsEnded} followed to their end, ${totals.wsErrors} errors); ` +
    `feed errors ${totals.feedErrors}; server warnings/errors logged ${server.warnings}`,
);
for (const e of errorSamples) console.log(`  error: ${e}`);
for (const l of server.stderr) console.log(`  server: ${l}`);
console.log(loadNote('at end', false));
const result = {
  params: {
    minutes,
    rate,
    steps,
    stepMs,
    feeds,
    streams,
    wsClients,
    reopens,
    sampleS,
    warmupMin,
    concurrency,
    forceGc,
    lib,
    nodeFlags,
    mallocArenaMax: process.env.MALLOC_ARENA_MAX ?? null,
  },
  node: process.version,
  slopes,
  totals,
  counts,
  serverWarnings: server.warnings,
  samples,
};
if (outFile) writeFileSync(outFile, JSON.stringify(result, null, 1));
console.log(JSON.stringify({ ...result, samples: samples.length }));
rmSync(dir, { recursive: true, force: true });
