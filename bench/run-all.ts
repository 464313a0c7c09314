/**
 * Runs the throughput benchmarks one after the other, each in its own process — Longhaul on
 * SQLite, then BullMQ on the local Redis — prints each table, then a side-by-side table and
 * one JSON line with both results. Flags are passed to both (see their headers), e.g.
 *
 *   node --import tsx bench/run-all.ts [--jobs 20000] [--runs 3] [--concurrency 10,50]
 *
 * Needs `cd bench && npm install` (BullMQ, ioredis) and Redis on 127.0.0.1:6379:
 *   redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
 */
import { spawn } from 'node:child_process';
import { createConnection } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BenchResult, fmtMs, fmtRate, loadNote, strFlag, table } from './lib/util.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const passThrough = process.argv.slice(2);

function runScript(script: string): Promise<BenchResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, ...passThrough], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, BENCH_RUN_ALL: '1' },
    });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
      process.stdout.write(chunk);
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${script} exited with code ${code}`));
      const last = out.trim().split('\n').pop() ?? '';
      try {
        resolve(JSON.parse(last) as BenchResult);
      } catch {
        reject(new Error(`${script} did not end with a JSON line`));
      }
    });
  });
}

function redisReachable(): Promise<boolean> {
  const url = new URL(strFlag('redis') ?? 'redis://127.0.0.1:6379');
  return new Promise((resolve) => {
    const socket = createConnection({ host: url.hostname, port: Number(url.port || 6379) });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

const results: BenchResult[] = [];
const startLoad = loadNote('before the first benchmark', true);
console.log(startLoad);
console.log('=== Longhaul (SQLite) ===');
results.push(await runScript('bench/sqlite-throughput.ts'));
if (await redisReachable()) {
  console.log('\n=== BullMQ (Redis) ===');
  results.push(await runScript('bench/peers/bullmq.ts'));
} else {
  console.log(
    '\nBullMQ skipped: Redis is not reachable. Start it with:\n  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no',
  );
}

const concurrencies = [...new Set(results.flatMap((r) => Object.keys(r.processedPerSec)))];
const rows: string[][] = [['enqueue (bulk), jobs/s', ...results.map((r) => fmtRate(r.enqueuePerSec))]];
for (const c of concurrencies) rows.push([`processed c=${c}, jobs/s`, ...results.map((r) => fmtRate(r.processedPerSec[c] ?? Number.NaN))]);
rows.push(['latency p50, ms', ...results.map((r) => fmtMs(r.latencyMs.p50))]);
rows.push(['latency p95, ms', ...results.map((r) => fmtMs(r.latencyMs.p95))]);
rows.push(['latency p99, ms', ...results.map((r) => fmtMs(r.latencyMs.p99))]);
console.log(`\n=== Side by side (${results[0]?.jobs.toLocaleString('en-US')} jobs, median of ${results[0]?.runs} runs) ===\n`);
console.log(table(['metric', ...results.map((r) => r.system)], rows));
console.log(startLoad);
console.log(JSON.stringify({ date: new Date().toISOString(), load: startLoad, results }));
