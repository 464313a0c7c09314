/** The CLI commands that talk to a running server over HTTP: submit, status, ls, cancel, retry. */
import type { Command } from 'commander';
import { LonghaulApiError, LonghaulClient } from '../client/index.js';
import type { JobSnapshot } from '../core/job.js';
import { isTerminal } from '../core/states.js';
import { renderBar, renderLine } from './progress-bar.js';
import { CliError } from './runtime.js';

interface ClientFlags {
  url?: string;
  apiKey?: string;
  json?: boolean;
}

function clientFrom(flags: ClientFlags): LonghaulClient {
  const baseUrl = flags.url ?? process.env.LONGHAUL_URL ?? 'http://127.0.0.1:8080';
  const apiKey = flags.apiKey ?? process.env.LONGHAUL_API_KEY;
  return new LonghaulClient({ baseUrl, ...(apiKey ? { apiKey } : {}) });
}

/** Turns API and network failures into one readable line. */
export function describeFailure(err: unknown, flags: ClientFlags): string {
  if (err instanceof LonghaulApiError) {
    const detail = err.detail ?? err.message;
    const issues = (err.errors ?? []).map((e) => (e.path ? `${e.path}: ${e.message}` : e.message));
    // The detail often lists the field errors already; add only the ones it does not name.
    const extra = issues.filter((i) => !detail.includes(i));
    return `${err.status} ${err.code ?? ''}: ${detail}${extra.length ? ` (${extra.join('; ')})` : ''}`.replace(/\s+:/, ':');
  }
  const url = flags.url ?? process.env.LONGHAUL_URL ?? 'http://127.0.0.1:8080';
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  if (cause?.code === 'ECONNREFUSED') return `cannot reach ${url}: is the server running? (set --url or LONGHAUL_URL)`;
  // fetch() reports every network failure as "fetch failed"; the cause says what happened.
  if (err instanceof TypeError && err.message === 'fetch failed') return `cannot reach ${url}: ${cause?.code ?? cause?.message ?? 'network error'}`;
  return err instanceof Error ? err.message : String(err);
}

function print(job: unknown, flags: ClientFlags): void {
  process.stdout.write(flags.json ? `${JSON.stringify(job, null, 2)}\n` : `${describeJob(job as JobSnapshot)}\n`);
}

function describeJob(job: JobSnapshot): string {
  const lines = [renderLine(job)];
  if (job.result !== null && job.result !== undefined) lines.push(`result: ${JSON.stringify(job.result)}`);
  return lines.join('\n');
}

function outcomeLine(end: JobSnapshot): string {
  if (end.status === 'succeeded') return `succeeded${end.result !== null ? `: ${JSON.stringify(end.result)}` : ''}`;
  return `${end.status}${end.error ? `: ${end.error.message}` : ''}`;
}

function parseInput(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new CliError(`--input is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * Follows a job until it ends: a bar redrawn in place on a terminal, one plain line per change
 * otherwise, or with `--json` one compact JSON snapshot per change (NDJSON; the last line is the
 * final snapshot).
 */
async function watch(client: LonghaulClient, job: JobSnapshot, json: boolean): Promise<JobSnapshot> {
  const tty = process.stdout.isTTY === true && !json;
  let last = job;
  let lastLine = '';
  const show = (s: JobSnapshot) => {
    last = s;
    if (json) {
      process.stdout.write(`${JSON.stringify(s)}\n`);
    } else if (tty) {
      // A pseudo-terminal may report 0 columns: fall back to 80.
      process.stdout.write(`\r\x1b[2K${renderBar(s, process.stdout.columns || 80)}`);
    } else {
      const line = renderLine(s);
      if (line !== lastLine) process.stdout.write(`${line}\n`);
      lastLine = line;
    }
  };
  show(job);
  if (!isTerminal(job.status)) for await (const s of client.stream(job.id)) show(s);
  if (tty) process.stdout.write('\n');
  return last;
}

export function registerClientCommands(program: Command): void {
  const common = (cmd: Command) =>
    cmd
      .option('--url <url>', 'server URL (LONGHAUL_URL, default http://127.0.0.1:8080)')
      .option('--api-key <key>', 'API key (LONGHAUL_API_KEY)')
      .option('--json', 'print JSON');

  common(program.command('submit').description('submit a job').argument('<type>', 'task type'))
    .option('--input <json>', 'task input as JSON')
    .option('--priority <p>', 'critical | high | normal | low')
    .option('--delay-ms <ms>', 'run later')
    .option('--idempotency-key <key>', 'Idempotency-Key header')
    .option('--watch', 'follow progress until the job ends; exit 1 if it fails or is cancelled (with --json: one JSON snapshot per line)')
    .action(async (type: string, flags: ClientFlags & { input?: string; priority?: string; delayMs?: string; idempotencyKey?: string; watch?: boolean }) => {
      const client = clientFrom(flags);
      const options: Record<string, unknown> = {};
      if (flags.priority) options.priority = flags.priority;
      if (flags.delayMs !== undefined) {
        const n = Number(flags.delayMs);
        if (!Number.isInteger(n) || n < 0) throw new CliError('--delay-ms must be a non-negative integer');
        options.delayMs = n;
      }
      if (flags.idempotencyKey) options.idempotencyKey = flags.idempotencyKey;
      const job = await client.submit(type, parseInput(flags.input), options).catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
      if (!flags.watch) return print(job, flags);
      const end = await watch(client, job, flags.json === true).catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
      // With --json the last NDJSON line already is the final snapshot.
      if (!flags.json) process.stdout.write(`${outcomeLine(end)}\n`);
      if (end.status !== 'succeeded') process.exitCode = 1;
    });

  common(program.command('status').description("show a job's snapshot").argument('<id>')).action(async (id: string, flags: ClientFlags) => {
    const job = await clientFrom(flags)
      .get(id)
      .catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
    print(job, flags);
  });

  common(program.command('ls').description('list jobs, newest first'))
    .option('--status <s>', 'filter by status (comma-separated)')
    .option('--type <t>', 'filter by task type')
    .option('--limit <n>', 'at most this many', '20')
    .action(async (flags: ClientFlags & { status?: string; type?: string; limit: string }) => {
      const limit = Number(flags.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new CliError('--limit must be an integer from 1 to 1000');
      const page = await clientFrom(flags)
        .list({
          limit,
          ...(flags.status ? { status: flags.status.split(',') as JobSnapshot['status'][] } : {}),
          ...(flags.type ? { type: flags.type } : {}),
        })
        .catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
      if (flags.json) return print(page, flags);
      if (page.items.length === 0) process.stdout.write('no jobs\n');
      for (const j of page.items) process.stdout.write(`${j.id}  ${j.status.padEnd(9)}  ${j.type}  ${j.createdAt}\n`);
    });

  for (const [name, description] of [
    ['cancel', 'cancel a job'],
    ['retry', 'retry a failed or cancelled job'],
  ] as const) {
    common(program.command(name).description(description).argument('<id>')).action(async (id: string, flags: ClientFlags) => {
      const client = clientFrom(flags);
      const job = await (name === 'cancel' ? client.cancel(id) : client.retry(id)).catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
      print(job, flags);
    });
  }
}
