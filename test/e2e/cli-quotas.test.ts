/**
 * Tenant quotas through the built binary: `longhaul dev` reads LONGHAUL_TENANT_QUOTAS (and
 * refuses a malformed one by name), and `longhaul submit` past the tenant's quota prints the
 * 429 as one readable line with when to try again, and exits 1.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Dev, runCli, startDev } from '../support/dev-process.js';

const KEY = 'lh_quota_test_key_0123456789';
const OTHER_KEY = 'lh_quota_other_key_0123456789';

describe('longhaul CLI: tenant quotas', () => {
  let dir: string;
  let dev: Dev;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-quotas-'));
    dev = await startDev(join(dir, 'q.db'), {
      LONGHAUL_API_KEYS: `acme:${KEY},other:${OTHER_KEY}`,
      LONGHAUL_TENANT_QUOTAS: '{"acme":{"maxQueued":1}}',
    });
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('submit past the quota exits 1 with the 429 on one line; another tenant is not limited', async () => {
    const env = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: KEY };
    const first = await runCli(['submit', 'demo.sleep', '--input', '{}', '--delay-ms', '600000'], env);
    assert.equal(first.code, 0, first.stderr);
    const refused = await runCli(['submit', 'demo.sleep', '--input', '{}', '--delay-ms', '600000'], env);
    assert.equal(refused.code, 1);
    assert.equal(
      refused.stderr.trim(),
      'longhaul: 429 TENANT_QUOTA_EXCEEDED: tenant "acme" is over its quota of waiting jobs: 1 pending, queued or retrying, limit 1; try again in 5 s',
    );
    for (let i = 0; i < 2; i++) {
      const other = await runCli(['submit', 'demo.sleep', '--input', '{}', '--delay-ms', '600000'], { ...env, LONGHAUL_API_KEY: OTHER_KEY });
      assert.equal(other.code, 0, other.stderr);
    }
  });

  it('a malformed LONGHAUL_TENANT_QUOTAS stops the server with the variable named', async () => {
    await assert.rejects(
      startDev(join(dir, 'bad.db'), { LONGHAUL_TENANT_QUOTAS: '{"acme":{"maxQueued":"ten"}}' }),
      /LONGHAUL_TENANT_QUOTAS\["acme"\]\.maxQueued must be an integer ≥ 0 \(got "ten"\)/,
    );
  });
});
