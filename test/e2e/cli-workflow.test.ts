/**
 * The workflow commands of the built `longhaul` binary against a `longhaul dev` child process:
 * signal (kept for a running job, refused for an ended one), submit-batch (from a file, with one
 * idempotency key; a refused job named), ls --parent, and readable errors for bad arguments.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Dev, runCli, startDev } from '../support/dev-process.js';

const KEY = 'lh_cli_wf_key_0123456789';
const TASKS = join(process.cwd(), 'test/fixtures/cli-tasks.mjs');

describe('longhaul CLI: signal, submit-batch, ls --parent (built binary)', () => {
  let dir: string;
  let dev: Dev;
  let env: Record<string, string>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-wf-'));
    dev = await startDev(join(dir, 'cli.db'), { LONGHAUL_API_KEYS: `acme:${KEY}` }, ['--tasks', TASKS]);
    env = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: KEY };
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  async function submitJson(args: string[]): Promise<{ id: string; status: string }> {
    const run = await runCli(['submit', ...args, '--json'], env);
    assert.equal(run.code, 0, run.stderr);
    return JSON.parse(run.stdout) as { id: string; status: string };
  }

  it('signal: kept for a running job; --json prints the answer; an ended job is a readable 409', async () => {
    const job = await submitJson(['demo.sleep', '--input', '{"steps":400,"stepMs":50}']);
    const sent = await runCli(['signal', job.id, 'approve', '--data', '{"ok":true}'], env);
    assert.equal(sent.code, 0, sent.stderr);
    assert.match(sent.stdout, /signal "approve" sent: kept for job .*'s next wait for it/);
    const json = await runCli(['signal', job.id, 'approve', '--json'], env);
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout), { jobId: job.id, name: 'approve', resumed: false });

    const done = await submitJson(['cli.echo', '--input', '{"text":"x"}']);
    await runCli(['cancel', done.id], env);
    for (let i = 0; i < 100; i++) {
      const s = await runCli(['status', done.id, '--json'], env);
      if (['succeeded', 'cancelled'].includes((JSON.parse(s.stdout) as { status: string }).status)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const ended = await runCli(['signal', done.id, 'approve'], env);
    assert.equal(ended.code, 1);
    assert.match(ended.stderr, /409 JOB_ENDED: job .* is (succeeded|cancelled): it takes no more signals/);
    await runCli(['cancel', job.id], env);
  });

  it('signal: bad arguments are readable errors before any request', async () => {
    const badName = await runCli(['signal', 'some-id', 'no spaces'], env);
    assert.equal(badName.code, 1);
    assert.match(badName.stderr, /signal name must be 1 to 128 letters, digits or \. _ : - characters/);
    const badData = await runCli(['signal', 'some-id', 'go', '--data', '{oops'], env);
    assert.equal(badData.code, 1);
    assert.match(badData.stderr, /--data is not valid JSON/);
    const missing = await runCli(['signal', '01a20f20-0000-7000-8000-000000000000', 'go'], env);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /404 NOT_FOUND/);
  });

  it('submit-batch: creates the jobs of a file, replays by key, names the job a batch is refused for', async () => {
    const file = join(dir, 'jobs.json');
    writeFileSync(file, JSON.stringify([{ type: 'cli.echo', input: { text: 'a' } }, { type: 'cli.echo', input: { text: 'b' }, priority: 'high' }]));
    const key = `cli-batch-${Date.now()}`;
    const first = await runCli(['submit-batch', '--file', file, '--idempotency-key', key, '--json'], env);
    assert.equal(first.code, 0, first.stderr);
    const ids = (JSON.parse(first.stdout) as { jobs: Array<{ id: string }> }).jobs.map((j) => j.id);
    assert.equal(ids.length, 2);
    const again = await runCli(['submit-batch', '--file', file, '--idempotency-key', key], env);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /replayed/);
    assert.deepEqual(
      again.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]),
      ids,
    );

    const wrapped = join(dir, 'wrapped.json');
    writeFileSync(wrapped, JSON.stringify({ jobs: [{ type: 'cli.echo', input: { text: 'c' } }, { type: 'no.such.task' }] }));
    const refused = await runCli(['submit-batch', '--file', wrapped], env);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /422 UNKNOWN_TASK: jobs\[1\]: unknown task type "no\.such\.task"/);

    const notJson = join(dir, 'bad.json');
    writeFileSync(notJson, '[{"type":');
    for (const [args, message] of [
      [['--file', join(dir, 'absent.json')], /cannot read --file .*absent\.json: no such file/],
      [['--file', notJson], /--file .*bad\.json is not valid JSON/],
    ] as const) {
      const run = await runCli(['submit-batch', ...args], env);
      assert.equal(run.code, 1);
      assert.match(run.stderr, message);
    }
    writeFileSync(notJson, '{"type":"cli.echo"}');
    const single = await runCli(['submit-batch', '--file', notJson], env);
    assert.equal(single.code, 1);
    assert.match(single.stderr, /must hold an array of jobs/);
  });

  it('ls --parent lists only that job’s children (none for a job without any)', async () => {
    const job = await submitJson(['cli.echo', '--input', '{"text":"p"}']);
    const run = await runCli(['ls', '--parent', job.id], env);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, 'no jobs\n');
  });
});
