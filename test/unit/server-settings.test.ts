/**
 * Settings of the HTTP server refused at start (issue 36): API keys' tenants and lengths, the
 * stream-token secret, and the limits read from the environment; the banner's bound address.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { boundUrl } from '../../src/cli/runtime.js';
import { httpSettingsFromEnv } from '../../src/config.js';
import { TENANT_NAME } from '../../src/core/tenant-name.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { StreamTokens } from '../../src/server/stream-token.js';

const KEY = 'k-0123456789abcdef';

describe('LONGHAUL_API_KEYS', () => {
  it('refuses a tenant named * and other names `keys create` refuses', () => {
    assert.throws(() => parseApiKeys(`alice:${KEY},*:${KEY}x`), /tenant name "\*" is not allowed/);
    for (const tenant of ['a b', 'a/b', 'é', 'x'.repeat(65)]) {
      assert.throws(() => parseApiKeys(`${tenant}:${KEY}`), /is not allowed/, tenant);
    }
    // The internal tenant has a colon: it can never be the tenant part of an entry.
    assert.deepEqual(
      parseApiKeys(`longhaul:internal-${KEY}`).map((k) => k.tenant),
      ['longhaul'],
    );
    assert.ok(!TENANT_NAME.test('longhaul:internal'));
    assert.deepEqual(
      parseApiKeys(`alice:${KEY},bob.2_x-y:${KEY}y`).map((k) => k.tenant),
      ['alice', 'bob.2_x-y'],
    );
  });

  it('refuses keys shorter than 16 characters, without printing them', () => {
    assert.throws(
      () => parseApiKeys('alice:short-key-15chr'.slice(0, 6 + 15)),
      (err: Error) => /the key of tenant "alice" is too short \(at least 16 characters\)/.test(err.message) && !err.message.includes('short-key'),
    );
    assert.equal(parseApiKeys(`alice:${'k'.repeat(16)}`).length, 1);
  });
});

describe('LONGHAUL_STREAM_TOKEN_SECRET', () => {
  it('needs 32 characters, like the URL-signing secret', () => {
    assert.throws(() => new StreamTokens('x'), /at least 32 characters/);
    assert.throws(() => new StreamTokens('s'.repeat(31)), /at least 32 characters/);
    const tokens = new StreamTokens('s'.repeat(32));
    const grant = { tenant: 'a', jobs: '*' as const, exp: Date.now() + 60_000 };
    assert.equal(tokens.verify(tokens.mint(grant))?.tenant, 'a');
  });
});

describe('HTTP limits from the environment', () => {
  it('reads each setting and refuses bad ones by name', () => {
    assert.deepEqual(httpSettingsFromEnv({}), { httpLimits: {} });
    assert.deepEqual(
      httpSettingsFromEnv({
        LONGHAUL_REQUEST_TIMEOUT: '10s',
        LONGHAUL_KEEP_ALIVE_TIMEOUT: '65s',
        LONGHAUL_MAX_CONNECTIONS: '500',
        LONGHAUL_HEALTH_CONNECTIONS: '0',
        LONGHAUL_TRANSFER_MIN_BYTES: '1024',
        LONGHAUL_TRANSFER_WINDOW: '1m',
        LONGHAUL_ALLOWED_HOSTS: 'jobs.example.com, .corp.example',
        LONGHAUL_ALLOWED_ORIGINS: 'https://app.example.com',
        LONGHAUL_AUTH_MAX_FAILURES: '0',
      }),
      {
        httpLimits: { requestTimeoutMs: 10_000, keepAliveTimeoutMs: 65_000, maxConnections: 500, healthConnections: 0, transferMinBytes: 1024, transferWindowMs: 60_000 },
        allowedHosts: ['jobs.example.com', '.corp.example'],
        allowedOrigins: ['https://app.example.com'],
        authThrottle: false,
      },
    );
    assert.deepEqual(httpSettingsFromEnv({ LONGHAUL_AUTH_FAILURE_WINDOW: '1m' }).authThrottle, { windowMs: 60_000 });
    for (const [name, value] of [
      ['LONGHAUL_REQUEST_TIMEOUT', 'soon'],
      ['LONGHAUL_REQUEST_TIMEOUT', '0'],
      ['LONGHAUL_MAX_CONNECTIONS', '0'],
      ['LONGHAUL_HEALTH_CONNECTIONS', '-1'],
      ['LONGHAUL_ALLOWED_ORIGINS', 'app.example.com'],
      ['LONGHAUL_ALLOWED_ORIGINS', 'https://app.example.com/path'],
      ['LONGHAUL_ALLOWED_HOSTS', 'jobs.example.com:8080'],
      ['LONGHAUL_AUTH_MAX_FAILURES', 'many'],
    ] as const) {
      assert.throws(() => httpSettingsFromEnv({ [name]: value }), new RegExp(name), `${name}=${value}`);
    }
  });
});

describe('the banner', () => {
  it('names the address actually bound', () => {
    assert.equal(boundUrl({ address: '0.0.0.0', family: 'IPv4', port: 8080 }), 'http://0.0.0.0:8080');
    assert.equal(boundUrl({ address: '::', family: 'IPv6', port: 8080 }), 'http://[::]:8080');
    assert.equal(boundUrl({ address: '::1', family: 'IPv6', port: 8080 }), 'http://localhost:8080');
    assert.equal(boundUrl({ address: '127.0.0.1', family: 'IPv4', port: 1 }), 'http://127.0.0.1:1');
  });
});
