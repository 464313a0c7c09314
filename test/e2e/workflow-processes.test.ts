/**
 * Workflows with real processes: the built `longhaul server` and `longhaul worker`
 * (dist/cli/main.js, run `npm run build` first) around one database, SQLite file or
 * PostgreSQL, with the tasks of test/fixtures/workflow-tasks.mjs. Everything the test does goes
 * through HTTP (submit, read, cancel, signal, SSE); what the handlers did is read from a journal
 * file they append to (the processes are separate). Processes are stopped with SIGKILL, never
 * gracefully, where a test is about a crash.
 *
 * - Fan-out at scale: a parent spawns 10,000 children run by 2 worker processes; an SSE client
 *   on a server process sees the parent's aggregate progress rise; the result sums the children.
 * - fail-fast (the third child fails: the parent fails, open siblings are cancelled), and
 *   cancelling a parent over HTTP cancels its running children, whose ctx.signal fires.
 * - A pipeline whose worker is SIGKILLed in stage 2 resumes in stage 2 elsewhere, stage 1 not again.
 * - A saga compensates in reverse order; one whose worker is SIGKILLed during compensation
 *   resumes compensating after the restart.
 * - A durable sleep survives SIGKILL of every process.
 * - A signal sent through server A wakes a job a worker runs next to server B.
 * - A signal wait that times out takes the handler's WaitTimeoutError path.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { killAllChildren, tempDir, WorkerChild, waitFor } from '../fixtures/process-harness.js';
import { createTestDatabase } from '../support/postgres.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const BIN = join(ROOT, 'dist/cli/main.js');
const TASKS = join(ROOT, 'test/fixtures/workflow-tasks.mjs');
const TERMINAL = ['succeeded', 'failed', 'cancelled', 'expired'];

/**
 * Timing fit for tests on a loaded 2-core machine: fast heartbeats and sweeps, so the reaper
 * requeues a SIGKILLed worker's job within a couple of seconds.
 */
const FAST: Record<string, string> = {
  LONGHAUL_LOG_LEVEL: 'warn',
  LONGHAUL_HEARTBEAT_INTERVAL_MS: '250',
  LONGHAUL_HEARTBEAT_TIMEOUT_MS: '2000',
  LONGHAUL_SWEEP_INTERVAL_MS: '100',
  LONGHAUL_CANCEL_DRAIN_MS: '1000',
  LONGHAUL_PG_POOL_SIZE: '4',
  LONGHAUL_REDIS_URL: '',
  // Every API server of one deployment signs result URLs with one shared secret (required on PostgreSQL).
  LONGHAUL_URL_SIGNING_SECRET: 'test-workflow-url-signing-secret-0123456789',
};

/** One built `longhaul` process, with its output kept for diagnostics. */
class LhProcess {
  stdout = '';
  url = '';
  readonly child: WorkerChild;

  constructor(
    args: string[],
    env: Record<string, string>,
    readonly label: string,
  ) {
    const proc = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = new WorkerChild(proc, label);
    proc.stdout?.on('data', (chunk: string) => {
      this.stdout = (this.stdout + chunk).slice(-100_000);
    });
  }

  get pid(): number {
    return this.child.pid;
  }

  async waitOutput(pattern: RegExp, what: string): Promise<RegExpMatchArray> {
    return waitFor(
      () => {
        const m = this.stdout.match(pattern);
        if (m) return m;
        if (this.child.exitInfo) throw new Error(`${this.label} exited (${JSON.stringify(this.child.exitInfo)}) before ${what}:\n${this.output()}`);
        return undefined;
      },
      `${this.label}: ${what}`,
      30_000,
      20,
    );
  }

  output(): string {
    return `--- ${this.label} stdout ---\n${this.stdout.slice(-3000)}\n--- ${this.label} stderr ---\n${this.child.stderr.slice(-3000)}`;
  }

  /** kill -9: no drain, no hand-back, nothing written on the way out. */
  async kill(): Promise<void> {
    await this.child.kill();
  }
}

interface Frame {
  event: string;
  snapshot: Snapshot;
}

interface Snapshot {
  id: string;
  status: string;
  attempts: number;
  result: unknown;
  error: (Record<string, unknown> & { code?: string; message?: string }) | null;
  progress: { percent: number | null; stage: string | null; itemsDone: number | null; itemsTotal: number | null; updatedAt: string | null };
  waitingFor: { kind: string; name: string | null } | null;
  children: { total: number; byState: Record<string, number> } | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
}

