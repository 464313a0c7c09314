/**
 * `longhaul dev` / `server` start-up refusals and warnings of issue 36: a `*` tenant, short
 * keys, a short stream-token secret and a bad limit are refused before anything opens;
 * `--insecure-no-auth` logs a warning naming the address the banner prints.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { collect } from '../support/dev-process.js';

function longhaul(args: string[], env: Record<string, string | undefined>) {
  const merged: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, LONGHAUL_LOG_LEVEL: 'warn', ...env })) if (v !== undefined) merged[k] = v;
  return spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], { env: merged, stdio: ['ignore', 'pipe', 'pipe'] });
}

describe('longhaul dev/server: start-up checks of issue 36', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-sec-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const refusals: Array<[string, Record<string, string>, RegExp]> = [
    ['a tenant named *', { LONGHAUL_API_KEYS: 'alice:alice-key-0123456789,*:admin-key-0123456789' }, /tenant name "\*" is not allowed/],
    ['a key under 16 characters', { LONGHAUL_API_KEYS: 'alice:0123456789' }, /key of tenant "alice" is too short \(at least 16 characters\)/],
    ['a short stream-token secret', { LONGHAUL_STREAM_TOKEN_SECRET: 'x' }, /LONGHAUL_STREAM_TOKEN_SECRET must be at least 32 characters/],
    ['a bad connection cap', { LONGHAUL_MAX_CONNECTIONS: 'lots' }, /LONGHAUL_MAX_CONNECTIONS/],
  ];
  for (const [what, env, message] of refusals) {
    it(`refuses ${what} at start`, async () => {
      const run = await collect(longhaul(['server', '--port', '0', '--database', join(dir, 'refused.db')], env), 20_000);
      assert.notEqual(run.code, 0, run.stdout);
      assert.match(run.stderr, message);
      assert.doesNotMatch(run.stdout, /listening on/);
      assert.doesNotMatch(run.stderr, /0123456789/, 'the key is not printed');
    });
  }

  it('--insecure-no-auth logs a warning naming the address the banner prints', async () => {
    const child = longhaul(['dev', '--host', '127.0.0.1', '--port', '0', '--insecure-no-auth', '--database', join(dir, 'insecure.db')], { LONGHAUL_API_KEYS: undefined });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    try {
      const base = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no banner: ${out}`)), 20_000);
        const check = () => {
          const m = /listening on (http:\/\/\S+)/.exec(out);
          if (m && /insecure-no-auth/.test(out)) {
            clearTimeout(timer);
            resolve(m[1] as string);
          }
        };
        child.stdout.on('data', check);
        child.on('exit', () => reject(new Error(`exited: ${out}`)));
      });
      assert.match(base, /^http:\/\/127\.0\.0\.1:\d+$/);
      const warning = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { level: number; address?: string; msg: string })
        .find((l) => /insecure-no-auth/.test(l.msg));
      assert.ok(warning, out);
      assert.equal(warning.level, 40);
      assert.equal(warning.address, base);
      assert.ok(warning.msg.includes(base));
    } finally {
      child.kill('SIGKILL');
    }
  });
});
