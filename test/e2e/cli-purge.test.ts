/**
 * `longhaul purge` of the built binary against a `longhaul dev` child process: readable refusals
 * before any request (no filter, no --yes), a 403 for a non-admin key, and the counts of an
 * erasure by an admin key (LONGHAUL_ADMIN_TENANTS).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Dev, runCli, startDev } from '../support/dev-process.js';

const USER = 'lh_cli_purge_user_0123456789';
const ADMIN = 'lh_cli_purge_admin_0123456789';
const TASKS = join(process.cwd(), 'test/fixtures/cli-tasks.mjs');

describe('longhaul purge (built binary)', () => {
  let dir: string;
  let dev: Dev;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-purge-'));
    dev = await startDev(join(dir, 'cli.db'), { LONGHAUL_API_KEYS: `acme:${USER},ops:${ADMIN}`, LONGHAUL_ADMIN_TENANTS: 'ops' }, ['--tasks', TASKS]);
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses before any request without a filter or without --yes', async () => {
    const env = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: ADMIN };
    const none = await runCli(['purge', '--yes'], env);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /purge needs a filter: --tenant, --type or --before/);
    const unconfirmed = await runCli(['purge', '--tenant', 'acme'], env);
    assert.equal(unconfirmed.code, 1);
    assert.match(unconfirmed.stderr, /add --yes to confirm/);
  });

  it("a non-admin key is a readable 403; an admin key erases the tenant's ended jobs and prints the counts", async () => {
    const user = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: USER };
    const sub = await runCli(['submit', 'cli.echo', '--input', '{"text":"x"}', '--json'], user);
    assert.equal(sub.code, 0, sub.stderr);
    const id = (JSON.parse(sub.stdout) as { id: string }).id;
    for (let i = 0; i < 200; i++) {
      const s = await runCli(['status', id, '--json'], user);
      if ((JSON.parse(s.stdout) as { status: string }).status === 'succeeded') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const refused = await runCli(['purge', '--tenant', 'acme', '--yes'], user);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /403 FORBIDDEN: purging jobs needs an admin API key/);
    const done = await runCli(['purge', '--tenant', 'acme', '--yes'], { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: ADMIN });
    assert.equal(done.code, 0, done.stderr);
    assert.match(done.stdout, /^deleted 1 jobs, 0 files \(/);
    const gone = await runCli(['status', id], user);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /404/);
  });
});
