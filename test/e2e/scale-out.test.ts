/**
 * Scale-out on PostgreSQL with real processes: two API servers (`longhaul server`) and three
 * workers (`longhaul worker`) around one database, configured only by LONGHAUL_* variables.
 *
 * - A client follows a job over SSE and WebSocket through server A while it was submitted
 *   through server B and runs on a worker: progress arrives live, relayed by LISTEN/NOTIFY
 *   (a watch reads the store only every 2 s when a channel is connected, so a stream with
 *   many progress frames shows the relay), and progress never updates the jobs row.
 * - kill -9 of a worker mid-job: the job finishes on another worker, its effect happens once.
 * - A frozen worker (SIGSTOP) loses its lease; once it thaws, its late effect and completion
 *   are refused and the job keeps the result of the worker that took over.
 * - Server A, which holds the sweeper lock, killed: a client resumes its SSE stream on server B
 *   from Last-Event-ID, and another process takes over the sweeper (and reaps a dead worker's job).
 * - The same SSE path with LONGHAUL_REDIS_URL: events travel by Redis pub/sub (not NOTIFY) and
 *   progress snapshots are kept in Redis with a TTL. Skipped, saying so, when no Redis answers.
 *
 * Transactional enqueue and per-type concurrency under 4 worker processes are covered in
 * test/contract/postgres-store.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EventSource } from 'eventsource';
import { Redis } from 'ioredis';
import pg from 'pg';
import WebSocket from 'ws';
import { killAllChildren, waitFor } from '../fixtures/process-harness.js';
import { createScaleLedger } from '../fixtures/scale-tasks.js';
import { getJob, migrate, ServerProcess, submitJob, WorkerProcess, type LonghaulProcess } from '../support/cluster.js';
import { skipUnlessRedis, TEST_REDIS_URL } from '../support/redis.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const REDIS_URL = TEST_REDIS_URL;

/** Timing fit for tests (a loaded 2-core machine): fast heartbeats and sweeps, a lease lost after 3 s of silence. */
const FAST: Record<string, string> = {
  LONGHAUL_LOG_LEVEL: 'warn',
  LONGHAUL_HEARTBEAT_INTERVAL_MS: '250',
  LONGHAUL_HEARTBEAT_TIMEOUT_MS: '3000',
  LONGHAUL_SWEEP_INTERVAL_MS: '200',
  LONGHAUL_PG_POOL_SIZE: '4',
};

interface Frame {
  event: string;
  id: string;
  snapshot: { status: string; progress: { percent: number | null; itemsDone: number | null; updatedAt: string | null }; result: unknown };
}

/** Follows /v1/jobs/{id}/events on `base` until the terminal frame. */
function followSse(base: string, id: string, timeoutMs = 60_000): Promise<Frame[]> {
  return new Promise((resolve, reject) => {
    const frames: Frame[] = [];
    const es = new EventSource(`${base}/v1/jobs/${id}/events`);
    const timer = setTimeout(() => {
      es.close();
      reject(new Error(`SSE of job ${id} did not end within ${timeoutMs} ms; frames so far: ${JSON.stringify(frames.map((f) => f.event))}`));
    }, timeoutMs);
    const on = (event: string) =>
      es.addEventListener(event, (e) => {
        const snapshot = JSON.parse(e.data) as Frame['snapshot'];
        frames.push({ event, id: e.lastEventId, snapshot });
        if (['succeeded', 'failed', 'cancelled', 'expired'].includes(snapshot.status)) {
          clearTimeout(timer);
          es.close();
          resolve(frames);
        }
      });
    on('status');
    on('progress');
    es.addEventListener('error', (e) => {
      // EventSource reconnects by itself after a dropped connection; a refusal is final.
      if (es.readyState === EventSource.CLOSED) {
        clearTimeout(timer);
        reject(new Error(`SSE of job ${id} failed: ${(e as { message?: string }).message ?? 'closed'}`));
      }
    });
  });
}

