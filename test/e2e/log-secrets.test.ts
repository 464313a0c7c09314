/**
 * The built `longhaul dev` at debug level (its own logger, HTTP requests included) runs jobs with
 * API keys, a server and a per-job webhook secret, a webhook delivery that fails then succeeds,
 * signed result URLs, a stream token and a metrics token; then its whole output is searched for
 * every one of those secrets (none may appear), and every log line about a job must carry the
 * job's id, type, attempt and tenant.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import { BIN } from '../support/dev-process.js';
import { scriptedReceiver } from '../support/webhook-receiver.js';

const API_KEY = `apikey-${randomBytes(12).toString('hex')}`;
const WRONG_KEY = `wrongkey-${randomBytes(12).toString('hex')}`;
const SERVER_WEBHOOK_SECRET = generateWebhookSecret();
const JOB_WEBHOOK_SECRET = generateWebhookSecret();
const URL_SIGNING_SECRET = `urlsign-${randomBytes(16).toString('hex')}`;
const STREAM_TOKEN_SECRET = `streamsecret-${randomBytes(16).toString('hex')}`;
const METRICS_TOKEN = `metrics-${randomBytes(12).toString('hex')}`;

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe('logs at debug level carry job fields and no secret', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-e2e-logs-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('runs jobs with every kind of secret and finds none of them in the output', { timeout: 90_000 }, async () => {
    const rx = await scriptedReceiver([503, 200]);
    const child = spawn(process.execPath, [BIN, 'dev', '--port', '0', '--database', join(dir, 'logs.db')], {
      env: {
        ...process.env,
        LONGHAUL_LOG_LEVEL: 'debug',
        LONGHAUL_HTTP_LOG_LEVEL: 'debug',
        LONGHAUL_API_KEYS: `acme:${API_KEY}`,
        LONGHAUL_WEBHOOK_SECRET: SERVER_WEBHOOK_SECRET,
        LONGHAUL_WEBHOOK_ALLOWLIST: '127.0.0.1',
        LONGHAUL_WEBHOOK_RETRY_SCHEDULE: '1s',
        LONGHAUL_URL_SIGNING_SECRET: URL_SIGNING_SECRET,
        LONGHAUL_STREAM_TOKEN_SECRET: STREAM_TOKEN_SECRET,
        LONGHAUL_METRICS_TOKEN: METRICS_TOKEN,
        LONGHAUL_SWEEP_INTERVAL_MS: '100',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise((r) => child.once('exit', r));
    const seen: string[] = [];
    try {
      const base = await until(async () => /listening on (http:\/\/\S+)/.exec(out)?.[1], 20_000, 'the server to listen');
      const auth = { authorization: `Bearer ${API_KEY}` };
      const res = await fetch(`${base}/v1/jobs`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'report.generate', input: { rows: 20 }, webhook: { url: rx.url, secret: JOB_WEBHOOK_SECRET } }),
      });
      assert.equal(res.status, 202);
      const { id } = (await res.json()) as { id: string };
      // A second job whose webhook uses the server's secret.
      const other = await fetch(`${base}/v1/jobs`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'demo.sleep', input: { steps: 2, stepMs: 10 }, webhook: { url: rx.url } }),
      });
      assert.equal(other.status, 202);
      const job = await until(
        async () => {
          const j = (await (await fetch(`${base}/v1/jobs/${id}`, { headers: auth })).json()) as { status: string; results: { url: string }[] };
          return j.status === 'succeeded' && j.results.length > 0 ? j : undefined;
        },
        30_000,
        'the report',
      );
      // Signed URLs: one download, one with a forged signature.
      const url = job.results[0]?.url as string;
      const sig = new URL(url, base).searchParams.get('sig') as string;
      assert.ok(sig && sig.length >= 16);
      seen.push(sig);
      assert.equal((await fetch(new URL(url, base))).status, 200);
      const forged = new URL(url, base);
      forged.searchParams.set('sig', `${sig.slice(0, -4)}AAAA`);
      assert.notEqual((await fetch(forged)).status, 200);
      // A stream token, used on an event stream.
      const tokenRes = await fetch(`${base}/v1/stream-tokens`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ jobs: [id] }) });
      assert.equal(tokenRes.status, 201, await tokenRes.clone().text());
      const { token } = (await tokenRes.json()) as { token: string };
      seen.push(token);
      const stream = new AbortController();
      const sse = await fetch(`${base}/v1/jobs/${id}/events?token=${encodeURIComponent(token)}`, { signal: stream.signal });
      assert.equal(sse.status, 200);
      stream.abort();
      // A wrong key, and the metrics token.
      assert.equal((await fetch(`${base}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${WRONG_KEY}` } })).status, 401);
      assert.equal((await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status, 200);
      // Both webhooks: a 503 first, then delivered.
      await until(async () => (rx.received.length >= 3 ? true : undefined), 30_000, 'webhook deliveries, one failed and retried');
      await sleep(300);
    } finally {
      child.kill('SIGTERM');
      await exited;
      await rx.close();
    }

    const secrets: Record<string, string> = {
      'API key': API_KEY,
      'a wrong API key': WRONG_KEY,
      "the server's webhook secret": SERVER_WEBHOOK_SECRET,
      "the server's webhook secret (key)": SERVER_WEBHOOK_SECRET.slice('whsec_'.length),
      "a job's webhook secret": JOB_WEBHOOK_SECRET,
      "a job's webhook secret (key)": JOB_WEBHOOK_SECRET.slice('whsec_'.length),
      'the URL signing secret': URL_SIGNING_SECRET,
      'the stream token secret': STREAM_TOKEN_SECRET,
      'the metrics token': METRICS_TOKEN,
      "a signed URL's signature": seen[0] as string,
      'a stream token': seen[1] as string,
    };
    for (const [what, secret] of Object.entries(secrets)) {
      assert.ok(!out.includes(secret) && !out.includes(encodeURIComponent(secret)), `${what} appears in the log`);
    }

    const lines = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const msgs = new Set(lines.map((l) => l.msg));
    for (const m of ['job submitted', 'attempt claimed', 'attempt ended', 'attempt failed; retrying', 'incoming request']) assert.ok(msgs.has(m), `the log has "${m}" lines: ${[...msgs].join(' | ')}`);
    const aboutJobs = lines.filter((l) => l.jobId !== undefined);
    assert.ok(aboutJobs.length >= 8, `${aboutJobs.length} lines about jobs`);
    for (const l of aboutJobs) {
      for (const f of ['type', 'attempt', 'tenant']) assert.ok(l[f] !== undefined, `"${l.msg}" about job ${l.jobId} has no ${f}: ${JSON.stringify(l)}`);
    }
    // Request lines name URLs with their secrets redacted.
    assert.ok(lines.some((l) => JSON.stringify(l.req ?? '').includes('sig=[redacted]')), 'a redacted signed URL is logged');
  });
});
