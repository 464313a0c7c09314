/**
 * `longhaul schedules ...` (the built binary) against a `longhaul dev` child process whose tasks
 * module declares a schedule: ls, get, create, update, pause, resume, trigger, delete, the
 * declared schedule read-only, and readable one-line errors.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Dev, runCli, startDev } from '../support/dev-process.js';

const TASKS = join(process.cwd(), 'test/fixtures/schedule-tasks.mjs');

describe('longhaul schedules (built binary)', () => {
  let dir: string;
  let dev: Dev;
  let env: Record<string, string>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-sched-'));
    dev = await startDev(join(dir, 'cli.db'), {}, ['--tasks', TASKS]);
    env = { LONGHAUL_URL: dev.base };
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  const cli = async (...args: string[]) => runCli(['schedules', ...args], env);

  it('create, get, ls, update, pause, resume, trigger and delete', async () => {
    const created = await cli('create', 'nightly', '--task', 'sched.noop', '--cron', '0 3 * * *', '--timezone', 'Europe/Berlin', '--input', '{"n":1}', '--catch-up', 'runOnce', '--no-overlap');
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /^nightly {2}active/);
    assert.match(created.stdout, /cron {6}0 3 \* \* \* {2}\(Europe\/Berlin\)/);
    assert.match(created.stdout, /catch-up {2}runOnce, overlap forbidden/);
    assert.match(created.stdout, /next runs \d{4}-\d\d-\d\dT0[12]:00:00\.000Z/);

    const json = await cli('get', 'nightly', '--json');
    assert.equal(json.code, 0, json.stderr);
    const view = JSON.parse(json.stdout) as { nextRuns: string[]; input: unknown };
    assert.equal(view.nextRuns.length, 5);
    assert.deepEqual(view.input, { n: 1 });

    const ls = await cli('ls');
    assert.equal(ls.code, 0, ls.stderr);
    assert.match(ls.stdout, /^every-second +active +\* \* \* \* \* \* +UTC/m);
    assert.match(ls.stdout, /^nightly +active +0 3 \* \* \* +Europe\/Berlin/m);

    const updated = await cli('update', 'nightly', '--cron', '30 4 * * *', '--timezone', 'UTC');
    assert.equal(updated.code, 0, updated.stderr);
    assert.match(updated.stdout, /next runs \d{4}-\d\d-\d\dT04:30:00\.000Z/);

    assert.match((await cli('pause', 'nightly')).stdout, /^nightly {2}paused[\s\S]*next runs none \(paused\)/);
    assert.match((await cli('resume', 'nightly')).stdout, /^nightly {2}active/);

    const trig = await cli('trigger', 'nightly', '--json');
    assert.equal(trig.code, 0, trig.stderr);
    assert.equal((JSON.parse(trig.stdout) as { type: string }).type, 'sched.noop');

    const del = await cli('delete', 'nightly');
    assert.deepEqual([del.code, del.stdout], [0, 'schedule nightly deleted\n']);
  });

  it('refusals are one readable line and exit 1', async () => {
    const missing = await cli('get', 'nope');
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /404 SCHEDULE_NOT_FOUND: schedule "nope" not found/);

    const badCron = await cli('create', 'bad', '--task', 'sched.noop', '--cron', '* * *');
    assert.equal(badCron.code, 1);
    assert.match(badCron.stderr, /422 INVALID_SCHEDULE: schedule is invalid: cron: cron "\* \* \*" has 3 fields/);

    const badTz = await cli('create', 'bad', '--task', 'sched.noop', '--cron', '* * * * *', '--timezone', 'Mars/Base');
    assert.match(badTz.stderr, /422 INVALID_SCHEDULE: .*timezone "Mars\/Base" is not an IANA timezone/);

    const badPolicy = await cli('create', 'bad', '--task', 'sched.noop', '--cron', '* * * * *', '--catch-up', 'all');
    assert.match(badPolicy.stderr, /--catch-up must be skip or runOnce/);
    const noCron = await cli('create', 'bad', '--task', 'sched.noop');
    assert.match(noCron.stderr, /needs --task and --cron/);

    const declared = await cli('update', 'every-second', '--cron', '0 * * * * *');
    assert.equal(declared.code, 1);
    assert.match(declared.stderr, /409 SCHEDULE_DECLARED: schedule "every-second" is declared in the tasks module/);
    // The declared one may be paused (so the dev server stops submitting every second).
    assert.equal((await cli('pause', 'every-second')).code, 0);
  });
});
