/**
 * The workload of bench/workflows.ts on BullMQ flows + the local Redis (the peer).
 * BullMQ and ioredis are devDependencies of bench/ only: `cd bench && npm install` first.
 *
 *   node --import tsx bench/peers/bullmq-flows.ts [--children 10000,100000] [--workers 1,2]
 *        [--concurrency 10] [--runs 3] [--fanin 200x10,20x1000] [--fanin-mode burst,seq]
 *        [--fanin-runs 1] [--seq-parents 50] [--redis redis://127.0.0.1:6379]   (--runs 0: fan-in only)
 *
 * One queue holds parents and children; --workers Worker instances in this process run both
 * (the processor looks at the job's name), each at --concurrency, connected before any clock starts.
 * The bench queue's keys are deleted before each run; BullMQ defaults otherwise (completed jobs kept).
 *
 * Spawning: FlowProducer.add of one parent with N children (the parent waits in
 * `waiting-children`, as a Longhaul parent waits in `waiting`; unlike Longhaul, the parent's
 * processor has not run before: a flow is created from outside). Figures:
 *   - spawn: the add call (the flow's one MULTI with every job), children/s = N / that;
 *   - first child started (processor) after the add returned;
 *   - run: from the add's end to the parent's `completed` event in this process;
 *   - the tail: the last child's `completed` event → the parent's processor running.
 * Fan-in: P flows of K children, `burst` (every flow added at once, one FlowProducer.add each,
 * in parallel) or `seq` (one at a time). Per parent: the last child's finishedOn (ms, the worker's
 * clock) → the parent's `waiting` event with prev `waiting-children` (its id in the queue's
 * event stream is Redis's clock in ms; the stream's length limit is raised before the run so
 * nothing is trimmed) and → the parent's processedOn (claimed again: its move to active); and
 * in this process (performance.now) the last child's `completed` event → the parent's processor.
 *
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { createRequire } from 'node:module';
import { FlowProducer, type Job, Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { fmtMs, listFlag, loadNote, median, numFlag, strFlag, table } from '../lib/util.js';
import { fanInModes, fanInShapes, fmtP, int, pct } from '../lib/workflow-shapes.js';

const SIZES = listFlag('children', [10_000, 100_000]);
const WORKERS = listFlag('workers', [1, 2]);
const CONCURRENCY = numFlag('concurrency', 10);
const RUNS = numFlag('runs', 3);
const FANIN_RUNS = numFlag('fanin-runs', 1);
const SEQ_PARENTS = numFlag('seq-parents', 50);
const url = new URL(strFlag('redis') ?? 'redis://127.0.0.1:6379');
const connection = { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
const PREFIX = 'lhbench';
const QUEUE = 'bench-flows';

const FANIN = fanInShapes();
const MODES = fanInModes();

/** Deletes every key of the bench queue (SCAN + UNLINK on its prefix only), then lifts the event stream's length limit. */
async function reset(redis: Redis): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${PREFIX}:${QUEUE}:*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.unlink(...keys);
  } while (cursor !== '0');
  await redis.hset(`${PREFIX}:${QUEUE}:meta`, 'opts.maxLenEvents', 100_000_000);
}

interface ParentProbe {
  rerun?: number;
  lastChildEnd?: number;
  firstChildStart?: number;
  done?: number;
}
const probes = new Map<string, ParentProbe>();
const probe = (id: string): ParentProbe => {
  let p = probes.get(id);
  if (!p) {
    p = {};
    probes.set(id, p);
  }
  return p;
};

function parentIdOf(job: Job): string | undefined {
  return job.parent?.id ?? job.opts.parent?.id;
}

async function processor(job: Job): Promise<unknown> {
  if (job.name === 'parent') {
    probe(job.id as string).rerun = performance.now();
    return { ok: true };
  }
  const pid = parentIdOf(job);
  if (pid !== undefined) {
    const p = probe(pid);
    if (p.firstChildStart === undefined) p.firstChildStart = performance.now();
  }
  return null;
}

