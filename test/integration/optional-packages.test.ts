/**
 * Optional packages (issue 35): pg, ioredis, the AWS SDK and pdfkit are optional peer
 * dependencies. Each test runs a fresh process in which test/support/hide-packages.mjs makes
 * one of them unresolvable (Node's own "Cannot find package" error), then configures the
 * feature that needs it: the error names the package and the install command, when the
 * instance opens (S3 included, though blob storage opens on first use), and the CLI prints it
 * as one line without a stack. `longhaul dev`'s example tasks load without pdfkit; only a PDF
 * report fails, at once and without retries.
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
const HIDE = ['--import', 'tsx', '--import', './test/support/hide-packages.mjs'];

interface Failure {
  name: string;
  code: string;
  message: string;
}

async function fixture(hide: string, args: string[], env: Record<string, string> = {}): Promise<unknown> {
  const { stdout } = await run(process.execPath, [...HIDE, 'test/fixtures/optional-packages.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, LONGHAUL_LOG_LEVEL: 'silent', LONGHAUL_REDIS_URL: '', LONGHAUL_S3_BUCKET: '', ...env, LONGHAUL_HIDE_PACKAGES: hide },
    timeout: 60_000,
  });
  return JSON.parse(stdout);
}

/** `longhaul ...args` from the sources, with `hide` hidden: its exit code and output. */
async function cli(hide: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [...HIDE, 'src/cli/main.ts', ...args], {
      cwd: ROOT,
      env: { ...process.env, LONGHAUL_LOG_LEVEL: 'silent', LONGHAUL_REDIS_URL: '', LONGHAUL_S3_BUCKET: '', ...env, LONGHAUL_HIDE_PACKAGES: hide },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const PG = 'A PostgreSQL database (a postgres:// URL) needs the package pg, which is not installed: npm install pg';

describe('optional packages: a feature configured without its package says which to install', () => {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-optional-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the hook hides a package for real: with nothing hidden, the same scenario makes a PostgresStore (the check is not vacuous)', async () => {
    assert.deepEqual(((await fixture('', ['stores', dir])) as { postgres: unknown }).postgres, { made: true });
  });

  it('PostgreSQL without pg: Longhaul.open throws MissingPackageError naming pg', async () => {
    assert.deepEqual(await fixture('pg', ['postgres', 'postgres://127.0.0.1:5432/test']), { name: 'MissingPackageError', code: 'MISSING_PACKAGE', message: PG });
  });

  it('Redis relay without ioredis: Longhaul.open throws naming ioredis', async () => {
    assert.deepEqual(await fixture('ioredis', ['redis', dir]), {
      name: 'MissingPackageError',
      code: 'MISSING_PACKAGE',
      message: 'The Redis relay (LONGHAUL_REDIS_URL) needs the package ioredis, which is not installed: npm install ioredis',
    });
  });

  it('S3 without the AWS SDK: Longhaul.open throws, not the first upload, naming both packages and the missing one', async () => {
    assert.deepEqual(await fixture('@aws-sdk/lib-storage', ['s3', dir], { LONGHAUL_S3_BUCKET: 'probe' }), {
      name: 'MissingPackageError',
      code: 'MISSING_PACKAGE',
      message:
        'S3 blob storage (LONGHAUL_S3_BUCKET) needs the packages @aws-sdk/client-s3 and @aws-sdk/lib-storage (@aws-sdk/lib-storage is not installed): npm install @aws-sdk/client-s3 @aws-sdk/lib-storage',
    });
    const both = (await fixture('@aws-sdk/client-s3,@aws-sdk/lib-storage', ['s3', dir], { LONGHAUL_S3_BUCKET: 'probe' })) as Failure;
    assert.match(both.message, /\(@aws-sdk\/client-s3 is not installed\): npm install @aws-sdk\/client-s3 @aws-sdk\/lib-storage$/);
  });

  it('longhaul/stores without pg: the entry loads, SqliteStore works, new PostgresStore throws naming pg', async () => {
    const out = (await fixture('pg', ['stores', dir])) as { sqliteMigratedTo: number; postgres: Failure };
    assert.ok(out.sqliteMigratedTo >= 1);
    assert.deepEqual(out.postgres, { name: 'MissingPackageError', code: 'MISSING_PACKAGE', message: PG });
  });

  it("the example tasks without pdfkit: a PDF report fails at once (MISSING_PACKAGE, one attempt), a CSV report succeeds", async () => {
    const out = (await fixture('pdfkit', ['pdf', dir])) as { pdf: { status: string; attempts: number; error: { code: string; message: string; retryable: boolean } }; csv: { status: string } };
    assert.equal(out.pdf.status, 'failed');
    assert.equal(out.pdf.attempts, 1);
    assert.equal(out.pdf.error.code, 'MISSING_PACKAGE');
    assert.equal(out.pdf.error.retryable, false);
    assert.equal(out.pdf.error.message, 'The PDF format of the example task report.generate needs the package pdfkit, which is not installed: npm install pdfkit');
    assert.equal(out.csv.status, 'succeeded');
  });

  it('the CLI prints the error as one line, no stack: longhaul server on PostgreSQL without pg, longhaul worker with Redis without ioredis', async () => {
    const server = await cli('pg', ['server', '--port', '0', '--database', 'postgres://127.0.0.1:5432/test']);
    assert.equal(server.code, 1);
    assert.equal(server.stderr, `longhaul: ${PG}\n`);
    const worker = await cli('ioredis', ['worker', '--tasks', 'src/example-tasks/examples.ts', '--database', join(dir, 'cli.db')], { LONGHAUL_REDIS_URL: 'redis://127.0.0.1:6379' });
    assert.equal(worker.code, 1);
    assert.equal(worker.stderr, 'longhaul: The Redis relay (LONGHAUL_REDIS_URL) needs the package ioredis, which is not installed: npm install ioredis\n');
  });
});