interface Transition {
  from: string | null;
  to: string;
  reason: string;
  at: string;
  attempt: number;
}

/** The HTTP API of one server process. */
class Api {
  constructor(readonly base: string) {}

  private async call<T>(method: string, path: string, body?: unknown, expect: number[] = [200, 202]): Promise<{ status: number; body: T }> {
    const res = await fetch(`${this.base}${path}`, {
      method,
      ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    const parsed = (text ? JSON.parse(text) : null) as T;
    if (!expect.includes(res.status)) throw new Error(`${method} ${path} answered ${res.status}: ${text}`);
    return { status: res.status, body: parsed };
  }

  async submit(type: string, input: unknown): Promise<Snapshot> {
    return (await this.call<Snapshot>('POST', '/v1/jobs', { type, input })).body;
  }

  async get(id: string): Promise<Snapshot> {
    return (await this.call<Snapshot>('GET', `/v1/jobs/${id}`)).body;
  }

  async transitions(id: string): Promise<Transition[]> {
    return (await this.call<{ items: Transition[] }>('GET', `/v1/jobs/${id}/transitions`)).body.items;
  }

  /** `from>to:reason` lines. */
  async log(id: string): Promise<string[]> {
    return (await this.transitions(id)).map((t) => `${t.from}>${t.to}:${t.reason}`);
  }

  async cancel(id: string): Promise<Snapshot> {
    return (await this.call<Snapshot>('POST', `/v1/jobs/${id}/cancel`)).body;
  }

  signal(id: string, name: string, payload: unknown, expect = [202]) {
    return this.call<Record<string, unknown>>('POST', `/v1/jobs/${id}/signals/${name}`, payload, expect);
  }

  async children(parentId: string): Promise<Snapshot[]> {
    return (await this.call<{ items: Snapshot[] }>('GET', `/v1/jobs?parentId=${parentId}&limit=1000`)).body.items;
  }

  /** Polls the job until `pred` holds (a test-side wait on a condition, not a stream). */
  until(id: string, pred: (s: Snapshot) => boolean, what: string, timeoutMs = 20_000): Promise<Snapshot> {
    return waitFor(
      async () => {
        const s = await this.get(id);
        return pred(s) ? s : undefined;
      },
      `job ${id}: ${what}`,
      timeoutMs,
      50,
    );
  }

  settled(id: string, timeoutMs = 30_000): Promise<Snapshot> {
    return this.until(id, (s) => TERMINAL.includes(s.status), 'to finish', timeoutMs);
  }
}

/**
 * Reads /v1/jobs/{id}/events until the terminal frame: the client learns everything from the
 * stream, never by polling.
 */
async function followSse(base: string, id: string, timeoutMs: number): Promise<Frame[]> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const frames: Frame[] = [];
  try {
    const res = await fetch(`${base}/v1/jobs/${id}/events`, { signal: controller.signal });
    assert.equal(res.status, 200);
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const field = (name: string) => block.split('\n').find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2);
        const data = field('data');
        const event = field('event');
        if (data === undefined || event === undefined) continue;
        const snapshot = JSON.parse(data) as Snapshot;
        frames.push({ event, snapshot });
        if (TERMINAL.includes(snapshot.status)) return frames;
      }
    }
    return frames;
  } catch (err) {
    if (controller.signal.aborted) {
      throw new Error(`the stream of job ${id} did not end within ${timeoutMs} ms; last frames: ${JSON.stringify(frames.slice(-3).map((f) => [f.event, f.snapshot.status, f.snapshot.progress.percent]))}`);
    }
    throw err;
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

type JournalEvent = Record<string, unknown> & { kind: string; pid: number; at: number };

function readJournal(path: string): JournalEvent[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as JournalEvent);
}

/** A deployment of one test: its database, its processes, and a journal file for its handlers. */
class Deployment {
  readonly procs: LhProcess[] = [];
  private n = 0;

  constructor(
    readonly env: Record<string, string>,
    readonly dir: string,
    readonly name: string,
  ) {}

  /** `longhaul server` (the API and a sweeper, no worker); resolves once it listens. */
  async server(label = 'server'): Promise<{ proc: LhProcess; api: Api }> {
    const proc = new LhProcess(['server', '--port', '0', '--tasks', TASKS], this.env, `${this.name}/${label}#${++this.n}`);
    this.procs.push(proc);
    const m = await proc.waitOutput(/listening on (http:\/\/\S+)/, 'listening');
    proc.url = (m[1] as string).replace('localhost', '127.0.0.1');
    return { proc, api: new Api(proc.url) };
  }