/** Workers connected and ready before any clock starts, following children's and parents' completions. */
async function startWorkers(n: number): Promise<Worker[]> {
  const workers = Array.from({ length: n }, () => new Worker(QUEUE, processor, { connection, prefix: PREFIX, concurrency: CONCURRENCY, autorun: false }));
  for (const w of workers) {
    w.on('completed', (job) => {
      const now = performance.now();
      if (job.name === 'parent') probe(job.id as string).done = now;
      else {
        const pid = parentIdOf(job);
        if (pid !== undefined) probe(pid).lastChildEnd = now;
      }
    });
    w.on('failed', (job, err) => console.error(`job ${job?.id} failed: ${err.message}`));
    await w.waitUntilReady();
  }
  for (const w of workers) void w.run();
  return workers;
}

async function waitUntil(done: () => boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const childSpecs = new Map<number, { name: string; queueName: string; data: { i: number } }[]>();
function children(n: number): { name: string; queueName: string; data: { i: number } }[] {
  let c = childSpecs.get(n);
  if (!c) {
    c = Array.from({ length: n }, (_, i) => ({ name: 'child', queueName: QUEUE, data: { i } }));
    childSpecs.set(n, c);
  }
  return c;
}

interface SpawnRun {
  n: number;
  workers: number;
  spawnMs: number;
  childrenPerSec: number;
  spawnCpuMs: number;
  firstStartMs: number;
  runMs: number;
  runPerSec: number;
  tailRerunMs: number;
  totalMs: number;
}

async function spawnRun(redis: Redis, n: number, workers: number): Promise<SpawnRun> {
  await reset(redis);
  probes.clear();
  const flows = new FlowProducer({ connection, prefix: PREFIX });
  const ws = await startWorkers(workers);
  const queue = new Queue(QUEUE, { connection, prefix: PREFIX, streams: { events: { maxLen: 100_000_000 } } });
  try {
    await Promise.all([flows.waitUntilReady(), queue.waitUntilReady()]);
    const specs = children(n);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const tree = await flows.add({ name: 'parent', queueName: QUEUE, data: { n }, children: specs });
    const t1 = performance.now();
    const cpu = process.cpuUsage(cpu0);
    const id = tree.job.id as string;
    await waitUntil(() => probes.get(id)?.done !== undefined, 'the parent', 1_800_000);
    const p = probe(id);
    const counts = await queue.getJobCounts('completed', 'failed');
    if (counts.completed !== n + 1) throw new Error(`expected ${n + 1} completed jobs, found ${JSON.stringify(counts)}`);
    const spawnMs = t1 - t0;
    const runMs = (p.done as number) - t1;
    return {
      n,
      workers,
      spawnMs,
      childrenPerSec: n / (spawnMs / 1000),
      spawnCpuMs: (cpu.user + cpu.system) / 1000,
      firstStartMs: (p.firstChildStart as number) - t1,
      runMs,
      runPerSec: n / (runMs / 1000),
      tailRerunMs: (p.rerun as number) - (p.lastChildEnd as number),
      totalMs: (p.done as number) - t0,
    };
  } finally {
    for (const w of ws) await w.close();
    await flows.close();
    await queue.close();
  }
}

interface FanInResult {
  shape: string;
  mode: string;
  parents: number;
  logResume: number[];
  logClaim: number[];
  procRerun: number[];
  wallMs: number;
}

/** The parents' `waiting` events after `waiting-children`, by job id: the stream entry's time (ms, Redis's clock). */
async function resumedAt(redis: Redis): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let start = '-';
  for (;;) {
    const entries = (await redis.xrange(`${PREFIX}:${QUEUE}:events`, start, '+', 'COUNT', 10_000)) as [string, string[]][];
    for (const [id, fields] of entries) {
      const f: Record<string, string> = {};
      for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i] as string] = fields[i + 1] as string;
      if (f.event === 'waiting' && f.prev === 'waiting-children' && f.jobId !== undefined) out.set(f.jobId, Number(id.split('-')[0]));
    }
    if (entries.length < 10_000) break;
    start = `(${(entries[entries.length - 1] as [string, string[]])[0]}`;
  }
  return out;
}

