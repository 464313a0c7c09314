/**
 * Workflows: spawning children and fan-in, on SQLite or PostgreSQL (the peer: bench/peers/bullmq-flows.ts).
 *
 *   node --import tsx bench/workflows.ts [--store sqlite|pg] [--children 10000,100000] [--workers 1,2]
 *        [--concurrency 10] [--runs 3] [--fanin 200x10,20x1000] [--fanin-mode burst,seq] [--fanin-runs 1] [--seq-parents 50]
 *        [--no-baseline] [--no-sweeper] [--lib dist] [--profile PREFIX] [--pg postgres://postgres@127.0.0.1:5432/postgres]
 *
 * Spawning, for each size N in --children, each worker count in --workers and each run, on a
 * fresh SQLite file (or a fresh PostgreSQL database, dropped after):
 *   the workers (`lh.startWorker`, in this process, each at --concurrency) are started, one parent
 *   is submitted; its handler calls ctx.spawn with N trivial children (the spec array is built
 *   before the clock starts). Figures:
 *   - spawn: from the ctx.spawn call to the moment it throws the suspension (the store's
 *     transaction committed: the parent `waiting`, every child inserted); children/s = N / that.
 *     Split from the parent's log entry running → waiting, whose time is taken when the
 *     children rows are prepared and the store write begins: "prepare" before it, "store" after.
 *   - run: from the spawn's end to the parent `succeeded` (the job:changed event on the
 *     in-process bus): every child run, the fan-in, the parent's handler run again;
 *     children run/s = N / that. CPU time of this process over spawn and over run.
 *   - spawn → first child claimed (its queued → running event on the bus).
 *   - the tail: last child's end (bus event) → parent resumed (waiting → queued on the bus) →
 *     its handler running again.
 *   The parent's result (its spawn's summary) must count N children succeeded. Then, unless
 *   --no-baseline, the same N jobs without a parent on another fresh file or database: enqueued
 *   with submitMany in chunks of 1000 (no worker running), then run by the same number of
 *   workers: the reference for "children inserted/s" and "children run/s" in the same run.
 *
 * Fan-in, for each PxK in --fanin and each mode in --fanin-mode, on a fresh file or database:
 *   P parents each spawn K trivial children; `burst` submits the P parents at once, `seq` one at
 *   a time (the next after the previous succeeded: an otherwise idle worker; at most
 *   --seq-parents, default 50, of them). For each parent,
 *   from the transition logs (`lh.transitions`, millisecond times): the last child's end (the
 *   latest entry into a terminal state among its children) → the parent's `waiting → queued`
 *   entry (resumption), and → its second `queued → running` entry (claimed again); and, in
 *   this process (performance.now, sub-millisecond), the last child's end event on the bus →
 *   the parent's handler running again. p50 / p99 / max over the parents. Also from the logs:
 *   the parent's running → waiting (its spawn) → its first child's claim.
 *
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { packageVersion, serverNote, withDatabase } from './lib/pg-database.js';
import { boolFlag, fmtMs, gitState, listFlag, loadNote, median, numFlag, profiled, strFlag, table } from './lib/util.js';
import { fanInModes, fanInShapes, fmtP, int, pct } from './lib/workflow-shapes.js';

const STORE = strFlag('store') ?? 'sqlite';
if (STORE !== 'sqlite' && STORE !== 'pg') throw new Error('--store is sqlite or pg');
const SIZES = listFlag('children', [10_000, 100_000]);
const WORKERS = listFlag('workers', [1, 2]);
const CONCURRENCY = numFlag('concurrency', 10);
const RUNS = numFlag('runs', 3);
const FANIN_RUNS = numFlag('fanin-runs', 1);
/** At most this many parents in `seq` mode (each one waits for the one before). */
const SEQ_PARENTS = numFlag('seq-parents', 50);
const SWEEPER = !boolFlag('no-sweeper');
/** After each spawn run, the same N children as plain jobs (submitMany, then the same workers): the same run's reference. */
const BASELINE = !boolFlag('no-baseline');
const PROFILE = strFlag('profile');
const LIB = strFlag('lib');

