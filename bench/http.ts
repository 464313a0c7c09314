/**
 * HTTP benchmarks: POST /v1/jobs and GET /v1/jobs/:id with autocannon, side by side
 * with a bare Fastify route that answers without storing anything, then SSE fan-out: N clients
 * on one job, delay from ctx.progress() to delivery.
 *
 *   node --import tsx bench/http.ts [--duration 10] [--connections 50] [--clients 1000]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import autocannon from 'autocannon';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const duration = flag('duration', 10);
const connections = flag('connections', 50);
const clients = flag('clients', 1000);

async function startServer(mode: 'longhaul' | 'bare', database: string, env: Record<string, string> = {}): Promise<{ port: number; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/http-server.ts', mode, database], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  const rl = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const line = await new Promise<string>((resolve) => rl.once('line', resolve));
  return { port: (JSON.parse(line) as { port: number }).port, child };
}

interface Row {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
}

async function cannon(name: string, opts: autocannon.Options): Promise<Row> {
  const r = await autocannon({ duration, connections, ...opts });
  return { name, rps: Math.round(r.requests.average), p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx };
}

const submitBody = JSON.stringify({ type: 'bench.noop', input: { n: 1 } });
const post = { method: 'POST' as const, headers: { 'content-type': 'application/json' }, body: submitBody };

async function httpJson(port: number, method: string, path: string, body?: string): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: body ? { 'content-type': 'application/json' } : {}, body });
  return { status: res.status, json: await res.json() };
}

const dir = mkdtempSync(join(tmpdir(), 'longhaul-bench-http-'));
const rows: Row[] = [];
try {
  const bare = await startServer('bare', '');
  rows.push(await cannon('bare Fastify POST 202', { url: `http://127.0.0.1:${bare.port}/v1/jobs`, ...post }));
  rows.push(await cannon('bare Fastify POST 202, snapshot-sized body', { url: `http://127.0.0.1:${bare.port}/v1/snapshot`, ...post }));
  rows.push(await cannon('bare Fastify GET', { url: `http://127.0.0.1:${bare.port}/v1/jobs/x` }));
  rows.push(await cannon('bare Fastify GET, snapshot-sized body', { url: `http://127.0.0.1:${bare.port}/v1/snapshot/x` }));
  bare.child.kill();

  const lh = await startServer('longhaul', join(dir, 'api.db'));
  rows.push(await cannon('Longhaul POST /v1/jobs', { url: `http://127.0.0.1:${lh.port}/v1/jobs`, ...post }));
  const { json } = await httpJson(lh.port, 'POST', '/v1/jobs', submitBody);
  rows.push(await cannon('Longhaul GET /v1/jobs/:id', { url: `http://127.0.0.1:${lh.port}/v1/jobs/${(json as { id: string }).id}` }));
  lh.child.kill();

  console.log(`\nHTTP, ${connections} connections, ${duration} s each`);
  console.table(rows.map((r) => ({ route: r.name, 'req/s': r.rps, 'p50 ms': r.p50, 'p99 ms': r.p99, non2xx: r.non2xx })));
  const ratio = (a: string, b: string) => (rows.find((r) => r.name === a)?.rps ?? 0) / (rows.find((r) => r.name === b)?.rps ?? 1);
  console.log(
    `ratio POST longhaul/bare = ${ratio('Longhaul POST /v1/jobs', 'bare Fastify POST 202').toFixed(2)} (against a snapshot-sized bare body: ${ratio('Longhaul POST /v1/jobs', 'bare Fastify POST 202, snapshot-sized body').toFixed(2)}), ` +
      `GET = ${ratio('Longhaul GET /v1/jobs/:id', 'bare Fastify GET').toFixed(2)} (against a snapshot-sized bare body: ${ratio('Longhaul GET /v1/jobs/:id', 'bare Fastify GET, snapshot-sized body').toFixed(2)})`,
  );

  // SSE fan-out: N clients on one job whose handler reports progress every 100 ms, stamping the call time.
  const fan = await startServer('longhaul', join(dir, 'sse.db'), { BENCH_WORKER: '1' });
  const ticks = 50;
  const { json: job } = await httpJson(fan.port, 'POST', '/v1/jobs', JSON.stringify({ type: 'bench.ticker', input: { ticks, everyMs: 100 }, delayMs: 3000 }));
  const id = (job as { id: string }).id;
  const delays: number[] = [];
  let finished = 0;
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients + 10 });
  await new Promise<void>((resolveAll) => {
    for (let c = 0; c < clients; c++) {
      http.get({ host: '127.0.0.1', port: fan.port, path: `/v1/jobs/${id}/events`, agent }, (res) => {
        res.setEncoding('utf8');
        let buf = '';
        res.on('data', (chunk: string) => {
          const now = Date.now();
          buf += chunk;
          let i = buf.indexOf('\n\n');
          while (i >= 0) {
            const frame = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const data = frame.split('\n').find((l) => l.startsWith('data: '));
            if (data && frame.includes('event: progress')) {
              const snap = JSON.parse(data.slice(6)) as { progress: { message: string | null } };
              if (snap.progress.message) delays.push(now - Number(snap.progress.message));
            }
            i = buf.indexOf('\n\n');
          }
        });
        res.on('end', () => {
          if (++finished === clients) resolveAll();
        });
      });
    }
  });
  fan.child.kill();
  agent.destroy();
  delays.sort((a, b) => a - b);
  const q = (p: number) => delays[Math.min(delays.length - 1, Math.floor(p * delays.length))] ?? Number.NaN;
  console.log(`\nSSE fan-out: ${clients} clients on one job, ${ticks} progress calls (every 100 ms)`);
  console.table([{ deliveries: delays.length, 'p50 ms': q(0.5), 'p95 ms': q(0.95), 'p99 ms': q(0.99), 'max ms': delays[delays.length - 1] }]);
  console.log(JSON.stringify({ http: rows, sse: { clients, deliveries: delays.length, p50: q(0.5), p95: q(0.95), p99: q(0.99) } }));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
