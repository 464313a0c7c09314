/**
 * The same workload as bench/sqlite-throughput.ts on BullMQ + the local Redis (the peer).
 * BullMQ and ioredis are devDependencies of bench/ only: `cd bench && npm install` first.
 *
 *   node --import tsx bench/peers/bullmq.ts [--jobs 20000] [--concurrency 10,50] [--runs 3]
 *        [--chunk 1000] [--latency 1000] [--warmup 100] [--redis redis://127.0.0.1:6379]
 *
 * For each run and each concurrency, after deleting every key of the bench queue:
 *   (a) addBulk `jobs` no-op jobs in chunks of `chunk` (enqueue jobs/s);
 *   (b) one Worker at that concurrency, connected before the clock starts (autorun: false,
 *       then run()), timed until its 'completed' events reach `jobs`; then getJobCounts
 *       checks that all of them completed.
 * Then end-to-end latency with an idle worker: one job at a time, queue.add call start →
 * processor start (performance.now() in this process), after a warm-up.
 * BullMQ defaults are kept (completed jobs are kept, like Longhaul keeps succeeded rows).
 */
import { createRequire } from 'node:module';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { listFlag, loadNote, numFlag, reportResult, strFlag, summarise, until } from '../lib/util.js';

const JOBS = numFlag('jobs', 20_000);
const CONCURRENCY = listFlag('concurrency', [10, 50]);
const RUNS = numFlag('runs', 3);
const CHUNK = numFlag('chunk', 1000);
const LATENCY_SAMPLES = numFlag('latency', 1000);
const WARMUP = numFlag('warmup', 100);
const url = new URL(strFlag('redis') ?? 'redis://127.0.0.1:6379');
const connection = { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };

const PREFIX = 'lhbench';
const QUEUE = 'bench-noop';

/** Deletes every key of the bench queue (SCAN + UNLINK on the bench prefix only). */
async function flush(redis: Redis): Promise<number> {
  let cursor = '0';
  let removed = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${PREFIX}:${QUEUE}:*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) removed += await redis.unlink(...keys);
  } while (cursor !== '0');
  return removed;
}

function chunks(): { name: string; data: { n: number } }[][] {
  const out: { name: string; data: { n: number } }[][] = [];
  for (let i = 0; i < JOBS; i += CHUNK) out.push(Array.from({ length: Math.min(CHUNK, JOBS - i) }, (_, j) => ({ name: 'noop', data: { n: i + j } })));
  return out;
}

async function throughputRun(redis: Redis, concurrency: number): Promise<{ enqueuePerSec: number; processedPerSec: number }> {
  await flush(redis);
  const queue = new Queue(QUEUE, { connection, prefix: PREFIX });
  await queue.waitUntilReady();
  const worker = new Worker(QUEUE, async () => null, { connection, prefix: PREFIX, concurrency, autorun: false });
  try {
    const batches = chunks();
    const t0 = performance.now();
    for (const b of batches) await queue.addBulk(b);
    const enqueueMs = performance.now() - t0;
    const waiting = await queue.getWaitingCount();
    if (waiting !== JOBS) throw new Error(`expected ${JOBS} waiting jobs, found ${waiting}`);

    let completed = 0;
    let failed = 0;
    worker.on('completed', () => {
      completed++;
    });
    worker.on('failed', () => {
      failed++;
    });
    await worker.waitUntilReady();
    const t1 = performance.now();
    const running = worker.run();
    await until(() => completed + failed >= JOBS, 2);
    const processMs = performance.now() - t1;
    if (failed > 0) throw new Error(`${failed} jobs failed`);
    const counts = await queue.getJobCounts('completed', 'failed', 'waiting', 'active');
    if (counts.completed !== JOBS) throw new Error(`expected ${JOBS} completed jobs, found ${JSON.stringify(counts)}`);
    await worker.close();
    await running;
    return { enqueuePerSec: JOBS / (enqueueMs / 1000), processedPerSec: JOBS / (processMs / 1000) };
  } finally {
    await worker.close();
    await queue.close();
  }
}

async function latency(redis: Redis): Promise<number[]> {
  await flush(redis);
  let onStart: ((t: number) => void) | null = null;
  let onDone: (() => void) | null = null;
  const queue = new Queue(QUEUE, { connection, prefix: PREFIX });
  const worker = new Worker(
    QUEUE,
    async () => {
      onStart?.(performance.now());
      return null;
    },
    { connection, prefix: PREFIX, concurrency: 10 },
  );
  worker.on('completed', () => onDone?.());
  try {
    await Promise.all([queue.waitUntilReady(), worker.waitUntilReady()]);
    const samples: number[] = [];
    for (let i = 0; i < WARMUP + LATENCY_SAMPLES; i++) {
      const started = new Promise<number>((resolve) => {
        onStart = resolve;
      });
      const done = new Promise<void>((resolve) => {
        onDone = resolve;
      });
      const t0 = performance.now();
      const added = queue.add('probe', { n: i });
      const t1 = await started;
      await added;
      await done; // completed: the worker is idle (blocked on the marker) before the next sample
      if (i >= WARMUP) samples.push(t1 - t0);
    }
    return samples;
  } finally {
    await worker.close();
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
    loadNote('at start', process.env.BENCH_RUN_ALL !== '1'),
    `Node ${process.version}, bullmq ${bullmqVersion}, ioredis ${ioredisVersion}, Redis ${redisVersion} at ${url.host} (separate process)`,
    `queue keys ${PREFIX}:${QUEUE}:* deleted before each run; enqueue = addBulk in chunks of ${CHUNK}; BullMQ defaults (completed jobs kept)`,
  ];
  const enqueue: number[] = [];
  const processed: Record<string, number[]> = Object.fromEntries(CONCURRENCY.map((c) => [String(c), [] as number[]]));
  for (let run = 1; run <= RUNS; run++) {
    for (const c of CONCURRENCY) {
      const r = await throughputRun(redis, c);
      enqueue.push(r.enqueuePerSec);
      processed[String(c)]?.push(r.processedPerSec);
      console.error(`run ${run} c=${c}: enqueue ${Math.round(r.enqueuePerSec)}/s, processed ${Math.round(r.processedPerSec)}/s`);
    }
  }
  const lat = LATENCY_SAMPLES > 0 ? summarise(await latency(redis)) : summarise([]);
  notes.push(loadNote('at end', false));
  await flush(redis);
  reportResult({ system: 'BullMQ (Redis)', jobs: JOBS, runs: RUNS, enqueue: enqueue, processed: processed, latencyMs: lat, notes });
} finally {
  redis.disconnect();
}