/** Subscribes to job `id` over /v1/ws on `base` and collects snapshots until the terminal one. */
function followWs(base: string, id: string, timeoutMs = 60_000): Promise<Frame['snapshot'][]> {
  return new Promise((resolve, reject) => {
    const snaps: Frame['snapshot'][] = [];
    const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/ws`);
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`WebSocket of job ${id} did not end within ${timeoutMs} ms`));
    }, timeoutMs);
    ws.on('open', () => ws.send(JSON.stringify({ op: 'subscribe', id })));
    ws.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    ws.on('message', (data) => {
      const msg = JSON.parse(String(data)) as { type: string; job: Frame['snapshot']; message?: string };
      if (msg.type === 'error') {
        clearTimeout(timer);
        ws.close();
        reject(new Error(`WebSocket error: ${msg.message}`));
        return;
      }
      snaps.push(msg.job);
      if (['succeeded', 'failed', 'cancelled', 'expired'].includes(msg.job.status)) {
        clearTimeout(timer);
        ws.close();
        resolve(snaps);
      }
    });
  });
}

/**
 * Reads /v1/jobs/{id}/events on `base` (sending Last-Event-ID when given) until `enough` says
 * so or the stream ends; returns the frames read.
 */
async function readSse(base: string, id: string, lastEventId: number | null, enough: (frames: Frame[]) => boolean, timeoutMs = 60_000): Promise<Frame[]> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const frames: Frame[] = [];
  try {
    const res = await fetch(`${base}/v1/jobs/${id}/events`, {
      headers: lastEventId === null ? {} : { 'last-event-id': String(lastEventId) },
      signal: controller.signal,
    });
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
        frames.push({ event, id: field('id') ?? '', snapshot: JSON.parse(data) as Frame['snapshot'] });
        if (enough(frames)) return frames;
      }
    }
    return frames;
  } catch (err) {
    if (controller.signal.aborted) throw new Error(`the stream of job ${id} on ${base} did not satisfy the test within ${timeoutMs} ms (${frames.length} frames)`);
    throw err;
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

/** Distinct progress values (itemsDone) seen while the job was running. */
function liveProgressSteps(snaps: Frame['snapshot'][]): number {
  return new Set(snaps.filter((s) => s.status === 'running' && s.progress.itemsDone !== null).map((s) => s.progress.itemsDone)).size;
}

async function withDiagnostics<T>(procs: LonghaulProcess[], fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    for (const p of procs) (err as Error).message += `\n${p.output()}`;
    throw err;
  }
}

async function query<T extends pg.QueryResultRow = Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(text, values)).rows;
  } finally {
    await c.end();
  }
}

after(async () => {
  await killAllChildren();
});

describe('scale-out on PostgreSQL: 2 API servers, 3 workers (LISTEN/NOTIFY)', () => {
  let db: TestDatabase;
  let env: Record<string, string>;
  let serverA: ServerProcess;
  let serverB: ServerProcess;
  let workers: WorkerProcess[] = [];
  const all = (): LonghaulProcess[] => [serverA, serverB, ...workers].filter(Boolean);

  /** Waits until job `id` runs, then kill -9s the worker running it. */
  async function killWorkerRunning(id: string): Promise<{ start: { pid: number; lease: number }; victim: WorkerProcess }> {
    const start = await firstStart(db.url, id);
    const victim = workers.find((w) => w.pid === start.pid);
    assert.ok(victim, `the job started on one of the workers (pid ${start.pid})`);
    victim.child.proc.kill('SIGKILL');
    await victim.child.exited;
    return { start, victim };
  }

  before(async () => {
    db = await createTestDatabase('lh_scale');
    env = { ...FAST, LONGHAUL_DATABASE_URL: db.url, LONGHAUL_REDIS_URL: '', LH_LEDGER_URL: db.url };
    // `longhaul migrate` from several machines at once: one migrates, the others wait and find it done.
    const runs = await Promise.all([1, 2, 3].map((i) => migrate(env, `migrate#${i}`)));
    for (const r of runs) assert.equal(r.code, 0, r.output);
    await createScaleLedger(await pgPool(db.url));
    // Server A first, alone: its sweeper takes the cluster-wide sweeper lock, so freezing or
    // killing a worker below never stops the sweeper.
    serverA = await ServerProcess.start(env, 'server-A');
    await waitFor(
      async () => (await query<{ n: number }>(db.url, "SELECT count(*)::integer AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"))[0]?.n === 1,
      'the sweeper lock to be taken by server A',
      30_000,
    );
    [serverB, ...workers] = await Promise.all([
      ServerProcess.start(env, 'server-B'),
      ...[1, 2, 3].map((i) => WorkerProcess.start(env, `worker-${i}`, 4)),
    ]);
  });

  after(async () => {
    await Promise.all(all().map((p) => p.stop()));
    await closePools();
    await db?.drop();
  });

  it('a job submitted through server B, run by a worker, streams live through server A (SSE and WebSocket); progress never updates the jobs row', async () => {
    await withDiagnostics(all(), async () => {
      // A test-side listener on the NOTIFY channel: the events really cross processes there.
      const listener = new pg.Client({ connectionString: db.url });
      await listener.connect();
      const relayed: string[] = [];
      listener.on('notification', (m) => relayed.push(m.payload ?? ''));
      await listener.query('LISTEN longhaul_events');
      try {
        const job = await submitJob(serverB.url, 'scale.progress', { steps: 30, stepMs: 100 });
        const [frames, wsSnaps, rowSamples] = await Promise.all([
          followSse(serverA.url, job.id),
          followWs(serverA.url, job.id),
          sampleRow(db.url, job.id),
        ]);
        const last = frames[frames.length - 1] as Frame;
        assert.equal(last.event, 'status');
        assert.equal(last.snapshot.status, 'succeeded');
        assert.equal(last.snapshot.progress.percent, 100);
        const ranOn = (last.snapshot.result as { pid: number }).pid;
        assert.ok(
          workers.some((w) => w.pid === ranOn),
          `ran on a worker process (pid ${ranOn})`,
        );
        assert.ok(frames.some((f) => f.event === 'status' && f.snapshot.status === 'running'), 'a status frame for running');
        // 30 steps over ~3 s. A watch without relayed events would read the store every 2 s.
        const sseSteps = liveProgressSteps(frames.map((f) => f.snapshot));
        assert.ok(sseSteps >= 8, `SSE through server A saw ${sseSteps} distinct progress steps live`);
        assert.ok(frames.filter((f) => f.event === 'progress').length >= 8);
        const wsSteps = liveProgressSteps(wsSnaps);
        assert.ok(wsSteps >= 8, `WebSocket through server A saw ${wsSteps} distinct progress steps live`);
        assert.equal(wsSnaps[wsSnaps.length - 1]?.status, 'succeeded');
        // Frame ids only move forward.
        const ids = frames.map((f) => Number(f.id));
        assert.deepEqual(
          ids,
          [...ids].sort((a, b) => a - b),
        );
        assert.ok(relayed.some((p) => p.includes(job.id) && p.includes('job:progress')), 'progress went over NOTIFY');
        // While it ran, progress moved but the jobs row's updated_at never did.
        const running = rowSamples.filter((s) => s.state === 'running');
        assert.ok(running.length >= 2, `sampled the running job ${running.length} times`);
        assert.ok(new Set(running.map((s) => s.progressAt)).size >= 2, 'progress moved while sampled');
        assert.equal(new Set(running.map((s) => s.updatedAt)).size, 1, 'the jobs row was not updated by progress');
      } finally {
        await listener.end();
      }
    });
  });

  it('kill -9 of a worker mid-job: the job finishes on another worker and its effect happens once', async () => {
    await withDiagnostics(all(), async () => {
      const job = await submitJob(serverB.url, 'scale.effect', { ms: 60_000, retryMs: 200 });
      const { start, victim } = await killWorkerRunning(job.id);
      const done = await succeeded(serverA.url, job.id);
      const result = done.result as { pid: number; lease: number; effect: boolean };
      assert.notEqual(result.pid, victim.pid);
      assert.ok(result.lease > start.lease, 'a later lease finished it');
      assert.ok(Number(done.attempts) >= 2, `attempts: ${String(done.attempts)}`);
      const effects = await query<{ pid: number; lease: number }>(db.url, 'SELECT pid, lease FROM scale_effects WHERE job_id = $1', [job.id]);
      assert.deepEqual(effects, [{ pid: result.pid, lease: result.lease }], 'exactly one effect, by the worker that finished it');
      workers = workers.filter((w) => w !== victim);
      assert.equal(workers.length, 2);
    });
  });

  it('a frozen worker loses its lease: its late effect and completion are refused, the job keeps the result of the worker that took over', async () => {
    await withDiagnostics(all(), async () => {
      const firstMs = 2000;
      const job = await submitJob(serverB.url, 'scale.effect', { ms: firstMs, retryMs: 100 });
      const start = await firstStart(db.url, job.id);
      const frozenAt = Date.now();
      const stale = workers.find((w) => w.pid === start.pid);
      assert.ok(stale, `the job started on one of the workers (pid ${start.pid})`);
      stale.signal('SIGSTOP');
      try {
        const done = await succeeded(serverA.url, job.id);
        assert.notEqual((done.result as { pid: number }).pid, stale.pid);
        // Thaw only once the frozen attempt's sleep is over: it goes straight to its effect.
        const wait = frozenAt + firstMs - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      } finally {
        stale.signal('SIGCONT');
      }
      // The stale attempt reaches its effect: refused (its lease is gone).
      await waitFor(
        async () => (await query(db.url, "SELECT 1 FROM scale_events WHERE job_id = $1 AND kind = 'stale' AND pid = $2", [job.id, stale.pid])).length === 1,
        'the stale attempt to find its lease gone',
        30_000,
      );
      // Its completion is refused too: by the store (CAS on the lease), or by the worker itself
      // when a heartbeat told it first that the lease was gone.
      await stale.waitOutput(/completion refused|lease lost while running/, 'the stale completion to be refused', 30_000);
      const final = await getJob(serverA.url, job.id);
      assert.equal(final.status, 'succeeded');
      const result = final.result as { pid: number; lease: number };
      assert.notEqual(result.pid, stale.pid);
      const effects = await query<{ pid: number; lease: number }>(db.url, 'SELECT pid, lease FROM scale_effects WHERE job_id = $1', [job.id]);
      assert.deepEqual(effects, [{ pid: result.pid, lease: result.lease }], 'exactly one effect');
      const log = (await (await fetch(`${serverB.url}/v1/jobs/${job.id}/transitions`)).json()) as { items: { to: string; workerId: string | null }[] };
      assert.equal(log.items.filter((t) => t.to === 'succeeded').length, 1, 'completed once');
      assert.ok(!log.items.some((t) => t.to === 'succeeded' && t.workerId?.includes(`:${stale.pid}:`)), 'not by the frozen worker');
    });
  });

  it('server A (the sweeper) killed: a client resumes its stream on server B from Last-Event-ID, and the sweeper role moves to another process', async () => {
    await withDiagnostics(all(), async () => {
      const lockHolder = async () =>
        (
          await query<{ pid: number }>(
            db.url,
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
          )
        ).map((r) => r.pid);
      const [before] = await lockHolder();
      assert.ok(before !== undefined, 'a sweeper holds the lock');
      const job = await submitJob(serverB.url, 'scale.progress', { steps: 40, stepMs: 100 });
      // Follow through A until a few progress frames arrived, then A dies under the client.
      const first = await readSse(serverA.url, job.id, null, (frames) => frames.filter((f) => f.event === 'progress').length >= 3);
      serverA.child.proc.kill('SIGKILL');
      await serverA.child.exited;
      const lastId = Number(first.at(-1)?.id);
      // The client reconnects to the other server, saying what it has seen.
      const rest = await readSse(serverB.url, job.id, lastId, (frames) => frames.some((f) => f.snapshot.status === 'succeeded'));
      assert.ok(rest.length >= 2, `frames after resuming: ${rest.length}`);
      assert.ok(
        rest.every((f) => Number(f.id) > lastId),
        'nothing the client had already seen is sent again',
      );
      assert.equal(rest.at(-1)?.snapshot.status, 'succeeded');
      assert.equal(rest.at(-1)?.snapshot.progress.percent, 100);
      // A's session ended with it, and so did its advisory lock: another process sweeps now.
      const after = await waitFor(
        async () => {
          const pids = await lockHolder();
          return pids.length === 1 && pids[0] !== before ? pids[0] : undefined;
        },
        'another process to take the sweeper lock',
        30_000,
      );
      assert.notEqual(after, before);
      // And it sweeps: a job whose worker dies is requeued and finished elsewhere.
      const job2 = await submitJob(serverB.url, 'scale.effect', { ms: 60_000, retryMs: 100 });
      const { victim } = await killWorkerRunning(job2.id);
      const done = await succeeded(serverB.url, job2.id);
      assert.notEqual((done.result as { pid: number }).pid, victim.pid);
    });
  });
});