const FANIN = fanInShapes();
const MODES = fanInModes();

type Lib = typeof import('../src/index.js');
type Longhaul = import('../src/index.js').Longhaul;
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);
const { defineTask } = lib;
const logger = pino({ level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'longhaul-wf-bench-'));
let fileCounter = 0;

/** What the handlers report, by parent id (module state: one benchmark phase at a time). */
interface ParentProbe {
  /** performance.now() / Date.now() at the ctx.spawn call of the first run. */
  spawnCall?: number;
  spawnCallWall?: number;
  /** performance.now() when ctx.spawn threw the suspension (the store's write committed). */
  suspended?: number;
  cpuAtCall?: NodeJS.CpuUsage;
  spawnCpuUs?: number;
  /** performance.now() / Date.now() at the start of the handler's run after the fan-in. */
  rerun?: number;
  rerunWall?: number;
  /** In-process events: the last child's end, the parent's waiting → queued, its success. */
  lastChildEnd?: number;
  resumed?: number;
  done?: number;
  runs: number;
}
const probes = new Map<string, ParentProbe>();
/** performance.now() when a child was first claimed (its queued → running event) in this phase. */
let firstChildClaimed: number | undefined;
const probe = (id: string): ParentProbe => {
  let p = probes.get(id);
  if (!p) {
    p = { runs: 0 };
    probes.set(id, p);
  }
  return p;
};
/** The children specs of each size, built once, before any clock starts. */
const specCache = new Map<number, { type: string; input: { i: number } }[]>();
function specs(n: number): { type: string; input: { i: number } }[] {
  let s = specCache.get(n);
  if (!s) {
    s = Array.from({ length: n }, (_, i) => ({ type: 'wf.bench.child', input: { i } }));
    specCache.set(n, s);
  }
  return s;
}

const child = defineTask({ type: 'wf.bench.child', maxAttempts: 1, run: () => null });
const parent = defineTask({
  type: 'wf.bench.parent',
  maxAttempts: 1,
  async run(input: unknown, ctx) {
    const { n } = input as { n: number };
    const p = probe(ctx.job.id);
    p.runs++;
    if (p.runs > 1) {
      p.rerun = performance.now();
      p.rerunWall = Date.now();
    }
    const children = specs(n);
    const first = p.runs === 1;
    if (first) {
      p.cpuAtCall = process.cpuUsage();
      p.spawnCallWall = Date.now();
      p.spawnCall = performance.now();
    }
    try {
      const summary = await ctx.spawn(children, { failurePolicy: 'collect' });
      return { total: summary.total, succeeded: summary.succeeded };
    } catch (err) {
      if (first && err instanceof Error && err.name === 'Suspended') {
        p.suspended = performance.now();
        const cpu = process.cpuUsage(p.cpuAtCall);
        p.spawnCpuUs = cpu.user + cpu.system;
      }
      throw err;
    }
  },
});

/** Opens Longhaul on a fresh SQLite file or PostgreSQL database, runs `fn`, closes and removes it. */
async function withLonghaul<T>(fn: (lh: Longhaul) => Promise<T>): Promise<T> {
  const open = async (database: string) => {
    const lh = await lib.Longhaul.open({ database, tasks: [parent, child], logger });
    try {
      return await fn(lh);
    } finally {
      await lh.close();
    }
  };
  if (STORE === 'pg') return withDatabase('lhbench_wf', (db) => open(db.url));
  fileCounter++;
  const file = join(dir, `wf-${fileCounter}.db`);
  try {
    return await open(file);
  } finally {
    for (const f of [file, `${file}-wal`, `${file}-shm`]) rmSync(f, { force: true });
  }
}

