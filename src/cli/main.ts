#!/usr/bin/env node
/** The `longhaul` command. */
// First: it must be in place before anything loads node:sqlite.
import './quiet-sqlite-warning.js';
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { LonghaulError } from '../core/errors.js';
import { Longhaul } from '../longhaul.js';
import { registerClientCommands } from './client-commands.js';
import { describeMigration } from './describe.js';
import { registerKeyCommands } from './key-commands.js';
import { CliError, makeLogger, redactUrl, runRuntime } from './runtime.js';

const program = new Command();
// dist/cli/main.js and src/cli/main.ts both sit two levels below the package root.
const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
program.name('longhaul').description('Long-running jobs for web applications').version(version, '-V, --version', 'print the version').showHelpAfterError();

const runtimeOptions = (cmd: Command) =>
  cmd
    .option('--database <url>', 'SQLite path or postgres:// URL (LONGHAUL_DATABASE_URL)', undefined)
    .option('--redis-url <url>', 'redis:// URL: events and progress go through Redis (LONGHAUL_REDIS_URL)', undefined)
    .option('--tasks <file>', 'tasks module (LONGHAUL_TASKS)')
    .option('--concurrency <n>', 'jobs run at once by this process (LONGHAUL_CONCURRENCY)')
    .option('--drain-ms <ms>', 'on SIGTERM, how long running jobs may finish before they are handed back', undefined);
const serverOptions = (cmd: Command) =>
  cmd
    .option('--host <host>', 'address to listen on (LONGHAUL_HOST)')
    .option('--port <port>', 'port (LONGHAUL_PORT)')
    .option('--insecure-no-auth', 'allow a non-loopback address without API keys');

serverOptions(runtimeOptions(program.command('dev').description('server + workers + sweeper in one process, with example tasks'))).action((o) =>
  runRuntime('dev', o),
);
serverOptions(runtimeOptions(program.command('server').description('the HTTP API (plus the sweeper)'))).action((o) => runRuntime('server', o));
runtimeOptions(program.command('worker').description('run jobs of the tasks module'))
  .option('--health-port <port>', 'serve /healthz, /readyz and /metrics on this port (LONGHAUL_HEALTH_PORT; none by default)')
  .option('--host <host>', 'address the health port listens on (LONGHAUL_HOST)')
  .action((o) => runRuntime('worker', o));

program
  .command('migrate')
  .description('create or upgrade the database schema')
  .option('--database <url>', 'SQLite path or postgres:// URL (LONGHAUL_DATABASE_URL)')
  .action(async (o: { database?: string }) => {
    // Several machines may run this at once: migrations take an advisory lock (PostgreSQL) or an
    // exclusive transaction (SQLite). No events channel: this process relays nothing.
    const lh = await Longhaul.open({ ...(o.database ? { database: o.database } : {}), logger: makeLogger(), channel: false });
    process.stdout.write(`database ${redactUrl(lh.config.database)}: ${describeMigration(lh.migration)}\n`);
    await lh.close();
  });

registerKeyCommands(program);
registerClientCommands(program);

export async function main(argv: string[]): Promise<void> {
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    const message = err instanceof CliError || err instanceof LonghaulError ? err.message : err instanceof Error ? err.message : String(err);
    process.stderr.write(`longhaul: ${message}\n`);
    process.exit(1);
  }
}

await main(process.argv);