async function fanInRun(redis: Redis, parents: number, k: number, mode: string): Promise<FanInResult> {
  await reset(redis);
  probes.clear();
  const flows = new FlowProducer({ connection, prefix: PREFIX });
  const ws = await startWorkers(1);
  // The queue writes its event stream's length limit into the queue's meta key: keep every event (the default trims to 10,000).
  const queue = new Queue(QUEUE, { connection, prefix: PREFIX, streams: { events: { maxLen: 100_000_000 } } });
  try {
    await Promise.all([flows.waitUntilReady(), queue.waitUntilReady()]);
    await redis.hset(`${PREFIX}:${QUEUE}:meta`, 'opts.maxLenEvents', 100_000_000);
    const specs = children(k);
    const trees: { parent: string; children: string[] }[] = [];
    const toTree = (t: Awaited<ReturnType<FlowProducer['add']>>) => ({
      parent: t.job.id as string,
      children: (t.children ?? []).map((c) => c.job.id as string),
    });
    const t0 = performance.now();
    if (mode === 'burst') {
      const added = await Promise.all(Array.from({ length: parents }, () => flows.add({ name: 'parent', queueName: QUEUE, data: { n: k }, children: specs })));
      trees.push(...added.map(toTree));
      await waitUntil(() => trees.every((t) => probes.get(t.parent)?.done !== undefined), 'the parents', 1_800_000);
    } else {
      for (let i = 0; i < Math.min(parents, SEQ_PARENTS); i++) {
        const t = toTree(await flows.add({ name: 'parent', queueName: QUEUE, data: { n: k }, children: specs }));
        trees.push(t);
        await waitUntil(() => probes.get(t.parent)?.done !== undefined, 'the parent', 600_000);
      }
    }
    const wallMs = performance.now() - t0;
    const resumed = await resumedAt(redis);
    const logResume: number[] = [];
    const logClaim: number[] = [];
    const procRerun: number[] = [];
    for (const t of trees) {
      const parentJob = await queue.getJob(t.parent);
      const at = resumed.get(t.parent);
      if (!parentJob?.processedOn || at === undefined) throw new Error(`parent ${t.parent}: no resumption found`);
      let lastEnd = 0;
      for (let i = 0; i < t.children.length; i += 500) {
        const jobs = await Promise.all(t.children.slice(i, i + 500).map((id) => queue.getJob(id)));
        for (const j of jobs) {
          if (!j?.finishedOn) throw new Error(`child ${j?.id} did not finish`);
          lastEnd = Math.max(lastEnd, j.finishedOn);
        }
      }
      logResume.push(at - lastEnd);
      logClaim.push(parentJob.processedOn - lastEnd);
      const p = probe(t.parent);
      procRerun.push((p.rerun as number) - (p.lastChildEnd as number));
    }
    return { shape: `${parents}x${k}`, mode, parents: trees.length, logResume, logClaim, procRerun, wallMs };
  } finally {
    for (const w of ws) await w.close();
    await flows.close();
    await queue.close();
  }
}