/** Follows the in-process bus: children's ends, parents resumed and done. */
function watchBus(lh: Longhaul): () => void {
  return lh.bus.on('job:changed', (e) => {
    const now = performance.now();
    if (e.parentId && (e.to === 'succeeded' || e.to === 'failed' || e.to === 'cancelled')) probe(e.parentId).lastChildEnd = now;
    else if (e.type === 'wf.bench.child' && e.to === 'running')
      firstChildClaimed ??= now; // claim events carry no parentId
    else if (e.type === 'wf.bench.parent') {
      if (e.from === 'waiting' && e.to === 'queued') probe(e.id).resumed = now;
      else if (e.to === 'succeeded' || e.to === 'failed') probe(e.id).done = now;
    }
  });
}

async function waitUntil(done: () => boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const ms = (t: string) => Date.parse(t);

interface SpawnRun {
  n: number;
  workers: number;
  spawnMs: number;
  prepareMs: number;
  storeMs: number;
  childrenPerSec: number;
  runMs: number;
  runPerSec: number;
  spawnCpuMs: number;
  runCpuMs: number;
  /** From the spawn's end to the first child claimed. */
  firstClaimMs: number;
  tailResumeMs: number;
  tailRerunMs: number;
  tailDoneMs: number;
  totalMs: number;
  /** The same jobs without a parent: submitMany in chunks of 1000 (jobs/s), then run by the same workers (jobs/s). */
  plainInsertPerSec?: number;
  plainRunPerSec?: number;
}

/** N plain jobs of the children's type: enqueued with submitMany (chunks of 1000, no worker running), then run by `workers` workers. */
async function plainRun(n: number, workers: number): Promise<{ insertPerSec: number; runPerSec: number }> {
  return withLonghaul(async (lh) => {
    const batches: { type: string; input: { i: number } }[][] = [];
    const all = specs(n);
    for (let i = 0; i < n; i += 1000) batches.push(all.slice(i, i + 1000));
    const t0 = performance.now();
    for (const b of batches) await lh.submitMany(b);
    const t1 = performance.now();
    const handles: { stats: { succeeded: number } }[] = [];
    for (let w = 0; w < workers; w++) handles.push(await lh.startWorker({ concurrency: CONCURRENCY, sweeper: SWEEPER && w === 0 }));
    await waitUntil(() => handles.reduce((sum, h) => sum + h.stats.succeeded, 0) >= n, 'the plain jobs', 1_800_000);
    const t2 = performance.now();
    return { insertPerSec: n / ((t1 - t0) / 1000), runPerSec: n / ((t2 - t1) / 1000) };
  });
}

async function spawnRun(n: number, workers: number, run: number): Promise<SpawnRun> {
  specs(n);
  probes.clear();
  firstChildClaimed = undefined;
  return withLonghaul(async (lh) => {
    const unwatch = watchBus(lh);
    try {
      for (let w = 0; w < workers; w++) await lh.startWorker({ concurrency: CONCURRENCY, sweeper: SWEEPER && w === 0 });
      const file = PROFILE && `${PROFILE}-${STORE}-n${n}-w${workers}-run${run}.cpuprofile`;
      const { id, runCpuMs } = await profiled(file, 100, async () => {
        const job = await lh.submit('wf.bench.parent', { n });
        await waitUntil(() => probes.get(job.id)?.suspended !== undefined, 'the spawn', 600_000);
        const cpu0 = process.cpuUsage();
        await waitUntil(() => probes.get(job.id)?.done !== undefined, 'the parent to finish', 1_800_000);
        const cpu = process.cpuUsage(cpu0);
        return { id: job.id, runCpuMs: (cpu.user + cpu.system) / 1000 };
      });
      const p = probe(id);
      const snap = await lh.get(id);
      if (snap?.status !== 'succeeded') throw new Error(`parent ended ${snap?.status}`);
      const counted = (snap.result as { total: number; succeeded: number }) ?? { total: 0, succeeded: 0 };
      if (counted.total !== n || counted.succeeded !== n) throw new Error(`parent saw ${JSON.stringify(counted)}, expected ${n} succeeded`);
      const log = await lh.transitions(id);
      const toWaiting = log.find((t) => t.from === 'running' && t.to === 'waiting');
      if (!toWaiting || p.spawnCall === undefined || p.suspended === undefined || p.spawnCallWall === undefined) throw new Error('spawn not observed');
      const spawnMs = p.suspended - p.spawnCall;
      const prepareMs = ms(toWaiting.at) - p.spawnCallWall;
      const runMs = (p.done as number) - p.suspended;
      return {
        n,
        workers,
        spawnMs,
        prepareMs,
        storeMs: spawnMs - prepareMs,
        childrenPerSec: n / (spawnMs / 1000),
        runMs,
        runPerSec: n / (runMs / 1000),
        spawnCpuMs: (p.spawnCpuUs ?? 0) / 1000,
        runCpuMs,
        firstClaimMs: (firstChildClaimed as number) - p.suspended,
        tailResumeMs: (p.resumed as number) - (p.lastChildEnd as number),
        tailRerunMs: (p.rerun as number) - (p.lastChildEnd as number),
        tailDoneMs: (p.done as number) - (p.lastChildEnd as number),
        totalMs: (p.done as number) - p.spawnCall,
      };
    } finally {
      unwatch();
    }
  });
}

interface FanInResult {
  shape: string;
  mode: string;
  parents: number;
  /** Per parent, ms: log last child end → log waiting→queued, → log queued→running again; bus last child end → handler again. */
  logResume: number[];
  logClaim: number[];
  procRerun: number[];
  /** Per parent, ms, from the logs: its running → waiting (the spawn) → its first child claimed. */
  firstClaim: number[];
  wallMs: number;
  reasons: Record<string, number>;
}

/** Runs `fn` over `items` with at most `width` at once. */
async function pooled<T, R>(items: readonly T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i] as T);
      }
    }),
  );
  return out;
}

