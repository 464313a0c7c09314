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
  // The same route answering a body of a real snapshot's size and shape (a constant: nothing is
  // read): with it, the ratio measures what Longhaul does per request, not the response's size.
  const snapshot = {
    id: '01a20a21-2a38-73a5-a931-57344be4932c',
    type: 'bench.noop',
    status: 'queued',
    priority: 'normal',
    input: { n: 1 },
    metadata: null,
    progress: { percent: null, stage: null, itemsDone: null, itemsTotal: null, message: null, eta: null, updatedAt: null },
    result: null,
    resultUrl: null,
    results: [],
    downloads: 0,
    error: null,
    attempts: 0,
    maxAttempts: 3,
    cancelRequested: false,
    stalled: false,
    parentId: null,
    createdAt: '2026-11-23T20:37:44.142Z',
    startedAt: null,
    finishedAt: null,
    updatedAt: '2026-11-23T20:37:44.142Z',
    runAt: '2026-11-23T20:37:44.142Z',
    expiresAt: null,
    links: {
      self: '/v1/jobs/01a20a21-2a38-73a5-a931-57344be4932c',
      events: '/v1/jobs/01a20a21-2a38-73a5-a931-57344be4932c/events',
      cancel: '/v1/jobs/01a20a21-2a38-73a5-a931-57344be4932c/cancel',
    },
  };
  app.get('/v1/snapshot/:id', async (_req, reply) => reply.header('cache-control', 'no-store').header('retry-after', '1').send(snapshot));
  app.post('/v1/snapshot', async (_req, reply) =>
    reply.code(202).header('location', snapshot.links.self).header('cache-control', 'no-store').header('retry-after', '1').send(snapshot),
  );
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