const redisSkip = await skipUnlessRedis();

describe('scale-out with Redis (LONGHAUL_REDIS_URL)', { skip: redisSkip }, () => {
  let db: TestDatabase;
  let procs: LonghaulProcess[] = [];
  const prefix = `lhtest:${process.pid}:${Date.now()}:`;

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await closePools();
    await db?.drop();
  });

  it('a job submitted through server B streams live through server A; events go by Redis pub/sub and progress is kept in Redis with a TTL', async () => {
    db = await createTestDatabase('lh_scale_redis');
    const env = { ...FAST, LONGHAUL_DATABASE_URL: db.url, LONGHAUL_REDIS_URL: REDIS_URL, LONGHAUL_REDIS_PREFIX: prefix, LH_LEDGER_URL: db.url };
    assert.equal((await migrate(env, 'migrate')).code, 0);
    procs = await Promise.all([ServerProcess.start(env, 'redis-server-A'), ServerProcess.start(env, 'redis-server-B'), WorkerProcess.start(env, 'redis-worker', 4)]);
    const [a, b] = procs as [ServerProcess, ServerProcess, WorkerProcess];
    assert.match(a.stdout, /events {5}redis:\/\/\S+ \(Redis pub\/sub/);
    const sub = new Redis(REDIS_URL);
    const redis = new Redis(REDIS_URL);
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const notified: string[] = [];
    listener.on('notification', (m) => notified.push(m.payload ?? ''));
    await listener.query('LISTEN longhaul_events');
    const published: string[] = [];
    sub.on('message', (_channel: string, message: string) => published.push(message));
    await sub.subscribe(`${prefix}events`);
    try {
      await withDiagnostics(procs, async () => {
        // Both servers and the worker subscribe (plus this test).
        await waitFor(async () => {
          const [, n] = (await redis.pubsub('NUMSUB', `${prefix}events`)) as [string, number];
          return Number(n) >= 4;
        }, 'every process to subscribe', 30_000);
        const job = await submitJob(b.url, 'scale.progress', { steps: 30, stepMs: 100 });
        const frames = await followSse(a.url, job.id);
        const last = frames[frames.length - 1] as Frame;
        assert.equal(last.snapshot.status, 'succeeded');
        assert.equal(last.snapshot.progress.percent, 100);
        const steps = liveProgressSteps(frames.map((f) => f.snapshot));
        assert.ok(steps >= 8, `SSE through server A saw ${steps} distinct progress steps live`);
        assert.ok(published.some((m) => m.includes(job.id) && m.includes('job:progress')), 'progress was published on Redis');
        assert.ok(published.some((m) => m.includes(job.id) && m.includes('job:changed')), 'changes were published on Redis');
        assert.equal(notified.filter((p) => p.includes(job.id)).length, 0, 'no job events over NOTIFY when Redis carries them');
        const key = `${prefix}progress:${job.id}`;
        const [stored, ttl] = await Promise.all([redis.get(key), redis.pttl(key)]);
        assert.ok(stored, 'the progress snapshot is in Redis');
        assert.equal((JSON.parse(stored) as { itemsDone: number }).itemsDone, 30);
        assert.ok(ttl > 0 && ttl <= 3_600_000, `with a TTL (${ttl} ms)`);
      });
    } finally {
      await listener.end();
      sub.disconnect();
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    }
  });
});