async function fanInRun(parents: number, k: number, mode: string): Promise<FanInResult> {
  specs(k);
  probes.clear();
  return withLonghaul(async (lh) => {
    const unwatch = watchBus(lh);
    try {
      await lh.startWorker({ concurrency: CONCURRENCY, sweeper: SWEEPER });
      const ids: string[] = [];
      const t0 = performance.now();
      if (mode === 'burst') {
        const jobs = await lh.submitMany(Array.from({ length: parents }, () => ({ type: 'wf.bench.parent', input: { n: k } })));
        ids.push(...jobs.map((j) => j.id));
        await waitUntil(() => ids.every((id) => probes.get(id)?.done !== undefined), 'the parents', 1_800_000);
      } else {
        for (let i = 0; i < Math.min(parents, SEQ_PARENTS); i++) {
          const job = await lh.submit('wf.bench.parent', { n: k });
          ids.push(job.id);
          await waitUntil(() => probes.get(job.id)?.done !== undefined, 'the parent', 600_000);
        }
      }
      const wallMs = performance.now() - t0;
      const logResume: number[] = [];
      const logClaim: number[] = [];
      const procRerun: number[] = [];
      const firstClaim: number[] = [];
      const reasons: Record<string, number> = {};
      for (const id of ids) {
        const log = await lh.transitions(id);
        const resumed = log.find((t) => t.from === 'waiting' && t.to === 'queued');
        const claims = log.filter((t) => t.from === 'queued' && t.to === 'running');
        const end = log.find((t) => t.to === 'succeeded');
        if (!resumed || claims.length < 2 || !end) throw new Error(`parent ${id}: unexpected log ${log.map((t) => `${t.from}>${t.to}`).join(' ')}`);
        reasons[resumed.reason] = (reasons[resumed.reason] ?? 0) + 1;
        const childIds: string[] = [];
        let cursor: string | null = null;
        do {
          const page: { items: { id: string }[]; nextCursor: string | null } = await lh.list({ parentId: id, limit: 1000, cursor });
          childIds.push(...page.items.map((c) => c.id));
          cursor = page.nextCursor;
        } while (cursor !== null);
        if (childIds.length !== k) throw new Error(`parent ${id}: ${childIds.length} children listed, expected ${k}`);
        const times = await pooled(childIds, STORE === 'pg' ? 16 : 1, async (cid) => {
          const cl = await lh.transitions(cid);
          const e = cl.find((t) => t.to === 'succeeded' || t.to === 'failed' || t.to === 'cancelled');
          const c = cl.find((t) => t.from === 'queued' && t.to === 'running');
          if (!e || !c) throw new Error(`child ${cid} did not run and end`);
          return { end: ms(e.at), claim: ms(c.at) };
        });
        const lastEnd = Math.max(...times.map((t) => t.end));
        const suspended = log.find((t) => t.from === 'running' && t.to === 'waiting');
        if (suspended) firstClaim.push(Math.min(...times.map((t) => t.claim)) - ms(suspended.at));
        const second = claims[1] as { at: string };
        logResume.push(ms(resumed.at) - lastEnd);
        logClaim.push(ms(second.at) - lastEnd);
        const p = probe(id);
        procRerun.push((p.rerun as number) - (p.lastChildEnd as number));
      }
      return { shape: `${parents}x${k}`, mode, parents: ids.length, logResume, logClaim, procRerun, firstClaim, wallMs, reasons };
    } finally {
      unwatch();
    }
  });
}


