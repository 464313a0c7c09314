/**
 * `longhaul attempts` and `longhaul dead-letters list|jobs|retry|discard` of the built binary
 * against a `longhaul dev` child process: readable refusals before any request (no --yes, a bad
 * time), the attempt history with stacks, the groups, a replay and a discard with their counts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { failedThroughStore } from '../support/dead-letters.js';
import { type Dev, runCli, startDev } from '../support/dev-process.js';

const USER = 'lh_cli_dl_user_0123456789';
const TASKS = join(process.cwd(), 'test/fixtures/cli-tasks.mjs');

describe('longhaul attempts and dead-letters (built binary)', () => {
  let dir: string;
  let dev: Dev;
  let env: Record<string, string>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-dl-'));
    dev = await startDev(join(dir, 'cli.db'), { LONGHAUL_API_KEYS: `acme:${USER}` }, ['--tasks', TASKS]);
    env = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: USER };
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  async function statusOf(id: string): Promise<string> {
    const s = await runCli(['status', id, '--json'], env);
    return (JSON.parse(s.stdout) as { status: string }).status;
  }
  async function failedJob(): Promise<string> {
    const sub = await runCli(['submit', 'cli.fail', '--json'], env);
    assert.equal(sub.code, 0, sub.stderr);
    const id = (JSON.parse(sub.stdout) as { id: string }).id;
    for (let i = 0; i < 400 && (await statusOf(id)) !== 'failed'; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await statusOf(id), 'failed');
    return id;
  }

  it('prints attempts and groups, replays and discards with --yes, and refuses readable mistakes', async () => {
    const a = await failedJob();
    await failedJob();

    const attempts = await runCli(['attempts', a, '--stack'], env);
    assert.equal(attempts.code, 0, attempts.stderr);
    assert.match(attempts.stdout, /^#1 {2}failed {5}\S+ → \S+ {2}worker \S+ {2}FATAL: the input was rejected on purpose\n/);
    assert.match(attempts.stdout, /\n {4}FatalError: the input was rejected on purpose\n {4}\s*at /);

    const list = await runCli(['dead-letters', 'list'], env);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /count {2}last failure/);
    assert.match(list.stdout, /\n {4}2 {2}\S+Z {2}cli\.fail {2}FATAL\n/);
    const jobs = await runCli(['dead-letters', 'jobs', '--type', 'cli.fail', '--code', 'FATAL', '--limit', '1'], env);
    assert.equal(jobs.code, 0, jobs.stderr);
    assert.match(jobs.stdout, /cli\.fail {2}FATAL: the input was rejected on purpose/);
    assert.match(jobs.stderr, /more failed jobs: add --cursor \S+/);

    const unconfirmed = await runCli(['dead-letters', 'retry', '--type', 'cli.fail'], env);
    assert.equal(unconfirmed.code, 1);
    assert.match(unconfirmed.stderr, /this replays failed jobs with type cli\.fail: add --yes to confirm/);
    const badTime = await runCli(['dead-letters', 'discard', '--since', 'last week', '--yes'], env);
    assert.equal(badTime.code, 1);
    assert.match(badTime.stderr, /--since must be an ISO date-time .* or a duration ago \(30m, 2h, 7d\); got "last week"/);
    const forbidden = await runCli(['dead-letters', 'list', '--tenant', '*'], env);
    assert.equal(forbidden.code, 1);
    assert.match(forbidden.stderr, /403 FORBIDDEN: acting on another tenant's dead letters needs an admin API key/);

    const replayed = await runCli(['dead-letters', 'retry', '--type', 'cli.fail', '--code', 'FATAL', '--since', '1h', '--yes'], env);
    assert.equal(replayed.code, 0, replayed.stderr);
    assert.equal(replayed.stdout, 'replayed 2 failed jobs\n');
    // cli.fail fails again: its history keeps both attempts.
    for (let i = 0; i < 400 && (await statusOf(a)) !== 'failed'; i++) await new Promise((r) => setTimeout(r, 50));
    const twice = await runCli(['attempts', a, '--json'], env);
    assert.deepEqual(
      (JSON.parse(twice.stdout) as { items: Array<{ attempt: number; outcome: string }> }).items.map((x) => [x.attempt, x.outcome]),
      [
        [1, 'failed'],
        [1, 'failed'],
      ],
    );

    for (let i = 0; i < 400; i++) {
      const out = await runCli(['dead-letters', 'list', '--json'], env);
      if ((JSON.parse(out.stdout) as Array<{ count: number }>)[0]?.count === 2) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const discarded = await runCli(['dead-letters', 'discard', '--code', 'FATAL', '--yes'], env);
    assert.equal(discarded.code, 0, discarded.stderr);
    assert.equal(discarded.stdout, 'discarded 2 failed jobs\n');
    assert.equal((await runCli(['dead-letters', 'list'], env)).stdout, 'no failed jobs\n');
    const gone = await runCli(['attempts', a], env);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /404 NOT_FOUND/);
  });

  it('--no-code names the group of jobs that failed without an error code', async () => {
    // Made through a store on the dev server's database file (no task fails without a code).
    const store = new SqliteStore({ path: join(dir, 'cli.db') });
    let bare: string[];
    try {
      bare = await failedThroughStore(store, { tenant: 'acme', type: 'cli.nocode', count: 2 });
      await failedThroughStore(store, { tenant: 'acme', type: 'cli.nocode', count: 1, code: 'E_CODE' });
    } finally {
      await store.close();
    }
    const list = await runCli(['dead-letters', 'list', '--type', 'cli.nocode'], env);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /\n {4}2 {2}\S+Z {2}cli\.nocode {2}\(no code\)\n/);
    const jobs = await runCli(['dead-letters', 'jobs', '--type', 'cli.nocode', '--no-code', '--json'], env);
    assert.equal(jobs.code, 0, jobs.stderr);
    assert.deepEqual((JSON.parse(jobs.stdout) as { items: Array<{ id: string }> }).items.map((j) => j.id).sort(), [...bare].sort());
    const unconfirmed = await runCli(['dead-letters', 'discard', '--type', 'cli.nocode', '--no-code'], env);
    assert.equal(unconfirmed.code, 1);
    assert.match(unconfirmed.stderr, /this deletes for good failed jobs with type cli\.nocode, no error code: add --yes to confirm/);
    const discarded = await runCli(['dead-letters', 'discard', '--type', 'cli.nocode', '--no-code', '--yes'], env);
    assert.equal(discarded.code, 0, discarded.stderr);
    assert.equal(discarded.stdout, 'discarded 2 failed jobs\n');
    const left = await runCli(['dead-letters', 'list', '--type', 'cli.nocode', '--json'], env);
    assert.deepEqual(
      (JSON.parse(left.stdout) as Array<{ code: string | null; count: number }>).map((g) => [g.code, g.count]),
      [['E_CODE', 1]],
    );
  });
});
