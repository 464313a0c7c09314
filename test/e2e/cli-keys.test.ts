/**
 * `longhaul keys create|list|revoke` of the built binary on a SQLite file, with a `longhaul dev`
 * child process over the same file and no LONGHAUL_API_KEYS: the database's keys are required
 * and serve their tenant; `keys list` shows id, tenant, prefix, admin, created and last used,
 * never the key; `keys revoke` is honoured by the running server within seconds; `--env` keeps
 * making entries for LONGHAUL_API_KEYS without a database.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Dev, runCli, startDev } from '../support/dev-process.js';

const TASKS = join(process.cwd(), 'test/fixtures/cli-tasks.mjs');
const KEY_FORMAT = /^lh_([a-z2-7]{12})_[A-Za-z0-9_-]{43}$/;
/** The id part of a key. */
const idOf = (key: string | undefined) => (KEY_FORMAT.exec(key ?? '') as RegExpExecArray)[1] as string;

describe('longhaul keys (built binary, SQLite)', () => {
  let dir: string;
  let db: string;
  let dev: Dev | null = null;
  const keys: Record<string, string> = {};

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-keys-'));
    db = join(dir, 'keys.db');
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev?.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  const get = (path: string, key?: string) => fetch(`${dev?.base}${path}`, key ? { headers: { authorization: `Bearer ${key}` } } : {});

  it('create prints the key once on stdout; the database holds its hash only; bad tenants are refused', async () => {
    for (const [tenant, admin] of [['acme', false], ['ops', true]] as const) {
      const made = await runCli(['keys', 'create', '--tenant', tenant, ...(admin ? ['--admin'] : []), '--database', db]);
      assert.equal(made.code, 0, made.stderr);
      const key = made.stdout.trim();
      assert.match(key, KEY_FORMAT);
      assert.match(made.stderr, new RegExp(`created ${admin ? 'admin ' : ''}key [a-z2-7]{12} for tenant ${tenant} in .*keys\\.db; the key above is shown only now`));
      keys[tenant] = key;
    }
    const file = readFileSync(db);
    for (const key of Object.values(keys)) {
      assert.equal(file.includes(key), false, 'the key is not in the database file');
      assert.equal(file.includes((key.match(/_([A-Za-z0-9_-]{43})$/) as RegExpMatchArray)[1] as string), false, 'nor its secret');
    }
    for (const tenant of ['*', 'longhaul:internal', '']) {
      const bad = await runCli(['keys', 'create', '--tenant', tenant, '--database', db]);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /tenant must be 1–64 letters, digits, \. _ -/);
    }
    // --env: an entry for LONGHAUL_API_KEYS, no database opened.
    const other = join(dir, 'untouched.db');
    const env = await runCli(['keys', 'create', '--tenant', 'acme', '--env'], { LONGHAUL_DATABASE_URL: other });
    assert.equal(env.code, 0, env.stderr);
    assert.match(env.stdout, /^acme:lh_[A-Za-z0-9_-]{32}\n$/);
    assert.equal(existsSync(other), false);
  });

  it('a dev server over the database requires its keys and serves each its tenant', async () => {
    dev = await startDev(db, { LONGHAUL_API_KEYS: '' }, ['--tasks', TASKS]);
    assert.equal((await get('/v1/jobs')).status, 401);
    const acme = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: keys.acme };
    const sub = await runCli(['submit', 'cli.echo', '--input', '{"text":"hi"}', '--json'], acme);
    assert.equal(sub.code, 0, sub.stderr);
    const id = (JSON.parse(sub.stdout) as { id: string }).id;
    const mine = (await (await get('/v1/jobs', keys.acme)).json()) as { items: Array<{ id: string }> };
    assert.deepEqual(
      mine.items.map((j) => j.id),
      [id],
    );
    assert.equal((await get('/v1/jobs?tenant=*', keys.acme)).status, 403, 'not an admin');
    assert.equal((await get('/v1/jobs?tenant=*', keys.ops)).status, 200, 'the admin key');
    assert.equal((await get('/v1/jobs', `${(keys.acme as string).slice(0, -1)}${keys.acme?.endsWith('x') ? 'y' : 'x'}`)).status, 401);
  });

  it('list shows id, tenant, prefix, admin, created and last used, never the key', async () => {
    let out = '';
    // The last use is written just after the request, not as part of it.
    for (let i = 0; i < 50; i++) {
      const listed = await runCli(['keys', 'list', '--database', db]);
      assert.equal(listed.code, 0, listed.stderr);
      out = listed.stdout;
      if (/^\S+\s+acme\s.*Z\s+\d{4}-\d\d-\d\dT\S+Z$/m.test(out)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const [head, ...rows] = out.trim().split('\n');
    assert.match(head as string, /^ID\s+TENANT\s+PREFIX\s+ADMIN\s+CREATED\s+LAST USED$/);
    const acmeId = idOf(keys.acme);
    const opsId = idOf(keys.ops);
    assert.match(rows[0] as string, new RegExp(`^${acmeId}\\s+acme\\s+lh_${acmeId}_\\s+no\\s+\\d{4}-\\S+Z\\s+\\d{4}-\\S+Z$`), 'acme was used: its last use is shown');
    assert.match(rows[1] as string, new RegExp(`^${opsId}\\s+ops\\s+lh_${opsId}_\\s+yes\\s+\\d{4}-\\S+Z\\s+\\S+$`));
    for (const key of Object.values(keys)) assert.equal(out.includes(key.slice(16)), false);
    const json = await runCli(['keys', 'list', '--json', '--tenant', 'ops', '--database', db]);
    const parsed = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
    assert.deepEqual(
      parsed.map((k) => [k.id, k.tenant, k.admin, k.prefix, k.revokedAt]),
      [[opsId, 'ops', true, `lh_${opsId}_`, null]],
    );
    assert.deepEqual(Object.keys(parsed[0] ?? {}).sort(), ['admin', 'createdAt', 'id', 'lastUsedAt', 'prefix', 'revokedAt', 'tenant']);
  });

  it('revoke: the running server refuses the key within seconds; list --all shows it revoked', async () => {
    const acmeId = idOf(keys.acme);
    assert.equal((await get('/v1/jobs', keys.acme)).status, 200);
    const revoked = await runCli(['keys', 'revoke', acmeId, '--database', db]);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.match(revoked.stdout, new RegExp(`^revoked key ${acmeId} of tenant acme \\(\\d{4}-\\S+Z\\)\\n$`));
    const at = Date.now();
    let status = 200;
    while (Date.now() - at < 8_000) {
      status = (await get('/v1/jobs', keys.acme)).status;
      if (status === 401) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 401, 'the revoked key is refused');
    assert.ok(Date.now() - at <= 6_000, `within the cache time (5 s): ${Date.now() - at} ms`);
    assert.equal((await get('/v1/jobs', keys.ops)).status, 200, 'the other key still works');

    const listed = await runCli(['keys', 'list', '--database', db]);
    assert.doesNotMatch(listed.stdout, new RegExp(acmeId));
    const all = await runCli(['keys', 'list', '--all', '--database', db]);
    assert.match(all.stdout, /REVOKED$/m);
    assert.match(all.stdout, new RegExp(`^${acmeId}\\s+acme\\s.*\\d{4}-\\S+Z$`, 'm'));
    // By its prefix too, and again: no change. An unknown id is an error.
    assert.equal((await runCli(['keys', 'revoke', `lh_${acmeId}_`, '--database', db])).code, 0);
    const unknown = await runCli(['keys', 'revoke', 'abcdefghijkl', '--database', db]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /API key abcdefghijkl not found/);
    const junk = await runCli(['keys', 'revoke', 'not-an-id', '--database', db]);
    assert.equal(junk.code, 1);
    assert.match(junk.stderr, /not a key id/);
  });
});
