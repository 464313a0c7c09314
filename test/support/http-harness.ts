/**
 * In-process HTTP harness for the contract tests: a Longhaul instance on a temp SQLite file,
 * small test tasks, the Fastify app listening on an ephemeral loopback port, and helpers
 * (fetch wrapper, deadline-bounded polling, gates that block a task until released).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { FatalError, RetryableError } from '../../src/core/errors.js';
import type { JobSnapshot } from '../../src/core/job.js';
import { Longhaul, type OpenOptions, type WorkerHandle } from '../../src/longhaul.js';
import { buildServer, type ServerOptions } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { defineTask } from '../../src/task-api/define.js';

export const KEY_A = 'keyAAAAAAAAAAAAAAAA';
export const KEY_B = 'keyBBBBBBBBBBBBBBBB';
export const API_KEYS = `tenantA:${KEY_A},tenantB:${KEY_B}`;
export const TOKEN_SECRET = 'test-stream-token-secret-0123456789';

// ---- gates: a task that blocks until the test releases it ---------------------------------

const gates = new Map<string, { promise: Promise<void>; resolve: () => void }>();
function gate(name: string) {
  let g = gates.get(name);
  if (!g) {
    let resolve!: () => void;
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    g = { promise, resolve };
    gates.set(name, g);
  }
  return g;
}
export function release(name: string): void {
  gate(name).resolve();
}
let gateSeq = 0;
export function newGate(): string {
  return `gate-${process.pid}-${++gateSeq}`;
}

const flakySeen = new Set<string>();

export const testTasks = [
  defineTask({
    type: 't.quick',
    async run(input) {
      return { ok: true, echo: input ?? null };
    },
  }),
  defineTask({
    type: 't.schema',
    input: {
      type: 'object',
      additionalProperties: false,
      required: ['n'],
      properties: { n: { type: 'integer', minimum: 1 }, label: { type: 'string', maxLength: 8 } },
    },
    async run(input) {
      return { doubled: (input as { n: number }).n * 2 };
    },
  }),
  defineTask({
    type: 't.steps',
    async run(input, ctx) {
      const { steps = 5, stepMs = 50 } = (input ?? {}) as { steps?: number; stepMs?: number };
      ctx.progress({ stage: 'stepping', itemsDone: 0, itemsTotal: steps });
      for (let i = 1; i <= steps; i++) {
        await sleep(stepMs, undefined, { signal: ctx.signal });
        ctx.progress({ itemsDone: i, message: `step ${i}` });
      }
      return { steps };
    },
  }),
  defineTask({
    type: 't.block',
    async run(input, ctx) {
      const { gate: name } = input as { gate: string };
      ctx.progress({ stage: 'blocked' });
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => reject(ctx.signal.reason ?? new Error('aborted'));
        if (ctx.signal.aborted) return onAbort();
        ctx.signal.addEventListener('abort', onAbort, { once: true });
        gate(name).promise.then(() => {
          ctx.signal.removeEventListener('abort', onAbort);
          resolve();
        });
      });
      return { released: name };
    },
  }),
  defineTask({
    type: 't.flaky',
    maxAttempts: 1,
    async run(input) {
      const { key } = input as { key: string };
      if (!flakySeen.has(key)) {
        flakySeen.add(key);
        throw new FatalError('first run fails', { code: 'FIRST_RUN' });
      }
      return { key };
    },
  }),
  defineTask({
    type: 't.retrying',
    maxAttempts: 2,
    async run() {
      throw new RetryableError('try again later', { delayMs: 30_000 });
    },
  }),
  defineTask({
    type: 't.expiring',
    resultTtlMs: 1,
    async run() {
      return { soon: 'gone' };
    },
  }),
];

// ---- the harness ---------------------------------------------------------------------------

export interface HarnessOptions {
  /** `tenant:key,...`; null or '' runs without authentication. Default: tenants A and B. */
  apiKeys?: string | null;
  maxBodyBytes?: number;
  maxQueued?: number;
  /** Per-tenant quotas (OpenOptions.tenantQuotas). */
  tenantQuotas?: OpenOptions['tenantQuotas'];
  keepaliveMs?: number;
  /** Start a worker (and the sweeper). Default true. */
  worker?: boolean;
  /** A `postgres://` URL (a fresh database) instead of the default temp SQLite file. */
  database?: string;
  /** More server options (limits, allowed hosts and origins, a logger...). */
  server?: Partial<ServerOptions>;
}

