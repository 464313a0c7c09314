/**
 * `GET /metrics`: the exposition passes `promtool check metrics` (Debian's `prometheus`
 * package), its counters match the jobs run, the job gauges match the store, and who may scrape
 * when API keys are configured.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { defineTask, FatalError, Longhaul } from '../../src/index.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { buildServer } from '../../src/server/app.js';
import { pollUntil } from '../support/poll.js';

const ADMIN_KEY = 'adminKEY-0123456789';
const TENANT_KEY = 'tenantKEY-0123456789';
const METRICS_TOKEN = 'scrape-token-0123456789';

const tasks = [
  defineTask({ type: 'm.ok', async run(input: { ms?: number }) {
    await new Promise((r) => setTimeout(r, input.ms ?? 5));
    return { ok: true };
  } }),
  defineTask({ type: 'm.fail', maxAttempts: 1, async run() {
    throw new FatalError('no');
  } }),
];

/** A sample's value from the text exposition (`name{labels}`, labels in the order written), or null. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | null {
  const want = Object.entries(labels);
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = new Map([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (got.size === want.length && want.every(([k, v]) => got.get(k) === v)) return Number(m[3]);
  }
  return null;
}

function promtool(): string | null {
  const r = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? 'promtool' : null;
}

describe('GET /metrics', () => {
  let dir: string;
  let lh: Longhaul;
  let app: FastifyInstance;
  let base: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-metrics-'));
    lh = await Longhaul.open({ database: join(dir, 'm.db'), tasks, logger: pino({ level: 'silent' }), sweepIntervalMs: 50 });
    await lh.startWorker({ concurrency: 8, pollIntervalMs: 20 });
    app = await buildServer({
      lh,
      apiKeys: parseApiKeys(`ops:${ADMIN_KEY},acme:${TENANT_KEY}`),
      adminTenants: ['ops'],
      metricsToken: METRICS_TOKEN,
      logger: false,
    });
    base = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  after(async () => {
    await app.close();
    await lh.close({ drainMs: 0 });
    rmSync(dir, { recursive: true, force: true });
  });

  const scrape = async (token = METRICS_TOKEN) => {
    const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    return res.text();
  };
  const submit = async (type: string, input: unknown) => {
    const res = await fetch(`${base}/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TENANT_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type, input }),
    });
    assert.equal(res.status, 202);
    return ((await res.json()) as { id: string }).id;
  };

  it('counts the jobs run: submitted, finished by state, durations, queue waits, gauges, HTTP requests', async () => {
    const ok = 7;
    const failing = 3;
    for (let i = 0; i < ok; i++) await submit('m.ok', { ms: 5 + i });
    for (let i = 0; i < failing; i++) await submit('m.fail', {});
    await pollUntil(
      async () => {
        const c = await lh.store.countByState({});
        return c.succeeded === ok && c.failed === failing ? true : undefined;
      },
      'every job ended',
      20_000,
    );
    const text = await scrape();
    assert.equal(sample(text, 'longhaul_jobs_submitted_total', { task_type: 'm.ok' }), ok);
    assert.equal(sample(text, 'longhaul_jobs_submitted_total', { task_type: 'm.fail' }), failing);
    assert.equal(sample(text, 'longhaul_jobs_finished_total', { task_type: 'm.ok', state: 'succeeded' }), ok);
    assert.equal(sample(text, 'longhaul_jobs_finished_total', { task_type: 'm.fail', state: 'failed' }), failing);
    assert.equal(sample(text, 'longhaul_job_duration_seconds_count', { task_type: 'm.ok', state: 'succeeded' }), ok);
    assert.ok((sample(text, 'longhaul_job_duration_seconds_sum', { task_type: 'm.ok', state: 'succeeded' }) ?? 0) >= (ok * 5) / 1000);
    assert.equal(sample(text, 'longhaul_job_duration_seconds_count', { task_type: 'm.fail', state: 'failed' }), failing);
    assert.equal(sample(text, 'longhaul_job_queue_wait_seconds_count', { task_type: 'm.ok' }), ok);
    assert.equal(sample(text, 'longhaul_jobs', { state: 'succeeded', task_type: 'm.ok' }), ok);
    assert.equal(sample(text, 'longhaul_jobs', { state: 'failed', task_type: 'm.fail' }), failing);
    assert.equal(sample(text, 'longhaul_http_requests_total', { method: 'POST', route: '/v1/jobs', status: '202' }), ok + failing);
    assert.equal(sample(text, 'longhaul_zombies_reaped_total'), 0);
    assert.equal(sample(text, 'longhaul_jobs_timed_out_total'), 0);
    assert.equal(sample(text, 'longhaul_jobs_stalled_total'), 0);
    assert.ok((sample(text, 'nodejs_eventloop_lag_seconds') ?? -1) >= 0, 'event-loop lag is exported');
    // A second scrape counts the first as an HTTP request, and the jobs it saw only once.
    const again = await scrape();
    assert.equal(sample(again, 'longhaul_http_requests_total', { method: 'GET', route: '/metrics', status: '200' }), 1);
    assert.equal(sample(again, 'longhaul_jobs_finished_total', { task_type: 'm.ok', state: 'succeeded' }), ok);
    // Jobs ended between two scrapes are added to what the first one read.
    await submit('m.ok', { ms: 1 });
    const seen: (number | null)[] = [];
    await pollUntil(
      async () => {
        const n = sample(await scrape(), 'longhaul_jobs_finished_total', { task_type: 'm.ok', state: 'succeeded' });
        seen.push(n);
        return n === ok + 1 ? true : undefined;
      },
      'the job ended after the first scrape counted once',
      20_000,
    );
    assert.ok(
      seen.every((n) => n === ok || n === ok + 1),
      `finished_total read ${seen.join(', ')}`,
    );
  });

  it('passes promtool check metrics', async (t) => {
    const tool = promtool();
    if (!tool) {
      t.skip('promtool is not installed (Debian: apt-get install prometheus); the exposition was not linted');
      return;
    }
    const text = await scrape();
    const r = spawnSync(tool, ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(r.status, 0, `promtool check metrics:\n${r.stdout}${r.stderr}`);
  });

  it('with API keys, needs the metrics token or an admin key', async () => {
    assert.equal((await fetch(`${base}/metrics`)).status, 401);
    assert.equal((await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer nope-nope-nope' } })).status, 401);
    const tenant = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${TENANT_KEY}` } });
    assert.equal(tenant.status, 403);
    assert.equal(((await tenant.json()) as { code: string }).code, 'FORBIDDEN');
    await scrape(ADMIN_KEY);
    await scrape(METRICS_TOKEN);
  });
});
