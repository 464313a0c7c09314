/**
 * Webhook secrets at rest (issue 36): a job's own secret is sealed with AES-256-GCM before the
 * store keeps it, so the database alone does not give it away; the key (generated into
 * `<database>.secrets-key`, or LONGHAUL_SECRETS_KEY) opens it again in a new instance, whose
 * delivery still verifies with the job's secret at a standardwebhooks receiver.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { Webhook } from 'standardwebhooks';
import { resolveConfig } from '../../src/config.js';
import { isSealed, openSecret, parseSecretsKey, sealSecret } from '../../src/core/secret-box.js';
import { keyDatabaseOf, secretBoxFor } from '../../src/facade/secrets-key.js';
import type { Store } from '../../src/store/store.js';
import { Longhaul } from '../../src/longhaul.js';
import { defineTask } from '../../src/task-api/define.js';
import { generateWebhookSecret } from '../../src/webhooks/signing.js';
import { createTestDatabase } from '../support/postgres.js';
import { scriptedReceiver } from '../support/webhook-receiver.js';

const dir = mkdtempSync(join(tmpdir(), 'longhaul-webhook-secrets-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const tasks = [defineTask({ type: 't.ok', async run() {
  return { ok: true };
} })];

function open(database: string, extra: { secretsKey?: string; files?: { urlSigningSecret: string }; logger?: pino.Logger } = {}) {
  return Longhaul.open({
    database,
    tasks,
    logger: pino({ level: 'silent' }),
    sweepIntervalMs: 50,
    webhooks: { secret: null, allowlist: '127.0.0.1', retrySchedule: [200], timeoutMs: 2_000 },
    ...extra,
  });
}

function storedSecrets(database: string): (string | null)[] {
  const db = new DatabaseSync(database, { readOnly: true });
  try {
    return (db.prepare('SELECT secret FROM job_webhooks').all() as { secret: string | null }[]).map((r) => r.secret);
  } finally {
    db.close();
  }
}

async function until<T>(fn: () => T | undefined | Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

describe('webhook secrets at rest', () => {
  test('the database holds ciphertext; after a restart (new instance, same key file) the delivery verifies with the job secret', async () => {
    const database = join(dir, 'restart.db');
    const secret = generateWebhookSecret();
    const rx = await scriptedReceiver([204]);
    try {
      const first = await open(database);
      const job = await first.submit('t.ok', null, { tenant: 'A', webhook: { url: rx.url, secret } });
      await first.close({ drainMs: 0 });

      const [stored] = storedSecrets(database);
      assert.ok(typeof stored === 'string' && isSealed(stored), `sealed in the database: ${String(stored).slice(0, 8)}…`);
      assert.notEqual(stored, secret);
      assert.ok(!stored.includes(secret.slice('whsec_'.length, 20)), 'no part of the secret in the row');
      assert.equal(statSync(`${database}.secrets-key`).mode & 0o777, 0o600, 'the generated key file is 0600');

      const second = await open(database);
      try {
        await second.startWorker({ concurrency: 2, pollIntervalMs: 20 });
        await until(() => (rx.received.length > 0 ? true : undefined), 15_000, 'the delivery');
        const [request] = rx.received;
        const event = new Webhook(secret).verify(request?.body as string, request?.headers as Record<string, string>) as { data: { id: string } };
        assert.equal(event.data.id, job.id);
      } finally {
        await second.close({ drainMs: 0 });
      }
    } finally {
      await rx.close();
    }
  });

  test('PostgreSQL: one instance submits, another with the same LONGHAUL_SECRETS_KEY delivers, verified; the row is ciphertext; without a key the submission is refused', async () => {
    const db = await createTestDatabase('lh_wh_secrets');
    const key = randomBytes(32).toString('hex');
    const secret = generateWebhookSecret();
    const rx = await scriptedReceiver([204]);
    const files = { urlSigningSecret: 'webhook-secrets-url-signing-secret-0123456789' };
    try {
      const api = await open(db.url, { secretsKey: key, files });
      const worker = await open(db.url, { secretsKey: key, files });
      const logged: string[] = [];
      const keyless = await open(db.url, { files, logger: pino({ level: 'warn' }, { write: (line: string) => logged.push(line) }) });
      try {
        // Said once at start, before any submission needs the key.
        assert.equal(logged.filter((l) => l.includes('LONGHAUL_SECRETS_KEY must be set')).length, 1, logged.join(''));
        await assert.rejects(
          keyless.submit('t.ok', null, { tenant: 'A', webhook: { url: rx.url, secret } }),
          /LONGHAUL_SECRETS_KEY must be set with a PostgreSQL database/,
        );
        const job = await api.submit('t.ok', null, { tenant: 'A', webhook: { url: rx.url, secret } });
        await worker.startWorker({ concurrency: 2, pollIntervalMs: 20 });
        await until(() => (rx.received.length > 0 ? true : undefined), 15_000, 'the delivery');
        const [request] = rx.received;
        const event = new Webhook(secret).verify(request?.body as string, request?.headers as Record<string, string>) as { data: { id: string } };
        assert.equal(event.data.id, job.id);
      } finally {
        await keyless.close({ drainMs: 0 });
        await worker.close({ drainMs: 0 });
        await api.close({ drainMs: 0 });
      }
      const { default: pg } = await import('pg');
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ secret: string }>('SELECT secret FROM longhaul.job_webhooks');
        assert.equal(rows.length, 1);
        const stored = String(rows[0]?.secret);
        assert.ok(isSealed(stored) && !stored.includes(secret.slice(6, 20)), 'ciphertext in the row');
      } finally {
        await client.end();
      }
    } finally {
      await rx.close();
      await db.drop();
    }
  });

  test('LONGHAUL_SECRETS_KEY (the secretsKey option): the row opens with that key only', async () => {
    const database = join(dir, 'given-key.db');
    const key = randomBytes(32).toString('base64');
    const secret = generateWebhookSecret();
    const rx = await scriptedReceiver([204]);
    try {
      const first = await open(database, { secretsKey: key });
      await first.submit('t.ok', null, { tenant: 'A', webhook: { url: rx.url, secret } });
      await first.close({ drainMs: 0 });
      const [stored] = storedSecrets(database);
      assert.ok(typeof stored === 'string' && isSealed(stored));
      assert.equal(openSecret(parseSecretsKey(key), stored, contextOf(database)), secret);
      assert.throws(() => openSecret(randomBytes(32), stored, contextOf(database)), /does not open with this key/);
    } finally {
      await rx.close();
    }
  });

  test('keys: 64 hex digits or base64 of 32 bytes; anything else is refused at start, naming the setting', () => {
    const bytes = randomBytes(32);
    assert.deepEqual(parseSecretsKey(bytes.toString('hex')), bytes);
    assert.deepEqual(parseSecretsKey(bytes.toString('base64')), bytes);
    assert.deepEqual(parseSecretsKey(bytes.toString('base64url')), bytes);
    assert.throws(() => resolveConfig({}, { LONGHAUL_SECRETS_KEY: 'too-short' }), /LONGHAUL_SECRETS_KEY must be 32 bytes/);
    assert.throws(() => resolveConfig({}, { LONGHAUL_SECRETS_KEY: randomBytes(16).toString('hex') }), /LONGHAUL_SECRETS_KEY/);
    assert.throws(() => resolveConfig({ secretsKey: 'x' }, {}), /secretsKey must be 32 bytes/);
    assert.equal(resolveConfig({}, { LONGHAUL_SECRETS_KEY: ` ${bytes.toString('hex')} ` }).secretsKey, bytes.toString('hex'));
  });

  test('sealing binds the value to its job; plain rows from before sealing read as they are; PostgreSQL needs the key', async () => {
    const key = randomBytes(32);
    const sealed = sealSecret(key, 'whsec_abc', 'job_webhooks.secret:1');
    assert.notEqual(sealSecret(key, 'whsec_abc', 'job_webhooks.secret:1'), sealed, 'a fresh IV each time');
    assert.equal(openSecret(key, sealed, 'job_webhooks.secret:1'), 'whsec_abc');
    assert.throws(() => openSecret(key, sealed, 'job_webhooks.secret:2'));
    const box = secretBoxFor({ database: ':memory:', secretsKey: undefined });
    assert.equal(await box.open('whsec_plain', 'any'), 'whsec_plain');
    const pg = secretBoxFor({ database: 'postgres://127.0.0.1/test', secretsKey: undefined });
    await assert.rejects(pg.seal('whsec_abc', 'c'), /LONGHAUL_SECRETS_KEY must be set with a PostgreSQL database/);
    const pgWithKey = secretBoxFor({ database: 'postgres://127.0.0.1/test', secretsKey: key.toString('hex') });
    assert.equal(await pgWithKey.open(await pgWithKey.seal('whsec_abc', 'c'), 'c'), 'whsec_abc');
    // A store the caller opened: a SQLite store's key goes beside its own file; any other store may be shared, so the key must be given.
    const sqliteStore = { capabilities: { notify: null }, options: { path: '/data/jobs.db' } } as unknown as Store;
    const sharedStore = { capabilities: { notify: {} }, options: { connectionString: 'postgres://x' } } as unknown as Store;
    assert.equal(keyDatabaseOf({ database: './longhaul.db' }, undefined), './longhaul.db');
    assert.equal(keyDatabaseOf({ database: './longhaul.db' }, sqliteStore), '/data/jobs.db');
    assert.equal(keyDatabaseOf({ database: './longhaul.db' }, sharedStore), null);
    await assert.rejects(secretBoxFor({ database: null, secretsKey: undefined }).seal('whsec_abc', 'c'), /LONGHAUL_SECRETS_KEY must be set/);
  });
});

/** The context of the only job in a database (the job id binds the sealed secret). */
function contextOf(database: string): string {
  const db = new DatabaseSync(database, { readOnly: true });
  try {
    const row = db.prepare('SELECT job_id FROM job_webhooks').get() as { job_id: string };
    return `job_webhooks.secret:${row.job_id}`;
  } finally {
    db.close();
  }
}