export interface Harness {
  lh: Longhaul;
  app: FastifyInstance;
  base: string;
  worker: WorkerHandle | null;
  close(): Promise<void>;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-http-'));
  const lh = await Longhaul.open({
    database: options.database ?? join(dir, 'test.db'),
    // PostgreSQL has no file to keep a URL-signing secret and blobs next to.
    ...(options.database === undefined
      ? {}
      : { files: { urlSigningSecret: 'http-harness-url-signing-secret-0123456789', blobs: await FsBlobStore.open(join(dir, 'blobs')) } }),
    tasks: testTasks,
    logger: pino({ level: 'silent' }),
    sweepIntervalMs: 50,
    ...(options.maxQueued === undefined ? {} : { maxQueued: options.maxQueued }),
    ...(options.tenantQuotas === undefined ? {} : { tenantQuotas: options.tenantQuotas }),
  });
  const worker = options.worker === false ? null : await lh.startWorker({ concurrency: 64, pollIntervalMs: 20, cancelPollMs: 50, progressIntervalMs: 50 });
  const app = await buildServer({
    lh,
    apiKeys: parseApiKeys(options.apiKeys === undefined ? API_KEYS : (options.apiKeys ?? undefined)),
    keepaliveMs: options.keepaliveMs ?? 150,
    streamTokenSecret: TOKEN_SECRET,
    ...(options.maxBodyBytes === undefined ? {} : { maxBodyBytes: options.maxBodyBytes }),
    logger: false,
    // Tests make many failed attempts from 127.0.0.1 on one server; http-limits.test.ts turns it on.
    authThrottle: false,
    ...options.server,
  });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  let closed = false;
  return {
    lh,
    app,
    base: address,
    worker,
    async close() {
      if (closed) return;
      closed = true;
      await withTimeout(app.close(), 5_000, 'app.close()');
      await withTimeout(lh.close({ drainMs: 0 }), 5_000, 'lh.close()');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

// ---- HTTP helpers ----------------------------------------------------------------------------

export interface CallOptions {
  method?: string;
  /** API key (Bearer); null sends no Authorization header. Default KEY_A. */
  key?: string | null;
  /** JSON-encoded unless `raw` is given. */
  body?: unknown;
  raw?: string;
  contentType?: string | null;
  headers?: Record<string, string>;
}

export interface CallResult {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: response bodies are inspected loosely by the tests
  json: any;
  text: string;
}

export async function call(base: string, path: string, options: CallOptions = {}): Promise<CallResult> {
  const headers: Record<string, string> = { ...options.headers };
  const key = options.key === undefined ? KEY_A : options.key;
  if (key !== null) headers.authorization = `Bearer ${key}`;
  let body: string | undefined;
  if (options.raw !== undefined) body = options.raw;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined && options.contentType !== null) headers['content-type'] = options.contentType ?? 'application/json';
  const res = await fetch(`${base}${path}`, {
    method: options.method ?? (body === undefined ? 'GET' : 'POST'),
    headers,
    ...(body === undefined ? {} : { body }),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, json, text };
}

export async function submit(base: string, type: string, input?: unknown, extra: Record<string, unknown> = {}, key: string = KEY_A): Promise<JobSnapshot> {
  const res = await call(base, '/v1/jobs', { key, body: { type, ...(input === undefined ? {} : { input }), ...extra } });
  if (res.status !== 202) throw new Error(`submit ${type} answered ${res.status}: ${res.text}`);
  return res.json as JobSnapshot;
}

export async function until<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, what: string, timeoutMs = 8_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await sleep(15);
  }
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** Polls the library (not HTTP) until the job satisfies `pred`. */
export function untilJob(lh: Longhaul, id: string, pred: (s: JobSnapshot) => boolean, what: string, timeoutMs?: number): Promise<JobSnapshot> {
  return until(
    async () => {
      const s = await lh.get(id);
      return s && pred(s) ? s : undefined;
    },
    `job ${id}: ${what}`,
    timeoutMs,
  );
}

/** Asserts the RFC 9457 problem shape and returns the problem. */
export function problemOf(res: CallResult, status: number, code?: string): Record<string, unknown> {
  const where = `${res.status} ${res.text.slice(0, 300)}`;
  if (res.status !== status) throw new Error(`expected status ${status}, got ${where}`);
  const ct = res.headers.get('content-type') ?? '';
  if (!ct.startsWith('application/problem+json')) throw new Error(`expected application/problem+json, got "${ct}" (${where})`);
  const p = res.json as Record<string, unknown>;
  for (const f of ['type', 'title', 'detail', 'code'] as const) {
    if (typeof p?.[f] !== 'string' || p[f] === '') throw new Error(`problem lacks a string "${f}": ${where}`);
  }
  if (p.status !== status) throw new Error(`problem.status ${String(p.status)} != ${status}`);
  if (!String(p.type).startsWith('urn:longhaul:problem:')) throw new Error(`problem.type ${String(p.type)}`);
  if (code !== undefined && p.code !== code) throw new Error(`expected code ${code}, got ${String(p.code)}: ${where}`);
  return p;
}
