/**
 * OpenTelemetry across processes on PostgreSQL: this process serves the HTTP API with an SDK
 * whose spans go to an InMemorySpanExporter; a worker process (test/fixtures/otel-worker.ts)
 * runs the job with an SDK that writes its spans to a file. One trace must run from the caller's
 * span (sent as a W3C traceparent header) through the submit's span to the worker's attempt span
 * and the handler's own span inside it. Without an SDK nothing is stored.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { context, trace } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Longhaul } from '../../src/index.js';
import { buildServer } from '../../src/server/app.js';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { formatTraceParent } from '../../src/telemetry/trace.js';
import { registerTestTracing, type SpanLine, spanLine } from '../fixtures/otel.js';
import { traceTasks } from '../fixtures/otel-tasks.js';
import { killAllChildren, tempDir, WorkerChild, waitFor } from '../fixtures/process-harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

describe('tracing: one trace from the HTTP submit to the end of the attempt, across processes (PostgreSQL)', () => {
  let db: TestDatabase;
  let tmp: ReturnType<typeof tempDir>;
  let lh: Longhaul;
  let app: FastifyInstance;
  let base: string;
  let sdk: ReturnType<typeof registerTestTracing>;

  before(async () => {
    db = await createTestDatabase('lh_tracing');
    tmp = tempDir('longhaul-tracing-');
    sdk = registerTestTracing();
    lh = await Longhaul.open({
      database: db.url,
      tasks: traceTasks,
      logger: pino({ level: 'silent' }),
      files: { urlSigningSecret: 'tracing-test-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(tmp.dir, 'blobs')) },
    });
    app = await buildServer({ lh, logger: false });
    base = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  after(async () => {
    await killAllChildren();
    await app.close();
    await lh.close({ drainMs: 0 });
    trace.disable();
    context.disable();
    await db.drop();
    tmp.remove();
  });

  it('the submit span (server) is the parent of the attempt span (worker), whose child is the handler span', async () => {
    const spansFile = join(tmp.dir, 'worker-spans.jsonl');
    const proc = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/otel-worker.ts', '--db', db.url, '--spans', spansFile], {
      cwd: new URL('../..', import.meta.url).pathname,
      env: { ...process.env, LONGHAUL_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const worker = new WorkerChild(proc, 'otel worker');
    await worker.waitEvent((e) => e.event === 'ready', 'ready', 20_000);

    // The caller's own span, sent as a traceparent header.
    const caller = trace.getTracer('test-client').startSpan('client request');
    const res = await fetch(`${base}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: formatTraceParent(caller.spanContext()) },
      body: JSON.stringify({ type: 'trace.work', input: {} }),
    });
    caller.end();
    assert.equal(res.status, 202);
    const { id } = (await res.json()) as { id: string };
    await waitFor(async () => (await lh.get(id))?.status === 'succeeded', 'the job to succeed', 20_000);
    const workerSpans = await waitFor(() => {
      if (!existsSync(spansFile)) return undefined;
      const lines = readFileSync(spansFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as SpanLine);
      return lines.some((s) => s.name.startsWith('longhaul.attempt')) ? lines : undefined;
    }, 'the worker to export its attempt span');

    const traceId = caller.spanContext().traceId;
    const submit = sdk.memory
      .getFinishedSpans()
      .map(spanLine)
      .find((s) => s.name === 'longhaul.submit trace.work');
    assert.ok(submit, 'the server exported the submit span');
    assert.equal(submit.traceId, traceId, "the submit continues the caller's trace");
    assert.equal(submit.parentSpanId, caller.spanContext().spanId);
    assert.equal(submit.attributes['longhaul.job_id'], id);

    const attempt = workerSpans.find((s) => s.name === 'longhaul.attempt trace.work');
    assert.ok(attempt);
    assert.equal(attempt.traceId, traceId, 'the attempt, in another process, is in the same trace');
    assert.equal(attempt.parentSpanId, submit.spanId, "the attempt is the submit's child");
    assert.equal(attempt.attributes['longhaul.job_id'], id);
    assert.equal(attempt.attributes['longhaul.attempt'], 1);
    assert.equal(attempt.attributes['longhaul.outcome'], 'succeeded');
    const work = workerSpans.find((s) => s.name === 'handler work');
    assert.ok(work);
    assert.equal(work.traceId, traceId);
    assert.equal(work.parentSpanId, attempt.spanId, "the handler's own span is the attempt's child");
    worker.signal('SIGTERM');
    await worker.exited;
  });
});

describe('tracing without an SDK', () => {
  it('stores no trace context and makes no span', async () => {
    const tmp = tempDir('longhaul-notrace-');
    const lh = await Longhaul.open({ database: join(tmp.dir, 'n.db'), tasks: traceTasks, logger: pino({ level: 'silent' }) });
    try {
      const job = await lh.submit('trace.work', {});
      assert.deepEqual(await lh.store.traceParents({ ids: [job.id] }), new Map());
    } finally {
      await lh.close();
      tmp.remove();
    }
  });
});