try {
  const notes: string[] = [loadNote('at start', true)];
  notes.push(
    `Node ${process.version}, store ${STORE}${STORE === 'pg' ? `, pg ${packageVersion(import.meta.url, 'pg')}` : ' (node:sqlite, WAL)'}, sweeper ${SWEEPER ? 'on' : 'off'}`,
  );
  if (STORE === 'pg') notes.push(await serverNote());
  notes.push(
    LIB === undefined
      ? `library: src/ via tsx; ${gitState(['src'])}`
      : `library: ${existsSync(join(LIB, 'index.ts')) ? 'TypeScript via tsx' : 'compiled JS'} in ${LIB}`,
  );
  notes.push(`workers in this process at concurrency ${CONCURRENCY} each; fresh ${STORE === 'pg' ? 'database' : 'SQLite file'} per run`);

  const spawnRuns: SpawnRun[] = [];
  for (const n of SIZES) {
    for (const w of WORKERS) {
      for (let run = 1; run <= RUNS; run++) {
        const r = await spawnRun(n, w, run);
        if (BASELINE) {
          const b = await plainRun(n, w);
          r.plainInsertPerSec = b.insertPerSec;
          r.plainRunPerSec = b.runPerSec;
        }
        spawnRuns.push(r);
        console.error(
          `spawn n=${n} workers=${w} run ${run}: spawn ${r.spawnMs.toFixed(0)} ms (${int(r.childrenPerSec)} children/s; prepare ${r.prepareMs} ms), ` +
            `1st child claimed +${r.firstClaimMs.toFixed(0)} ms, run ${r.runMs.toFixed(0)} ms (${int(r.runPerSec)}/s), tail: resumed +${r.tailResumeMs.toFixed(2)} ms, handler +${r.tailRerunMs.toFixed(2)} ms`,
        );
      }
    }
  }
  const fanIns: FanInResult[] = [];
  for (const shape of FANIN) {
    for (const mode of MODES) {
      const merged: FanInResult = {
        shape: `${shape.parents}x${shape.children}`,
        mode,
        parents: 0,
        logResume: [],
        logClaim: [],
        procRerun: [],
        firstClaim: [],
        wallMs: 0,
        reasons: {},
      };
      for (let run = 1; run <= FANIN_RUNS; run++) {
        const r = await fanInRun(shape.parents, shape.children, mode);
        merged.parents += r.parents;
        merged.logResume.push(...r.logResume);
        merged.logClaim.push(...r.logClaim);
        merged.procRerun.push(...r.procRerun);
        merged.firstClaim.push(...r.firstClaim);
        merged.wallMs += r.wallMs;
        for (const [k, v] of Object.entries(r.reasons)) merged.reasons[k] = (merged.reasons[k] ?? 0) + v;
        console.error(`fan-in ${r.shape} ${mode} run ${run}: ${(r.wallMs / 1000).toFixed(1)} s; resume p50 ${fmtMs(pct(r.logResume).p50)} ms`);
      }
      fanIns.push(merged);
    }
  }
  notes.push(loadNote('at end', false));

  const system = `Longhaul (${STORE === 'pg' ? 'PostgreSQL' : 'SQLite'})`;
  if (spawnRuns.length > 0) {
    console.log(`\n${system}: one parent spawning N children; medians of ${RUNS} run(s) (every run in brackets)\n`);
    const rows: string[][] = [];
    for (const n of SIZES) {
      for (const w of WORKERS) {
        const rs = spawnRuns.filter((r) => r.n === n && r.workers === w);
        const cell = (f: (r: SpawnRun) => number, fmt: (x: number) => string) => `${fmt(median(rs.map(f)))} (${rs.map((r) => fmt(f(r))).join(', ')})`;
        const ms0 = (x: number) => x.toFixed(0);
        rows.push([
          `${int(n)}`,
          `${w}`,
          cell((r) => r.spawnMs, ms0),
          cell((r) => r.prepareMs, ms0),
          cell((r) => r.childrenPerSec, int),
          cell((r) => r.spawnCpuMs, ms0),
          cell((r) => r.firstClaimMs, ms0),
          cell((r) => r.runMs, ms0),
          cell((r) => r.runPerSec, int),
          cell(
            (r) => r.tailRerunMs,
            (x) => x.toFixed(1),
          ),
          cell((r) => r.totalMs, ms0),
          ...(BASELINE ? [cell((r) => r.plainInsertPerSec ?? Number.NaN, int), cell((r) => r.plainRunPerSec ?? Number.NaN, int)] : []),
        ]);
      }
    }
    console.log(
      table(
        [
          'children',
          'workers',
          'spawn ms',
          'of which prepare ms',
          'children inserted/s',
          'spawn CPU ms',
          'spawn → 1st child claimed ms',
          'run ms',
          'children run/s',
          'last child → handler ms',
          'total ms',
          ...(BASELINE ? ['plain: submitMany/s', 'plain: run/s'] : []),
        ],
        rows,
      ),
    );
  }
  if (fanIns.length > 0) {
    console.log(`\n${system}: fan-in latency per parent, ms, p50 / p99 / max\n`);
    console.log(
      table(
        [
          'parents x children',
          'mode',
          'parents',
          'log: last child end → waiting→queued',
          'log: → queued→running',
          'in-process: child end → handler',
          'log: spawn → 1st child claimed',
          'wall s',
        ],
        fanIns.map((f) => [
          f.shape,
          f.mode,
          String(f.parents),
          fmtP(f.logResume),
          fmtP(f.logClaim),
          fmtP(f.procRerun),
          fmtP(f.firstClaim),
          (f.wallMs / 1000).toFixed(1),
        ]),
      ),
    );
    console.log(`  resumption reasons: ${fanIns.map((f) => `${f.shape} ${f.mode}: ${JSON.stringify(f.reasons)}`).join('; ')}`);
  }
  for (const n of notes) console.log(`  note: ${n}`);
  console.log(
    JSON.stringify({
      system,
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
        firstClaim: pct(f.firstClaim),
        reasons: f.reasons,
      })),
      notes,
    }),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
