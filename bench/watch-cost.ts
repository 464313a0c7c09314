/**
 * What watching costs (issue 36), two measurements:
 *
 * `--mode watch` (PostgreSQL): a server (buildServer, no worker, the sweeper on, the NOTIFY
 * relay on, as `longhaul server`) over a fresh database with `--jobs` (500) pending jobs; the
 * database's transactions per second (pg_stat_database xact_commit + xact_rollback of that
 * database, read from the maintenance database) for `--seconds` (20) idle, then for as long
 * with one WebSocket subscribed to every job.
 *
 *   node --import tsx bench/watch-cost.ts --mode watch --lib /tmp/longhaul-<rev>/dist [--jobs 500] [--seconds 20] [--pg URL]
 *
 * `--mode sse`: `longhaul dev` (the built CLI of `--lib`, SQLite in a temp directory) and
 * `--connections` (10 000) idle `GET /v1/events` streams held by this process; the server's
 * resident memory (VmRSS) before and after, and per connection. The stream and connection caps
 * are raised for the run (LONGHAUL_MAX_STREAMS_PER_TENANT, LONGHAUL_MAX_CONNECTIONS; a build
 * without them ignores them).
 *
 *   node --import tsx bench/watch-cost.ts --mode sse --lib /tmp/longhaul-<rev>/dist [--connections 10000]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import pino from 'pino';
import WebSocket from 'ws';
import { adminUrl, withDatabase } from './lib/pg-database.js';
import { numFlag, strFlag } from './lib/util.js';

const LIB = resolve(strFlag('lib') ?? 'dist');
const MODE = strFlag('mode') ?? 'watch';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const revision = (() => {
  try {
    return readFileSync(join(LIB, 'REVISION'), 'utf8').trim().slice(0, 7);
  } catch {
    return LIB;
  }
})();

async function watchCost(): Promise<void> {
  const jobs = numFlag('jobs', 500);
  const seconds = numFlag('seconds', 20);
  const { Longhaul, defineTask } = (await import(pathToFileURL(join(LIB, 'index.js')).href)) as typeof import('../src/index.js');
  const { buildServer } = (await import(pathToFileURL(join(LIB, 'server/app.js')).href)) as typeof import('../src/server/app.js');
  await withDatabase('watchcost', async (db) => {
    const idle = defineTask({ type: 'bench.idle', run: async () => null });
    const lh = await Longhaul.open({ database: db.url, tasks: [idle], logger: pino({ level: 'silent' }) });
    lh.startSweeper();
    const app = await buildServer({ lh, logger: false, files: false, dashboard: false });
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    const stats = new pg.Client({ connectionString: adminUrl });
    await stats.connect();
    // Backends flush their counters at most once a second (every 10 s when idle): a window of
    // 20 s keeps that error small. The snapshot is cleared so each read sees the current figures.
    const xacts = async () => {
      const r = await stats.query<{ n: string }>('SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1', [db.name]);
      return Number(r.rows[0]?.n ?? 0);
    };
    const rate = async () => {
      await stats.query('SELECT pg_stat_clear_snapshot()');
      const a = await xacts();
      await sleep(seconds * 1000);
      await stats.query('SELECT pg_stat_clear_snapshot()');
      const b = await xacts();
      return (b - a) / seconds;
    };
    try {
      const ids: string[] = [];
      for (let i = 0; i < jobs; i++) ids.push((await lh.submit('bench.idle', {}, { runAt: new Date(Date.now() + 3_600_000) })).id);
      // Idle backends flush their statistics up to 10 s late: the submissions' must not fall in the window.
      await sleep(12_000);
      const idleRate = await rate();
      const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/ws`);
      await new Promise((r, j) => {
        ws.once('open', r);
        ws.once('error', j);
      });
      const seen = new Set<string>();
      let errors = 0;
      ws.on('message', (d) => {
        const m = JSON.parse(String(d)) as { type: string; job?: { id: string } };
        if (m.type === 'snapshot' && m.job) seen.add(m.job.id);
        else if (m.type === 'error') errors++;
      });
      for (const id of ids) ws.send(JSON.stringify({ op: 'subscribe', id }));
      const deadline = Date.now() + 30_000;
      while (seen.size + errors < jobs && Date.now() < deadline) await sleep(50);
      // As above: the subscriptions' first reads stay out of the window.
      await sleep(12_000);
      const watchRate = await rate();
      ws.close();
      console.log(
        JSON.stringify({ mode: 'watch', revision, jobs, subscribed: seen.size, errors, seconds, idleXactPerSec: round(idleRate), watchingXactPerSec: round(watchRate) }),
      );
    } finally {
      await stats.end();
      await app.close();
      await lh.close();
    }
  });
}

function round(n: number): number {
  return Math.round(n * 10) / 10;
}

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : Number.NaN;
}

async function sseMemory(): Promise<void> {
  const connections = numFlag('connections', 10_000);
  const dir = mkdtempSync(join(tmpdir(), 'lh-sse-rss-'));
  const child = spawn(process.execPath, [join(LIB, 'cli/main.js'), 'dev', '--port', '0'], {
    cwd: dir,
    env: { ...process.env, LONGHAUL_MAX_STREAMS_PER_TENANT: String(connections * 2), LONGHAUL_MAX_CONNECTIONS: String(connections * 2), LONGHAUL_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const base = await new Promise<string>((ok, fail) => {
      let out = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) ok(m[1] as string);
      });
      child.once('exit', (code) => fail(new Error(`longhaul dev exited with ${code}`)));
    });
    const url = new URL('/v1/events', base);
    await sleep(1000);
    const before = rssKiB(child.pid as number);
    const held: Array<() => void> = [];
    let refused = 0;
    const open = () =>
      new Promise<void>((done) => {
        const req = request({ host: url.hostname, port: url.port, path: url.pathname, agent: false, headers: { accept: 'text/event-stream' } }, (res) => {
          if (res.statusCode !== 200) refused++;
          res.resume();
          held.push(() => req.destroy());
          done();
        });
        req.on('error', () => {
          refused++;
          done();
        });
        req.end();
      });
    for (let i = 0; i < connections; i += 200) await Promise.all(Array.from({ length: Math.min(200, connections - i) }, open));
    await sleep(3000);
    if (typeof global.gc === 'function') global.gc();
    const after = rssKiB(child.pid as number);
    console.log(
      JSON.stringify({
        mode: 'sse',
        revision,
        connections,
        refused,
        rssBeforeMiB: round(before / 1024),
        rssAfterMiB: round(after / 1024),
        perConnectionKiB: round((after - before) / (connections - refused)),
      }),
    );
    for (const h of held) h();
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
}

await (MODE === 'sse' ? sseMemory() : watchCost());
process.exit(0);