  /** `longhaul worker`; resolves once it runs. */
  async worker(label = 'worker', concurrency = 10): Promise<LhProcess> {
    const proc = new LhProcess(['worker', '--tasks', TASKS, '--concurrency', String(concurrency), '--drain-ms', '0'], this.env, `${this.name}/${label}#${++this.n}`);
    this.procs.push(proc);
    await proc.waitOutput(/longhaul worker running/, 'running');
    return proc;
  }

  journal(name: string): string {
    return join(this.dir, `${name}.jsonl`);
  }

  async killAll(): Promise<void> {
    await Promise.all(this.procs.map((p) => p.kill()));
  }
}

interface StoreTarget {
  name: string;
  /** A fresh database for one test: its URL or path, and how to drop it. */
  create(dir: string): Promise<{ database: string; drop(): Promise<void> }>;
}

const STORES: StoreTarget[] = [
  { name: 'SQLite', create: async (dir) => ({ database: join(dir, 'longhaul.db'), drop: async () => {} }) },
  {
    name: 'PostgreSQL',
    create: async () => {
      const db = await createTestDatabase('lh_wfe');
      return { database: db.url, drop: () => db.drop() };
    },
  },
];

async function withDeployment(store: StoreTarget, name: string, fn: (d: Deployment) => Promise<void>): Promise<void> {
  const tmp = tempDir(`lh-wfe-${name}-`);
  const db = await store.create(tmp.dir);
  const d = new Deployment({ ...FAST, LONGHAUL_DATABASE_URL: db.database }, tmp.dir, `${store.name}/${name}`);
  try {
    await fn(d);
  } catch (err) {
    for (const p of d.procs) (err as Error).message += `\n${p.output()}`;
    throw err;
  } finally {
    await d.killAll();
    await db.drop();
    tmp.remove();
  }
}

function kinds(events: JournalEvent[], kind: string): JournalEvent[] {
  return events.filter((e) => e.kind === kind);
}

after(async () => {
  await killAllChildren();
});

for (const store of STORES) {
  describe(`workflows with real processes on ${store.name}`, () => {
    it('fan-out: 10,000 children on 2 workers; an SSE client sees the parent progress rise; the result sums the children', { timeout: 90_000 }, async () => {
      await withDeployment(store, 'fanout', async (d) => {
        const { api } = await d.server();
        await Promise.all([d.worker('w1', 50), d.worker('w2', 50)]);
        const count = 10_000;
        const t0 = Date.now();
        const parent = await api.submit('wfe.fanout', { count });
        const frames = await followSse(api.base, parent.id, 80_000);
        const elapsed = Date.now() - t0;
        const last = frames.at(-1)?.snapshot as Snapshot;
        assert.equal(last.status, 'succeeded', JSON.stringify(last.error));
        assert.deepEqual(last.result, { total: count, succeeded: count, read: count, sum: (count * (count - 1)) / 2 });
        // The parent's own aggregate: the share of its children that ended, while it waits.
        const percents = frames
          .filter((f) => f.snapshot.status === 'waiting' && f.snapshot.progress.stage === 'children' && f.snapshot.progress.percent !== null)
          .map((f) => f.snapshot.progress.percent as number);
        assert.ok(new Set(percents).size >= 3, `distinct aggregate percents over SSE: ${percents.join(", ")}; frames: ${frames.map((f) => `${f.event}:${f.snapshot.status}:${f.snapshot.progress.percent}@${f.snapshot.progress.updatedAt}`).join(" ")}`);
        assert.ok(
          percents.every((p, i) => i === 0 || p >= (percents[i - 1] as number)),
          `the aggregate never goes back: ${percents.join(', ')}`,
        );
        const waitingFrames = frames.filter((f) => f.snapshot.status === 'waiting');
        assert.ok(
          waitingFrames.some((f) => f.event === 'progress'),
          `progress frames while waiting: ${frames.map((f) => `${f.event}:${f.snapshot.status}`).join(' ')}`,
        );
        const children = (await api.get(parent.id)).children;
        assert.deepEqual(children?.total, count);
        assert.equal(children?.byState.succeeded, count);
        console.log(`${store.name} fan-out of ${count}: ${elapsed} ms, ${frames.length} SSE frames, percents ${percents.join(' ')}`);
      });
    });
  });
}
