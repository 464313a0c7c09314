/**
 * The `longhaul` client commands, run as the built binary against a `longhaul dev` child
 * process: submit (plain, --json, --watch with plain lines and with a progress bar on a
 * terminal), status, ls, cancel, retry, --url / LONGHAUL_URL, --api-key / LONGHAUL_API_KEY,
 * and readable errors with a non-zero exit for every failure.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, collect, type Dev, runCli, startDev } from '../support/dev-process.js';

const KEY = 'lh_cli_test_key_0123456789';
const OTHER_KEY = 'lh_cli_other_key_0123456789';
const TASKS = join(process.cwd(), 'test/fixtures/cli-tasks.mjs');

interface Snapshot {
  id: string;
  type: string;
  status: string;
  attempts: number;
  result: unknown;
  error: { message: string } | null;
}

describe('longhaul CLI (built binary)', () => {
  let dir: string;
  let dev: Dev;
  /** Environment for a client command talking to the dev server as tenant `acme`. */
  let env: Record<string, string>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-'));
    dev = await startDev(join(dir, 'cli.db'), { LONGHAUL_API_KEYS: `acme:${KEY},other:${OTHER_KEY}` }, ['--tasks', TASKS]);
    env = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: KEY };
  });
  after(async () => {
    if (dev?.child.exitCode === null) {
      dev.child.kill('SIGTERM');
      await new Promise((r) => dev.child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('submit prints the accepted job; --json prints its snapshot', async () => {
    const plain = await runCli(['submit', 'cli.echo', '--input', '{"text":"hi"}'], env);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(plain.stdout, /^[0-9a-f-]{36} (queued|running|succeeded)/);
    const json = await runCli(['submit', 'cli.echo', '--input', '{"text":"hi"}', '--json'], env);
    assert.equal(json.code, 0, json.stderr);
    const job = JSON.parse(json.stdout) as Snapshot;
    assert.equal(job.type, 'cli.echo');
  });

  it('submit --watch prints one plain line per change when stdout is not a terminal, and exits 0 on success', async () => {
    const run = await runCli(['submit', 'demo.sleep', '--input', '{"steps":4,"stepMs":80}', '--watch'], env);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split('\n');
    assert.ok(!run.stdout.includes('\r') && !run.stdout.includes('\x1b['), 'no cursor movement in plain mode');
    assert.ok(
      lines.some((l) => /running .*stage=sleeping items=\d\/4/.test(l)),
      `progress lines with stage and items:\n${run.stdout}`,
    );
    assert.equal(lines.length, new Set(lines).size, 'a line is printed only when something changed');
    assert.match(lines.at(-1) ?? '', /^succeeded: \{"steps":4,"resumedFrom":0\}$/);
  });

  it('submit --watch exits 1 with the error when the job fails', async () => {
    const run = await runCli(['submit', 'cli.fail', '--watch'], env);
    assert.equal(run.code, 1);
    assert.match(run.stdout.trim().split('\n').at(-1) ?? '', /^failed: the input was rejected on purpose$/);
  });

  it('submit --watch exits 1 when the job is cancelled meanwhile (cancel from another CLI call)', async () => {
    const watcher = spawn(process.execPath, [BIN, 'submit', 'demo.sleep', '--input', '{"steps":200,"stepMs":50}', '--watch'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const done = collect(watcher);
    // The first line carries the id.
    const id = await new Promise<string>((resolve) => {
      let out = '';
      watcher.stdout?.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /^([0-9a-f-]{36}) running/m.exec(out);
        if (m) resolve(m[1] as string);
      });
    });
    const cancel = await runCli(['cancel', id], env);
    assert.equal(cancel.code, 0, cancel.stderr);
    assert.match(cancel.stdout, new RegExp(`^${id} (running|cancelled)`));
    const run = await done;
    assert.equal(run.code, 1, run.stdout);
    assert.equal(run.stdout.trim().split('\n').at(-1), 'cancelled', 'a plain last line, not "cancelled: cancelled"');
    const status = await runCli(['status', id, '--json'], env);
    assert.equal((JSON.parse(status.stdout) as Snapshot).status, 'cancelled');
  });

  it('submit --watch draws a redrawn progress bar with stage and ETA on a terminal', { skip: spawnSync('script', ['--version']).status !== 0 && 'util-linux `script` is not installed' }, async () => {
    // `script` gives the command a pseudo-terminal, so stdout.isTTY is true.
    // The terminal is 100 columns wide, as most are.
    const cmd = `stty cols 100; ${process.execPath} ${BIN} submit demo.sleep --input '{"steps":12,"stepMs":150}' --watch`;
    const child = spawn('script', ['-qefc', cmd, '/dev/null'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const run = await collect(child);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.ok(run.stdout.includes('\r\x1b[2K['), 'the bar is redrawn in place');
    assert.match(run.stdout, /\[[█░]+\]\s+\d+%\s+running\s+sleeping\s+\d+\/12/);
    assert.match(run.stdout, /ETA \d+s/);
    assert.match(run.stdout, /100%\s+succeeded/);
    // The bar's line is ended, and the last line is the plain outcome, with no cursor movement.
    assert.match(run.stdout, /100%\s+succeeded[^\r\n]*\r?\nsucceeded: \{"steps":12,"resumedFrom":0\}\r?\n$/);
    const widest = Math.max(...run.stdout.split(new RegExp(`\r${String.fromCharCode(27)}\\[2K|\r?\n`)).map((frame) => [...frame].length));
    assert.ok(widest <= 99, `every frame fits the terminal (widest ${widest})`);
  });

  it('a terminal reporting 0 columns still gets a readable bar', { skip: spawnSync('script', ['--version']).status !== 0 && 'util-linux `script` is not installed' }, async () => {
    const cmd = `stty cols 0; ${process.execPath} ${BIN} submit cli.echo --input '{"text":"x"}' --watch`;
    const run = await collect(spawn('script', ['-qefc', cmd, '/dev/null'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }));
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /100%\s+succeeded/);
  });

  it('submit --watch --json prints one JSON snapshot per line, the last one final', async () => {
    const run = await runCli(['submit', 'demo.sleep', '--input', '{"steps":3,"stepMs":60}', '--watch', '--json'], env);
    assert.equal(run.code, 0, run.stderr);
    const snapshots = run.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Snapshot);
    assert.ok(snapshots.length >= 2, run.stdout);
    assert.equal(new Set(snapshots.map((s) => s.id)).size, 1);
    assert.equal(snapshots.at(-1)?.status, 'succeeded');
    assert.deepEqual(snapshots.at(-1)?.result, { steps: 3, resumedFrom: 0 });
  });

  it('status, ls (with filters) and retry', async () => {
    const lastJson = (out: string) => JSON.parse(out.trim().split('\n').at(-1) ?? '') as Snapshot;
    const failed = lastJson((await runCli(['submit', 'cli.fail', '--watch', '--json'], env)).stdout);
    assert.equal(failed.status, 'failed');
    const status = await runCli(['status', failed.id], env);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, new RegExp(`^${failed.id} failed .*error="the input was rejected on purpose"`));

    const ls = await runCli(['ls', '--status', 'failed', '--type', 'cli.fail'], env);
    assert.equal(ls.code, 0, ls.stderr);
    assert.match(ls.stdout, new RegExp(`^${failed.id}  failed +cli\\.fail  `, 'm'));
    assert.ok(!ls.stdout.includes('demo.sleep'), 'the type filter applies');
    const page = JSON.parse((await runCli(['ls', '--limit', '1', '--json'], env)).stdout) as { items: Snapshot[]; nextCursor: string | null };
    assert.equal(page.items.length, 1);
    assert.ok(page.nextCursor, 'more pages exist');

    const retried = await runCli(['retry', failed.id, '--json'], env);
    assert.equal(retried.code, 0, retried.stderr);
    assert.ok(['queued', 'running', 'failed'].includes((JSON.parse(retried.stdout) as Snapshot).status));

    const succeeded = lastJson((await runCli(['submit', 'cli.echo', '--input', '{"text":"x"}', '--watch', '--json'], env)).stdout);
    assert.equal(succeeded.status, 'succeeded');
    const conflict = await runCli(['retry', succeeded.id], env);
    assert.equal(conflict.code, 1);
    assert.match(conflict.stderr, /^longhaul: 409 /);
    assert.equal(conflict.stdout, '');
  });

  it('--url and --api-key flags work and win over the environment', async () => {
    const run = await runCli(['ls', '--url', dev.base, '--api-key', KEY, '--limit', '1'], { LONGHAUL_URL: 'http://127.0.0.1:1', LONGHAUL_API_KEY: 'wrong' });
    assert.equal(run.code, 0, run.stderr);
  });

  it('tenants are isolated: another tenant sees no job and cannot cancel it', async () => {
    const mine = JSON.parse((await runCli(['submit', 'cli.echo', '--input', '{"text":"mine"}', '--json'], env)).stdout) as Snapshot;
    const theirs = { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: OTHER_KEY };
    const status = await runCli(['status', mine.id], theirs);
    assert.equal(status.code, 1);
    assert.match(status.stderr, /404/);
    const cancel = await runCli(['cancel', mine.id], theirs);
    assert.equal(cancel.code, 1);
    assert.match(cancel.stderr, /404/);
    assert.equal((await runCli(['ls'], theirs)).stdout, 'no jobs\n');
    // Naming the other tenant is refused (no admin key here), not answered with its own jobs.
    const named = await runCli(['ls', '--tenant', 'acme'], theirs);
    assert.equal(named.code, 1);
    assert.match(named.stderr, /403 FORBIDDEN: reading or acting on another tenant's jobs needs an admin API key/);
    assert.equal((await runCli(['ls', '--tenant', 'other'], theirs)).stdout, 'no jobs\n', 'its own tenant, named');
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(join(process.cwd(), 'package.json'), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const run = await runCli([flag]);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(run.stdout, `${version}\n`);
    }
  });

  it('status ID --watch follows an existing job to its end (exit 0 on success, 1 on failure)', async () => {
    const job = JSON.parse((await runCli(['submit', 'demo.sleep', '--input', '{"steps":4,"stepMs":80}', '--json'], env)).stdout) as Snapshot;
    const run = await runCli(['status', job.id, '--watch'], env);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split('\n');
    assert.match(lines[0] ?? '', new RegExp(`^${job.id} (queued|running|succeeded)`));
    assert.equal(lines.at(-1), 'succeeded: {"steps":4,"resumedFrom":0}');
    // An already finished job: its line, then the outcome at once.
    const again = await runCli(['status', job.id, '--watch', '--json'], env);
    assert.equal(again.code, 0, again.stderr);
    assert.equal((JSON.parse(again.stdout.trim().split('\n').at(-1) ?? '') as Snapshot).status, 'succeeded');
    const failed = JSON.parse((await runCli(['submit', 'cli.fail', '--json'], env)).stdout) as Snapshot;
    const run2 = await runCli(['status', failed.id, '--watch'], env);
    assert.equal(run2.code, 1);
    assert.equal(run2.stdout.trim().split('\n').at(-1), 'failed: the input was rejected on purpose');
  });

  it('ls says when there is more and prints the command of the next page; --cursor pages through every job once', async () => {
    const tag = `page-${Date.now()}`;
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.unshift((JSON.parse((await runCli(['submit', 'cli.echo', '--input', JSON.stringify({ text: `${tag}-${i}` }), '--json'], env)).stdout) as Snapshot).id);
    }
    const all = (await runCli(['ls', '--type', 'cli.echo', '--limit', '1000'], env)).stdout.trim().split('\n');
    const listed: string[] = [];
    let args = ['ls', '--type', 'cli.echo', '--limit', '2'];
    for (let page = 0; page < 1000; page++) {
      const run = await runCli(args, env);
      assert.equal(run.code, 0, run.stderr);
      const items = run.stdout.trim().split('\n').filter((l) => l !== '' && l !== 'no more jobs');
      listed.push(...items);
      const more = /^more jobs: longhaul (ls --type cli\.echo --limit 2 --cursor (\S+))\n$/.exec(run.stderr);
      if (!more) {
        assert.equal(run.stderr, '', 'the last page says nothing more');
        break;
      }
      args = (more[1] as string).split(' ');
    }
    assert.deepEqual(listed, all, 'pages add up to the whole list, in order, without repeats');
    for (const id of ids) assert.ok(listed.some((l) => l.startsWith(id)), `${id} listed`);
    assert.ok(all.length > 2, 'more than one page');
    const json = JSON.parse((await runCli(['ls', '--type', 'cli.echo', '--limit', '1', '--json'], env)).stdout) as { nextCursor: string };
    assert.ok(json.nextCursor, '--json prints the page with its nextCursor');
    const bad = await runCli(['ls', '--cursor', 'garbage'], env);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^longhaul: 400 INVALID_REQUEST: cursor is invalid/);
  });

  it('--idempotency-key: a replay says so and returns the same job; empty or non-ASCII keys are refused before any request', async () => {
    const key = `cli-${Date.now()}`;
    const first = await runCli(['submit', 'cli.echo', '--input', '{"text":"once"}', '--idempotency-key', key], env);
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.stderr, '');
    const id = first.stdout.split(' ')[0] as string;
    const again = await runCli(['submit', 'cli.echo', '--input', '{"text":"once"}', '--idempotency-key', key], env);
    assert.equal(again.code, 0, again.stderr);
    assert.ok(again.stdout.startsWith(`${id} `), again.stdout);
    assert.match(again.stderr, new RegExp(`^note: replayed: idempotency key "${key}" was already used for this same request; no new job was created, this is job ${id}\n$`));
    const different = await runCli(['submit', 'cli.echo', '--input', '{"text":"twice"}', '--idempotency-key', key], env);
    assert.equal(different.code, 1);
    assert.match(different.stderr, /^longhaul: 422 IDEMPOTENCY_CONFLICT: /);
    for (const [value, expected] of [
      ['', /^longhaul: --idempotency-key must be 1 to 255 characters \(got 0\)\n$/],
      ['café-42', /^longhaul: --idempotency-key must be printable ASCII \(HTTP headers carry no other text\): character 4 is U\+00E9\n$/],
      ['k'.repeat(256), /^longhaul: --idempotency-key must be 1 to 255 characters \(got 256\)\n$/],
    ] as const) {
      const run = await runCli(['submit', 'cli.echo', '--input', '{"text":"x"}', '--idempotency-key', value], env);
      assert.equal(run.code, 1, run.stdout);
      assert.match(run.stderr, expected);
    }
  });

  it('cancel on a running job says that cancellation was requested', async () => {
    const job = JSON.parse((await runCli(['submit', 'demo.sleep', '--input', '{"steps":400,"stepMs":50}', '--json'], env)).stdout) as Snapshot;
    for (let i = 0; i < 200; i++) {
      const s = JSON.parse((await runCli(['status', job.id, '--json'], env)).stdout) as Snapshot;
      if (s.status === 'running') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const run = await runCli(['cancel', job.id], env);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, new RegExp(`^${job.id} running .*cancel-requested`));
    assert.match(run.stderr, /^note: cancellation requested: the handler was told to stop; the job ends as cancelled when it does/);
    const end = await runCli(['status', job.id, '--watch'], env);
    assert.equal(end.stdout.trim().split('\n').at(-1), 'cancelled');
    // A queued job is cancelled at once: no note.
    const later = JSON.parse((await runCli(['submit', 'demo.sleep', '--delay-ms', '600000', '--input', '{"steps":1}', '--json'], env)).stdout) as Snapshot;
    const now = await runCli(['cancel', later.id], env);
    assert.match(now.stdout, new RegExp(`^${later.id} cancelled`));
    assert.equal(now.stderr, '');
  });

  it('every failure is one readable line on stderr and exit code 1', async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const junk = join(dir, 'junk.db');
    writeFileSync(junk, 'this is not a SQLite database, it is a text file of some length.\n'.repeat(20));
    const cases: Array<[string[], Record<string, string | undefined>, RegExp]> = [
      [['ls'], { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: undefined }, /^longhaul: 401 /],
      [['ls'], { LONGHAUL_URL: dev.base, LONGHAUL_API_KEY: 'not-a-key' }, /^longhaul: 401 /],
      [['ls'], { LONGHAUL_URL: `http://127.0.0.1:${closedPort}`, LONGHAUL_API_KEY: KEY }, /^longhaul: cannot reach http:\/\/127\.0\.0\.1:\d+: is the server running\?/],
      [['ls'], { LONGHAUL_URL: 'http://no-such-host.invalid', LONGHAUL_API_KEY: KEY }, /^longhaul: cannot reach http:\/\/no-such-host\.invalid: (ENOTFOUND|EAI_AGAIN)/],
      [['submit', 'cli.echo', '--input', '{not json'], env, /^longhaul: --input is not valid JSON/],
      [['submit', 'no.such.task'], env, /^longhaul: 422 .*no\.such\.task/],
      [['submit', 'cli.echo', '--input', '{"text":5}'], env, /^longhaul: 422 INVALID_INPUT: input for "cli\.echo" is invalid: \/?text: must be string\n$/],
      [['submit', 'cli.echo', '--input', '{"text":"x"}', '--priority', 'urgent'], env, /^longhaul: 400 /],
      [['submit', 'cli.echo', '--delay-ms', '-5'], env, /^longhaul: --delay-ms must be a non-negative integer/],
      [['status', '00000000-0000-7000-8000-000000000000'], env, /^longhaul: 404 /],
      [['ls', '--limit', '0'], env, /^longhaul: --limit must be an integer from 1 to 1000/],
      [['ls', '--status', 'sleeping'], env, /^longhaul: 400 /],
      [['worker', '--tasks', 'test/fixtures/cli-tasks.mjs', '--redis-url', 'localhost:6379'], env, /^longhaul: LONGHAUL_REDIS_URL \(--redis-url\) must be a redis:\/\//],
      [['server', '--port', '0'], { ...env, LONGHAUL_REDIS_URL: 'localhost:6379' }, /^longhaul: LONGHAUL_REDIS_URL \(--redis-url\) must be a redis:\/\//],
      // Each startup error names the setting actually given.
      [['server', '--database', join(dir, 'p.db')], { ...env, LONGHAUL_PORT: 'abc' }, /^longhaul: LONGHAUL_PORT must be an integer from 0 to 65535 \(got "abc"\)/],
      [['server', '--database', join(dir, 'p.db'), '--port', 'abc'], { ...env, LONGHAUL_PORT: '8080' }, /^longhaul: --port must be an integer from 0 to 65535 \(got "abc"\)/],
      [['worker', '--tasks', TASKS, '--database', join(dir, 'p.db')], { ...env, LONGHAUL_CONCURRENCY: 'lots' }, /^longhaul: LONGHAUL_CONCURRENCY must be an integer/],
      // The flag wins over the variable, even over a bad one: the next problem is the database.
      [['worker', '--tasks', TASKS, '--concurrency', '2', '--database', '/no/such/dir/x.db'], { ...env, LONGHAUL_CONCURRENCY: 'lots' }, /^longhaul: cannot open the SQLite database/],
      [['server', '--port', '0', '--database', join(dir, 'p.db')], { ...env, LONGHAUL_MAX_STREAMS_PER_TENANT: '0' }, /^longhaul: LONGHAUL_MAX_STREAMS_PER_TENANT must be an integer from 1 to /],
      [['server', '--port', '0', '--database', join(dir, 'p.db')], { ...env, LONGHAUL_MAX_SUBSCRIPTIONS_PER_SOCKET: 'many' }, /^longhaul: LONGHAUL_MAX_SUBSCRIPTIONS_PER_SOCKET must be an integer from 1 to /],
      [['server', '--port', '0', '--database', join(dir, 'p.db')], { ...env, LONGHAUL_LOG_LEVEL: 'loud' }, /^longhaul: LONGHAUL_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent \(got "loud"\)/],
      [['server', '--port', '0', '--database', join(dir, 'p.db')], { ...env, LONGHAUL_HTTP_LOG_LEVEL: 'chatty' }, /^longhaul: LONGHAUL_HTTP_LOG_LEVEL must be one of /],
      [['server', '--port', '0', '--database', '/no/such/dir/x.db'], env, /^longhaul: cannot open the SQLite database \/no\/such\/dir\/x\.db: the directory \/no\/such\/dir does not exist/],
      [['migrate', '--database', junk], env, /^longhaul: cannot use the SQLite database .*junk\.db: file is not a database/],
      [
        ['server', '--port', '0', '--database', join(dir, 'p.db')],
        { ...env, LONGHAUL_HEARTBEAT_INTERVAL_MS: '5000', LONGHAUL_HEARTBEAT_TIMEOUT_MS: '3000' },
        /^longhaul: LONGHAUL_HEARTBEAT_TIMEOUT_MS must be at least twice LONGHAUL_HEARTBEAT_INTERVAL_MS: 3000 ms < 2 × 5000 ms/,
      ],
      [
        ['worker', '--tasks', TASKS, '--database', join(dir, 'p.db')],
        { ...env, LONGHAUL_HEARTBEAT_INTERVAL_MS: undefined, LONGHAUL_HEARTBEAT_TIMEOUT_MS: '1000' },
        /^longhaul: LONGHAUL_HEARTBEAT_TIMEOUT_MS must be at least twice LONGHAUL_HEARTBEAT_INTERVAL_MS \(unset: the default\): 1000 ms < 2 × 5000 ms/,
      ],
    ];
    for (const [args, extra, expected] of cases) {
      const run = await runCli(args, { ...extra });
      assert.equal(run.code, 1, `${args.join(' ')}: exit code`);
      assert.match(run.stderr, expected, `${args.join(' ')}: ${run.stderr}`);
      assert.equal(run.stderr.trim().split('\n').length, 1, `${args.join(' ')}: one line, no stack trace: ${run.stderr}`);
    }
  });

  it('unknown commands and missing arguments print usage and exit non-zero', async () => {
    const unknown = await runCli(['frobnicate'], env);
    assert.notEqual(unknown.code, 0);
    assert.match(unknown.stderr, /unknown command 'frobnicate'/);
    const missing = await runCli(['status'], env);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /missing required argument 'id'/);
  });
});

