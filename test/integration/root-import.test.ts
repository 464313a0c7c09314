/**
 * The root entry loads no optional backend's driver (issue 35): a SQLite-only user's
 * `import('longhaul')` loads none of `pg`, `ioredis`, `@aws-sdk/*`, `prom-client`, nor does
 * opening an instance on SQLite and running a job through its worker; prom-client is loaded by
 * the first scrape of the metrics, which still count the job run before. Run in a fresh process
 * (test/fixtures/root-import.ts) whose every resolved module, ESM or CommonJS, is recorded by
 * test/support/record-modules.mjs.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = new URL('../../', import.meta.url);
const DRIVERS = ['pg', 'ioredis', '@aws-sdk', 'prom-client'];

/** The packages among DRIVERS whose files a list of module URLs holds. */
function driversIn(urls: string[]): string[] {
  const found = new Set<string>();
  for (const url of urls) {
    const pkg = /\/node_modules\/((?:@[^/]+)|[^/]+)\//.exec(url)?.[1];
    if (pkg !== undefined && DRIVERS.includes(pkg)) found.add(pkg);
  }
  return [...found].sort();
}

describe('the root entry loads no driver a SQLite user does not need', () => {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-root-import-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('import, open and a job on SQLite load none of pg, ioredis, @aws-sdk, prom-client; the first scrape loads prom-client and counts the job', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--import', './test/support/record-modules.mjs', '--import', 'tsx', 'test/fixtures/root-import.ts', join(dir, 'probe.db')],
      { cwd: ROOT, env: { ...process.env, LONGHAUL_LOG_LEVEL: 'silent', LONGHAUL_REDIS_URL: '' }, timeout: 60_000 },
    );
    const { afterImport, afterJob, afterScrape, metrics, status } = JSON.parse(stdout) as {
      afterImport: string[];
      afterJob: string[];
      afterScrape: string[];
      metrics: string;
      status: string;
    };
    // The recorder sees the project's own modules too (the check is not vacuous).
    assert.ok(afterImport.some((u) => u.endsWith('/src/longhaul.ts')), 'the recorder saw src/longhaul.ts');
    assert.ok(afterJob.some((u) => u.endsWith('/src/store/sqlite/sqlite-store.ts')), 'the recorder saw the SQLite store');
    assert.equal(status, 'succeeded');
    assert.deepEqual(driversIn(afterImport), []);
    assert.deepEqual(driversIn(afterJob), []);
    assert.deepEqual(driversIn(afterScrape), ['prom-client']);
    // Counted before prom-client was loaded, rendered by it.
    assert.match(metrics, /^longhaul_jobs_submitted_total\{task_type="probe\.echo"\} 1$/m);
    assert.match(metrics, /^longhaul_jobs_finished_total\{task_type="probe\.echo",state="succeeded"\} 1$/m);
    assert.match(metrics, /^longhaul_job_duration_seconds_count\{task_type="probe\.echo",state="succeeded"\} 1$/m);
    assert.match(metrics, /^longhaul_jobs\{state="succeeded",task_type="probe\.echo"\} 1$/m);
    assert.match(metrics, /^nodejs_eventloop_lag_seconds /m);
  });
});