const redis = new Redis(connection);
try {
  const require = createRequire(import.meta.url);
  const bullmqVersion = (require('bullmq/package.json') as { version: string }).version;
  const ioredisVersion = (require('ioredis/package.json') as { version: string }).version;
  const info = await redis.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  const notes = [
    loadNote('at start', true),
    `Node ${process.version}, bullmq ${bullmqVersion}, ioredis ${ioredisVersion}, Redis ${redisVersion} at ${url.host} (separate process)`,
    `one queue for parents and children; Workers in this process at concurrency ${CONCURRENCY} each; queue keys deleted before each run; BullMQ defaults (completed jobs kept)`,
  ];
  const spawnRuns: SpawnRun[] = [];
  for (const n of SIZES) {
    for (const w of WORKERS) {
      for (let run = 1; run <= RUNS; run++) {
        const r = await spawnRun(redis, n, w);
        spawnRuns.push(r);
        console.error(
          `spawn n=${n} workers=${w} run ${run}: add ${r.spawnMs.toFixed(0)} ms (${int(r.childrenPerSec)} children/s), 1st child +${r.firstStartMs.toFixed(0)} ms, ` +
            `run ${r.runMs.toFixed(0)} ms (${int(r.runPerSec)}/s), last child → parent processor +${r.tailRerunMs.toFixed(2)} ms`,
        );
      }
    }
  }
  const fanIns: FanInResult[] = [];
  for (const shape of FANIN) {
    for (const mode of MODES) {
      const merged: FanInResult = { shape: `${shape.parents}x${shape.children}`, mode, parents: 0, logResume: [], logClaim: [], procRerun: [], wallMs: 0 };
      for (let run = 1; run <= FANIN_RUNS; run++) {
        const r = await fanInRun(redis, shape.parents, shape.children, mode);
        merged.parents += r.parents;
        merged.logResume.push(...r.logResume);
        merged.logClaim.push(...r.logClaim);
        merged.procRerun.push(...r.procRerun);
        merged.wallMs += r.wallMs;
        console.error(`fan-in ${r.shape} ${mode} run ${run}: ${(r.wallMs / 1000).toFixed(1)} s; resume p50 ${fmtMs(pct(r.logResume).p50)} ms`);
      }
      fanIns.push(merged);
    }
  }
  await reset(redis);
  notes.push(loadNote('at end', false));
  if (spawnRuns.length > 0) {
    console.log(`\nBullMQ flows (Redis): one parent with N children; medians of ${RUNS} run(s) (every run in brackets)\n`);
    const rows: string[][] = [];
    for (const n of SIZES) {
      for (const w of WORKERS) {
        const rs = spawnRuns.filter((r) => r.n === n && r.workers === w);
        const cell = (f: (r: SpawnRun) => number, fmt: (x: number) => string) => `${fmt(median(rs.map(f)))} (${rs.map((r) => fmt(f(r))).join(', ')})`;
        const ms0 = (x: number) => x.toFixed(0);
        rows.push([
          int(n),
          String(w),
          cell((r) => r.spawnMs, ms0),
          cell((r) => r.childrenPerSec, int),
          cell((r) => r.spawnCpuMs, ms0),
          cell((r) => r.firstStartMs, ms0),
          cell((r) => r.runMs, ms0),
          cell((r) => r.runPerSec, int),
          cell(
            (r) => r.tailRerunMs,
            (x) => x.toFixed(1),
          ),
          cell((r) => r.totalMs, ms0),
        ]);
      }
    }
    console.log(
      table(
        [
          'children',
          'workers',
          'add ms',
          'children inserted/s',
          'add CPU ms',
          'add → 1st child started ms',
          'run ms',
          'children run/s',
          'last child → parent ms',
          'total ms',
        ],
        rows,
      ),
    );
  }
  if (fanIns.length > 0) {
    console.log('\nBullMQ flows (Redis): fan-in latency per parent, ms, p50 / p99 / max\n');
    console.log(
      table(
        [
          'parents x children',
          'mode',
          'parents',
          'last child finishedOn → waiting event',
          '→ parent processedOn',
          'in-process: child completed → parent processor',
          'wall s',
        ],
        fanIns.map((f) => [f.shape, f.mode, String(f.parents), fmtP(f.logResume), fmtP(f.logClaim), fmtP(f.procRerun), (f.wallMs / 1000).toFixed(1)]),
      ),
    );
  }
  for (const n of notes) console.log(`  note: ${n}`);
  console.log(
    JSON.stringify({
      system: 'BullMQ flows (Redis)',
      concurrency: CONCURRENCY,
      spawn: spawnRuns,
      fanIn: fanIns.map((f) => ({
        shape: f.shape,
        mode: f.mode,
        parents: f.parents,
        wallMs: f.wallMs,
        logResume: pct(f.logResume),
        logClaim: pct(f.logClaim),
        procRerun: pct(f.procRerun),
      })),
      notes,
    }),
  );
} finally {
  redis.disconnect();
}