// ---- helpers ----

/** The first attempt of job `id` as the ledger recorded it (which worker, which lease). */
function firstStart(url: string, id: string): Promise<{ pid: number; lease: number }> {
  return waitFor(
    async () => (await query<{ pid: number; lease: number }>(url, "SELECT pid, lease FROM scale_events WHERE job_id = $1 AND kind = 'start' ORDER BY at LIMIT 1", [id]))[0],
    `job ${id} to start on a worker`,
    30_000,
  );
}

/** The snapshot of job `id` (read through the server at `base`) once it succeeded. */
function succeeded(base: string, id: string): Promise<Awaited<ReturnType<typeof getJob>>> {
  return waitFor(
    async () => {
      const s = await getJob(base, id);
      return s.status === 'succeeded' ? s : undefined;
    },
    `job ${id} to succeed`,
    60_000,
    100,
  );
}

const pools: pg.Pool[] = [];
async function pgPool(url: string): Promise<pg.Pool> {
  const p = new pg.Pool({ connectionString: url, max: 2 });
  pools.push(p);
  return p;
}
async function closePools(): Promise<void> {
  await Promise.all(pools.splice(0).map((p) => p.end()));
}

/** Samples the job's row and progress until it is terminal. */
async function sampleRow(url: string, id: string): Promise<{ state: string; updatedAt: string; progressAt: string | null }[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const out: { state: string; updatedAt: string; progressAt: string | null }[] = [];
  try {
    for (let i = 0; i < 2000; i++) {
      const res = await c.query<{ state: string; updated_at: string; progress_at: string | null }>(
        'SELECT j.state, j.updated_at::text, p.updated_at::text AS progress_at FROM longhaul.jobs j LEFT JOIN longhaul.progress p ON p.job_id = j.id WHERE j.id = $1',
        [id],
      );
      const r = res.rows[0];
      if (r) {
        out.push({ state: r.state, updatedAt: r.updated_at, progressAt: r.progress_at });
        if (['succeeded', 'failed', 'cancelled'].includes(r.state)) break;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    await c.end();
  }
  return out;
}