describe('longhaul server and migrate say what they did', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-cli-start-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Starts `longhaul server` and resolves with its banner (up to the tasks line), then stops it. */
  async function bannerOf(args: string[], extraEnv: Record<string, string> = {}): Promise<string> {
    const child = spawn(process.execPath, [BIN, 'server', '--port', '0', ...args], {
      env: { ...process.env, LONGHAUL_LOG_LEVEL: 'silent', ...extraEnv },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const done = collect(child);
    let out = '';
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no banner: ${out}`)), 20_000);
        child.stdout?.on('data', (d: Buffer) => {
          out += d.toString();
          if (/^ {2}tasks .*\n/m.test(out)) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.once('exit', () => reject(new Error(`exited: ${out}`)));
      });
    } finally {
      child.kill('SIGTERM');
      await done;
    }
    return out;
  }

  it('server without --tasks says at start that no task types are loaded; with --tasks it lists them', async () => {
    const bare = await bannerOf(['--database', join(dir, 'bare.db')]);
    assert.match(bare, /^ {2}tasks {6}none loaded: every submission is refused \(422 UNKNOWN_TASK\); pass --tasks FILE \(or LONGHAUL_TASKS\)$/m);
    const loaded = await bannerOf(['--database', join(dir, 'loaded.db'), '--tasks', TASKS]);
    assert.match(loaded, /^ {2}tasks {6}cli\.echo, cli\.fail$/m);
  });

  it('migrate says what it applied to a new database, then that it is up to date', async () => {
    const db = join(dir, 'migrate.db');
    const first = await runCli(['migrate', '--database', db], { LONGHAUL_LOG_LEVEL: 'silent' });
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, new RegExp(`^database ${db.replaceAll('.', '\\.')}: created the schema: applied migrations? 1( to \\d+)?, now at version \\d+\\n$`));
    const version = /now at version (\d+)/.exec(first.stdout)?.[1];
    const second = await runCli(['migrate', '--database', db], { LONGHAUL_LOG_LEVEL: 'silent' });
    assert.equal(second.code, 0, second.stderr);
    assert.equal(second.stdout, `database ${db}: schema version ${version} is up to date, nothing to apply\n`);
  });
});

describe('redactUrl', () => {
  it('hides a URL password and leaves paths alone', async () => {
    const { redactUrl } = await import('../../src/cli/runtime.js');
    assert.equal(redactUrl('postgres://app:s3cret@db.internal:5432/jobs'), 'postgres://app:***@db.internal:5432/jobs');
    assert.equal(redactUrl('postgres://app@db/jobs'), 'postgres://app@db/jobs');
    assert.equal(redactUrl('./longhaul.db'), './longhaul.db');
    assert.equal(redactUrl('/var/lib/longhaul/data.db'), '/var/lib/longhaul/data.db');
  });
});
