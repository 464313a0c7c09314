/**
 * The server side of bench/http.ts, run as a child process so the load generator and the
 * server get one core each. argv: mode (longhaul | bare), database path (longhaul mode).
 * Prints {"port": n} on stdout once listening.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify from 'fastify';
import pino from 'pino';
import { buildServer } from '../src/server/app.js';
import { defineTask, Longhaul } from '../src/index.js';

const [mode = 'longhaul', database = ':memory:'] = process.argv.slice(2);

// A no-op task (for submit/get) and a task that reports progress with its call time in the message (SSE fan-out).
const noop = defineTask({ type: 'bench.noop', run: () => null });
const ticker = defineTask({
  type: 'bench.ticker',
  async run(input: unknown, ctx) {
    const { ticks, everyMs } = input as { ticks: number; everyMs: number };
    for (let i = 1; i <= ticks; i++) {
      await sleep(everyMs);
      ctx.progress({ itemsDone: i, itemsTotal: ticks, message: String(Date.now()) });
    }
    return null;
  },
});

if (mode === 'bare') {
  const app = Fastify();
  app.post('/v1/jobs', async (_req, reply) => reply.code(202).header('Location', '/v1/jobs/x').send({ id: 'x', status: 'queued' }));
  app.get('/v1/jobs/:id', async (req) => ({ id: (req.params as { id: string }).id, status: 'queued' }));
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  process.stdout.write(`${JSON.stringify({ port: Number(new URL(address).port) })}\n`);
} else {
  const lh = await Longhaul.open({ database, tasks: [noop, ticker], logger: pino({ level: 'silent' }) });
  if (process.env.BENCH_WORKER === '1') await lh.startWorker({ concurrency: 10 });
  const app = await buildServer({ lh });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  process.stdout.write(`${JSON.stringify({ port: Number(new URL(address).port) })}\n`);
}

// Exit normally on SIGINT/SIGTERM so `node --cpu-prof` writes its profile.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
