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
import { after, before, describe, it } from 'node:test';
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
  input: unknown;
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
    return this.list(`parentId=${parentId}&limit=1000`);
  }

  async list(query: string): Promise<Snapshot[]> {
    return (await this.call<{ items: Snapshot[] }>('GET', `/v1/jobs?${query}`)).body.items;
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
        const field = (name: string) =>
          block
            .split('\n')
            .find((l) => l.startsWith(`${name}: `))
            ?.slice(name.length + 2);
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
      throw new Error(
        `the stream of job ${id} did not end within ${timeoutMs} ms; last frames: ${JSON.stringify(frames.slice(-3).map((f) => [f.event, f.snapshot.status, f.snapshot.progress.percent]))}`,
      );
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

  /**
   * `longhaul server` (the API and a sweeper, no worker), or `longhaul dev` (the API, a worker
   * and a sweeper in one process); resolves once it listens.
   */
  async server(label = 'server', mode: 'server' | 'dev' = 'server'): Promise<{ proc: LhProcess; api: Api }> {
    const proc = new LhProcess([mode, '--port', '0', '--tasks', TASKS, '--drain-ms', '0'], this.env, `${this.name}/${label}#${++this.n}`);
    this.procs.push(proc);
    const m = await proc.waitOutput(/listening on (http:\/\/\S+)/, 'listening');
    proc.url = (m[1] as string).replace('localhost', '127.0.0.1');
    return { proc, api: new Api(proc.url) };
  }

  /** `longhaul worker`; resolves once it runs. */
  async worker(label = 'worker', concurrency = 10): Promise<LhProcess> {
    const proc = new LhProcess(
      ['worker', '--tasks', TASKS, '--concurrency', String(concurrency), '--drain-ms', '0'],
      this.env,
      `${this.name}/${label}#${++this.n}`,
    );
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
    // The reporter prints the stack, which holds the message as it was when the error was made.
    const extra = d.procs.map((p) => `\n${p.output()}`).join('');
    if (err instanceof Error) {
      err.message += extra;
      if (err.stack) err.stack += extra;
    }
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

before(() => {
  // The processes run the built CLI, and the fixture tasks import dist/index.js.
  assert.ok(existsSync(BIN), `${BIN} is missing: run \`npm run build\` first`);
});

after(async () => {
  await killAllChildren();
});

for (const store of STORES) {
  describe(`workflows with real processes on ${store.name}`, () => {
    it('fan-out: 10,000 children on 2 workers; an SSE client sees the parent progress rise; the result sums the children', { timeout: 90_000 }, async () => {
      await withDeployment(store, 'fanout', async (d) => {
        const { api } = await d.server();
        const workers = await Promise.all([d.worker('w1', 20), d.worker('w2', 20)]);
        const count = 10_000;
        const t0 = Date.now();
        // Children of 5 ms each: at 40 at a time, the fan-out lasts over a second whatever the
        // store's speed, long enough for a stream to see several steps of the parent's progress.
        const parent = await api.submit('wfe.fanout', { count, ms: 5 });
        const frames = await followSse(api.base, parent.id, 80_000);
        const elapsed = Date.now() - t0;
        const last = frames.at(-1)?.snapshot as Snapshot;
        assert.equal(last.status, 'succeeded', JSON.stringify(last.error));
        if ((last.result as { succeeded?: number }).succeeded !== count) {
          const failed = await api.list(`parentId=${parent.id}&status=failed,cancelled&limit=3`);
          const first = failed[0] ? await api.transitions(failed[0].id) : [];
          assert.fail(
            `not every child succeeded: ${JSON.stringify(last.result)}; for instance: ${JSON.stringify(failed.map((c) => [c.status, c.error, c.attempts]))}; log of the first: ${JSON.stringify(first)}`,
          );
        }
        // Both worker processes ran children.
        const pids = workers.map((w) => w.pid).sort((a, b) => a - b);
        assert.deepEqual(last.result, { total: count, succeeded: count, read: count, sum: (count * (count - 1)) / 2, pids });
        // The parent's own aggregate: the share of its children that ended, while it waits.
        const aggregate = frames.filter(
          (f) => f.snapshot.status === 'waiting' && f.snapshot.progress.stage === 'children' && f.snapshot.progress.percent !== null,
        );
        assert.ok(
          aggregate.every((f) => f.snapshot.progress.itemsTotal === count),
          'the aggregate counts the children as items',
        );
        const percents = aggregate.map((f) => f.snapshot.progress.percent as number);
        assert.ok(
          new Set(percents).size >= 3,
          `distinct aggregate percents over SSE: ${percents.join(', ')}; frames: ${frames.map((f) => `${f.event}:${f.snapshot.status}:${f.snapshot.progress.percent}@${f.snapshot.progress.updatedAt}`).join(' ')}`,
        );
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

    it('fail-fast: the third child fails; the parent fails with CHILD_FAILED and its running siblings end cancelled', { timeout: 40_000 }, async () => {
      await withDeployment(store, 'failfast', async (d) => {
        const { api } = await d.server();
        await d.worker('w', 10);
        const journal = d.journal('failfast');
        const held = [4, 5, 6, 7, 8];
        const children = [{ n: 1 }, { n: 2 }, { n: 3, fail: true, waitForStarts: 2 + held.length }, ...held.map((n) => ({ n, holdMs: 60_000 }))];
        const parent = await api.submit('wfe.parent', { journal, policy: 'fail-fast', children });
        const done = await api.settled(parent.id);
        assert.equal(done.status, 'failed');
        assert.equal(done.error?.code, 'CHILD_FAILED', JSON.stringify(done.error));
        // Cancelling a running child is a request its handler answers: wait for every child to end.
        const ended = await api.until(
          parent.id,
          (s) => (s.children?.byState.cancelled ?? 0) + (s.children?.byState.succeeded ?? 0) + (s.children?.byState.failed ?? 0) === 8,
          'every child to end',
        );
        assert.deepEqual(
          { succeeded: ended.children?.byState.succeeded, failed: ended.children?.byState.failed, cancelled: ended.children?.byState.cancelled },
          { succeeded: 2, failed: 1, cancelled: 5 },
        );
        const byN = new Map((await api.children(parent.id)).map((c) => [(c.input as { n: number }).n, c]));
        assert.equal(byN.get(3)?.error?.code, 'CHILD_BROKE');
        for (const n of held) assert.equal(byN.get(n)?.status, 'cancelled', `child ${n}`);
        // Every held sibling was running and heard its ctx.signal.
        const aborted = kinds(readJournal(journal), 'child-aborted').map((e) => e.n as number);
        assert.deepEqual(aborted.sort(), held);
        assert.ok((await api.log(parent.id)).includes('waiting>queued:child failed'));
        assert.equal(kinds(readJournal(journal), 'parent-run').length, 2, 'the parent ran, waited, and ran again to fail');
      });
    });

    it('cancelling a waiting parent over HTTP cancels its running children, whose ctx.signal fires', { timeout: 40_000 }, async () => {
      await withDeployment(store, 'cancel', async (d) => {
        const { api } = await d.server();
        await d.worker('w', 10);
        const journal = d.journal('cancel');
        const children = [0, 1, 2, 3].map((n) => ({ n, holdMs: 60_000 }));
        const parent = await api.submit('wfe.parent', { journal, policy: 'collect', children });
        await api.until(parent.id, (s) => s.status === 'waiting' && s.children?.byState.running === 4, 'the parent to wait with its 4 children running');
        const cancelled = await api.cancel(parent.id);
        assert.equal(cancelled.status, 'cancelled');
        const after = await api.until(parent.id, (s) => s.children?.byState.cancelled === 4, 'all 4 children to end cancelled');
        assert.equal(after.status, 'cancelled');
        const aborted = kinds(readJournal(journal), 'child-aborted').map((e) => e.n as number);
        assert.deepEqual(aborted.sort(), [0, 1, 2, 3], 'every running child heard its ctx.signal');
        for (const c of await api.children(parent.id)) {
          assert.equal(c.status, 'cancelled');
          assert.equal(c.error?.code, 'CANCELLED', JSON.stringify(c.error));
          const log = await api.log(c.id);
          assert.match(log.at(-2) ?? '', /^running>running:cancel requested/, log.join('\n'));
          assert.match(log.at(-1) ?? '', /^running>cancelled:/, log.join('\n'));
        }
      });
    });

    it('a pipeline whose worker is SIGKILLed in stage 2 resumes in stage 2 on another worker with stage 1 output; stage 1 does not run again', {
      timeout: 40_000,
    }, async () => {
      await withDeployment(store, 'pipeline', async (d) => {
        const { api } = await d.server();
        const w1 = await d.worker('w1', 2);
        const journal = d.journal('pipeline');
        const job = await api.submit('wfe.pipeline', { journal, rows: 3 });
        await waitFor(() => kinds(readJournal(journal), 'stage').some((e) => e.stage === 'two'), 'stage two to start', 20_000);
        // Progress is written behind the handler (coalesced): wait for it to show stage two.
        await api.until(job.id, (s) => s.status === 'running' && s.progress.stage === 'two', 'the job to show stage two');
        await w1.kill();
        const w2 = await d.worker('w2', 2);
        const done = await api.settled(job.id);
        assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
        assert.deepEqual(done.result, { loaded: 6 });
        assert.equal(done.attempts, 2);
        const who = (pid: number) => (pid === w1.pid ? 'w1' : pid === w2.pid ? 'w2' : `pid ${pid}`);
        assert.deepEqual(
          kinds(readJournal(journal), 'stage').map((e) => [e.stage, e.previous ?? null, who(e.pid)]),
          [
            ['one', null, 'w1'],
            ['two', { rows: 3 }, 'w1'],
            ['two', { rows: 3 }, 'w2'],
            ['three', { rows: 6 }, 'w2'],
          ],
        );
        const log = await api.log(job.id);
        assert.ok(log.includes('running>retrying:heartbeat lost; requeued'), log.join('\n'));
      });
    });

    it('a saga failing at its third step compensates steps two and one, in that order', { timeout: 30_000 }, async () => {
      await withDeployment(store, 'saga', async (d) => {
        const { api } = await d.server();
        await d.worker('w', 2);
        const journal = d.journal('saga');
        const job = await api.submit('wfe.saga', { journal, failAt: 'three' });
        const done = await api.settled(job.id);
        assert.equal(done.status, 'failed');
        assert.equal(done.error?.code, 'STEP_REFUSED');
        assert.equal(done.error?.compensated, true, JSON.stringify(done.error));
        assert.deepEqual(
          readJournal(journal).map((e) => `${e.kind} ${e.step}`),
          ['run one', 'run two', 'run three', 'compensate-start two', 'compensated two', 'compensate-start one', 'compensated one'],
        );
        const notes = (await api.log(job.id)).filter((l) => l.includes('compensat'));
        assert.deepEqual(notes, ['running>running:step three failed; compensating', 'running>running:compensated two', 'running>running:compensated one']);
      });
    });

    it('a saga whose worker is SIGKILLed during compensation resumes compensating after the restart', { timeout: 40_000 }, async () => {
      await withDeployment(store, 'saga-kill', async (d) => {
        const { api } = await d.server();
        const w1 = await d.worker('w1', 2);
        const journal = d.journal('saga-kill');
        const job = await api.submit('wfe.saga', { journal, failAt: 'three', blockCompensate: 'two' });
        await waitFor(() => kinds(readJournal(journal), 'compensate-start').length > 0, 'the compensation of step two to start', 20_000);
        await w1.kill();
        const w2 = await d.worker('w2', 2);
        const done = await api.settled(job.id);
        assert.equal(done.status, 'failed');
        assert.equal(done.error?.code, 'STEP_REFUSED');
        assert.equal(done.error?.compensated, true, JSON.stringify(done.error));
        const who = (pid: number) => (pid === w1.pid ? 'w1' : pid === w2.pid ? 'w2' : `pid ${pid}`);
        // The steps ran once; step two's compensation, interrupted by the kill, ran again (it
        // must be idempotent); each compensation completed once, two before one.
        assert.deepEqual(
          readJournal(journal).map((e) => `${e.kind} ${e.step} ${who(e.pid)}`),
          [
            'run one w1',
            'run two w1',
            'run three w1',
            'compensate-start two w1',
            'compensate-start two w2',
            'compensated two w2',
            'compensate-start one w2',
            'compensated one w2',
          ],
        );
        const log = await api.log(job.id);
        const reaped = log.findIndex((l) => l.includes('heartbeat lost'));
        assert.ok(reaped > 0, log.join('\n'));
        const notes = (from: number, to?: number) => log.slice(from, to).filter((l) => l.includes('compensat'));
        assert.deepEqual(notes(0, reaped), ['running>running:step three failed; compensating'], log.join('\n'));
        assert.deepEqual(notes(reaped), ['running>running:compensated two', 'running>running:compensated one'], log.join('\n'));
        assert.equal(log.at(-1), 'running>failed:fatal', log.join('\n'));
      });
    });

    it('a durable sleep survives SIGKILL of every process: fresh processes resume it after its wake-up time', { timeout: 40_000 }, async () => {
      await withDeployment(store, 'sleep', async (d) => {
        const first = await d.server('s1');
        const w1 = await d.worker('w1', 2);
        const journal = d.journal('sleep');
        const job = await first.api.submit('wfe.sleeper', { journal, ms: 3000 });
        const waiting = await first.api.until(job.id, (s) => s.status === 'waiting', 'the job to sleep');
        assert.equal(waiting.waitingFor?.kind, 'sleep');
        const sleeping = (await first.api.log(job.id)).find((l) => l.startsWith('running>waiting:sleeping until '));
        const wakeAt = Date.parse(sleeping?.slice('running>waiting:sleeping until '.length) ?? '');
        assert.ok(Number.isFinite(wakeAt), `the log says until when: ${sleeping}`);
        await d.killAll();
        assert.ok(Date.now() < wakeAt - 500, 'every process was killed well before the wake-up time');
        const second = await d.server('s2');
        const w2 = await d.worker('w2', 2);
        const done = await second.api.settled(job.id);
        assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
        assert.deepEqual(done.result, { slept: 3000 });
        assert.equal(done.attempts, 1, 'the sleep and the kills while it slept cost no attempt');
        assert.ok(Date.parse(done.finishedAt as string) >= wakeAt);
        const events = readJournal(journal);
        const who = (pid: number) => (pid === w1.pid ? 'w1' : pid === w2.pid ? 'w2' : `pid ${pid}`);
        assert.deepEqual(
          events.map((e) => `${e.kind} ${who(e.pid)}`),
          ['before-sleep w1', 'before-sleep w2', 'after-sleep w2'],
        );
        assert.ok((events[1] as JournalEvent).at >= wakeAt, 'the replay ran after the wake-up time');
        const log = await second.api.log(job.id);
        assert.ok(log.includes('waiting>queued:wait over'), log.join('\n'));
      });
    });

    it('a signal sent through server A wakes a job run next to server B; the handler gets its payload', { timeout: 40_000 }, async () => {
      await withDeployment(store, 'signal', async (d) => {
        const a = await d.server('A');
        // B serves the API and runs the only worker of the deployment.
        const b = await d.server('B', 'dev');
        const journal = d.journal('signal');
        const job = await b.api.submit('wfe.approval', { journal });
        const waiting = await b.api.until(job.id, (s) => s.status === 'waiting', 'the job to wait for its signal');
        assert.deepEqual(waiting.waitingFor, { kind: 'signal', name: 'approval', failFast: false });
        const sent = await a.api.signal(job.id, 'approval', { by: 'alice', amount: 42 });
        assert.equal(sent.status, 202);
        assert.deepEqual(sent.body, { jobId: job.id, name: 'approval', resumed: true });
        const done = await b.api.settled(job.id);
        assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
        assert.deepEqual(done.result, { approved: { by: 'alice', amount: 42 } });
        const events = readJournal(journal);
        assert.deepEqual(
          events.map((e) => e.kind),
          ['before-wait', 'before-wait', 'signalled'],
        );
        assert.ok(
          events.every((e) => e.pid === b.proc.pid),
          'B ran the job, before and after the signal',
        );
        assert.ok((await a.api.log(job.id)).includes('waiting>queued:signal approval'));
      });
    });

    it("a signal wait that times out takes the handler's WaitTimeoutError path", { timeout: 30_000 }, async () => {
      await withDeployment(store, 'wait-timeout', async (d) => {
        const { api } = await d.server();
        await d.worker('w', 2);
        const journal = d.journal('wait-timeout');
        const job = await api.submit('wfe.approval', { journal, timeoutMs: 800 });
        await api.until(job.id, (s) => s.status === 'waiting', 'the job to wait for its signal');
        const done = await api.settled(job.id);
        assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
        assert.deepEqual(done.result, { timedOut: 'WAIT_TIMEOUT', name: 'WaitTimeoutError' });
        const events = readJournal(journal);
        assert.deepEqual(
          events.map((e) => e.kind),
          ['before-wait', 'before-wait', 'timed-out'],
        );
        const log = await api.transitions(job.id);
        const woke = log.find((t) => t.from === 'waiting');
        assert.equal(woke?.reason, 'wait over');
        // The deadline counts from the waitFor call, just after the first 'before-wait' (the
        // suspend's own log time can be later, when its write waited for a busy store).
        const waitCalled = events[0]?.at ?? 0;
        assert.ok(Date.parse(woke?.at as string) - waitCalled >= 800, `woken at the deadline, not before (${Date.parse(woke?.at as string) - waitCalled} ms)`);
        // Over: a late signal is refused.
        const late = await api.signal(job.id, 'approval', { by: 'late' }, [409]);
        assert.equal(late.body.code, 'JOB_ENDED');
      });
    });
  });
}
