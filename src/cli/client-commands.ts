/** The CLI commands that talk to a running server over HTTP: submit, status, ls, cancel, retry, purge (and, from their own modules, workflows, schedules, dead letters). */
import type { Command } from 'commander';
import { LonghaulApiError, LonghaulClient } from '../client/index.js';
import type { JobSnapshot } from '../core/job.js';
import { idempotencyKeyProblem, MAX_IDEMPOTENCY_KEY } from '../core/limits.js';
import { isTerminal } from '../core/states.js';
import { renderLine } from './progress-bar.js';
import { CliError } from './runtime.js';
import { outcomeLine, watchJob } from './watch.js';
import { registerScheduleCommands } from './schedule-commands.js';
import { registerWorkflowCommands } from './workflow-commands.js';
import { registerDeadLetterCommands } from './dead-letter-commands.js';
import { parseJson } from '../core/json-text.js';

export interface ClientFlags {
  url?: string;
  apiKey?: string;
  json?: boolean;
}

export function clientFrom(flags: ClientFlags): LonghaulClient {
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
    // Refused for now (429 quota, 503 full or busy): say when the server suggests trying again.
    const later = err.retryAfterMs !== null && (err.status === 429 || err.status === 503) ? `; try again in ${Math.ceil(err.retryAfterMs / 1000)} s` : '';
    return `${err.status} ${err.code ?? ''}: ${detail}${extra.length ? ` (${extra.join('; ')})` : ''}${later}`.replace(/\s+:/, ':');
  }
  const url = flags.url ?? process.env.LONGHAUL_URL ?? 'http://127.0.0.1:8080';
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  if (cause?.code === 'ECONNREFUSED') return `cannot reach ${url}: is the server running? (set --url or LONGHAUL_URL)`;
  // fetch() reports every network failure as "fetch failed"; the cause says what happened.
  if (err instanceof TypeError && err.message === 'fetch failed') return `cannot reach ${url}: ${cause?.code ?? cause?.message ?? 'network error'}`;
  return err instanceof Error ? err.message : String(err);
}

export function print(job: unknown, flags: ClientFlags): void {
  process.stdout.write(flags.json ? `${JSON.stringify(job, null, 2)}\n` : `${describeJob(job as JobSnapshot)}\n`);
}

function describeJob(job: JobSnapshot): string {
  const lines = [renderLine(job)];
  if (job.result !== null && job.result !== undefined) lines.push(`result: ${JSON.stringify(job.result)}`);
  return lines.join('\n');
}

/** The `ls` command line of the next page (filters repeated; never the URL or the API key). */
function nextPageCommand(flags: { status?: string; type?: string; parent?: string; tenant?: string; limit: string }, cursor: string): string {
  const quote = (v: string) => (/^[\w.,:/=-]+$/.test(v) ? v : `'${v.replaceAll("'", "'\\''")}'`);
  const args = ['longhaul ls'];
  if (flags.status) args.push(`--status ${quote(flags.status)}`);
  if (flags.type) args.push(`--type ${quote(flags.type)}`);
  if (flags.parent) args.push(`--parent ${quote(flags.parent)}`);
  if (flags.tenant) args.push(`--tenant ${quote(flags.tenant)}`);
  if (flags.limit !== '20') args.push(`--limit ${quote(flags.limit)}`);
  args.push(`--cursor ${quote(cursor)}`);
  return args.join(' ');
}

function parseInput(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return parseJson(text);
  } catch (err) {
    throw new CliError(`--input is not valid JSON: ${(err as Error).message}`);
  }
}

/** The options every client command takes: where the server is, the API key, JSON output. */
export const common = (cmd: Command): Command =>
  cmd
    .option('--url <url>', 'server URL (LONGHAUL_URL, default http://127.0.0.1:8080)')
    .option('--api-key <key>', 'API key (LONGHAUL_API_KEY)')
    .option('--json', 'print JSON');

export function registerClientCommands(program: Command): void {
  /** Follows the job to its end; exit 0 only when it succeeded. */
  const follow = async (client: LonghaulClient, job: JobSnapshot, flags: ClientFlags) => {
    const end = await watchJob(client, job, flags.json === true).catch((err: unknown) => {
      throw new CliError(describeFailure(err, flags));
    });
    // With --json the last NDJSON line already is the final snapshot.
    if (!flags.json) process.stdout.write(`${outcomeLine(end)}\n`);
    if (end.status !== 'succeeded') process.exitCode = 1;
  };

  common(program.command('submit').description('submit a job').argument('<type>', 'task type'))
    .option('--input <json>', 'task input as JSON')
    .option('--priority <p>', 'critical | high | normal | low')
    .option('--delay-ms <ms>', 'run later')
    .option('--idempotency-key <key>', `Idempotency-Key header: 1 to ${MAX_IDEMPOTENCY_KEY} printable ASCII characters; the same key and request again returns the first job`)
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
      if (flags.idempotencyKey !== undefined) {
        const problem = idempotencyKeyProblem(flags.idempotencyKey);
        if (problem) throw new CliError(`--idempotency-key ${problem}`);
        options.idempotencyKey = flags.idempotencyKey;
      }
      const { job, replayed } = await client.submitDetailed(type, parseInput(flags.input), options).catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
      if (replayed)
        process.stderr.write(
          `note: replayed: idempotency key "${flags.idempotencyKey}" was already used for this same request; no new job was created, this is job ${job.id}\n`,
        );
      if (!flags.watch) return print(job, flags);
      await follow(client, job, flags);
    });

  common(program.command('status').description("show a job's snapshot").argument('<id>'))
    .option('--watch', 'follow the job until it ends, like submit --watch; exit 1 if it fails or is cancelled')
    .action(async (id: string, flags: ClientFlags & { watch?: boolean }) => {
      const client = clientFrom(flags);
      const job = await client.get(id).catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
      if (!flags.watch) return print(job, flags);
      await follow(client, job, flags);
    });

  common(program.command('ls').description('list jobs, newest first'))
    .option('--status <s>', 'filter by status (comma-separated)')
    .option('--type <t>', 'filter by task type')
    .option('--parent <id>', "only this job's children (oldest first)")
    .option('--limit <n>', 'at most this many', '20')
    .option('--cursor <c>', 'the next page: the cursor a previous ls printed')
    .option('--tenant <tenant>', "admins only: another tenant's jobs, or * for every tenant's")
    .action(async (flags: ClientFlags & { status?: string; type?: string; parent?: string; tenant?: string; limit: string; cursor?: string }) => {
      const limit = Number(flags.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new CliError('--limit must be an integer from 1 to 1000');
      const page = await clientFrom(flags)
        .list({
          limit,
          ...(flags.status ? { status: flags.status.split(',') as JobSnapshot['status'][] } : {}),
          ...(flags.type ? { type: flags.type } : {}),
          ...(flags.parent ? { parentId: flags.parent } : {}),
          ...(flags.cursor ? { cursor: flags.cursor } : {}),
          ...(flags.tenant ? { tenant: flags.tenant } : {}),
        })
        .catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
      if (flags.json) return print(page, flags);
      if (page.items.length === 0) process.stdout.write(flags.cursor ? 'no more jobs\n' : 'no jobs\n');
      for (const j of page.items) process.stdout.write(`${j.id}  ${j.status.padEnd(9)}  ${j.type}  ${j.createdAt}\n`);
      if (page.nextCursor) process.stderr.write(`more jobs: ${nextPageCommand(flags, page.nextCursor)}\n`);
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
      if (name === 'cancel' && !isTerminal(job.status)) {
        process.stderr.write(
          `note: cancellation requested: the handler was told to stop; the job ends as cancelled when it does (forced after the drain period). longhaul status ${id} --watch follows it\n`,
        );
      }
    });
  }
  common(program.command('purge').description("erase a tenant's or a filter's ended jobs and their files (admin API key)"))
    .option('--tenant <tenant>', "the tenant whose jobs to erase")
    .option('--state <states>', 'ended states, comma-separated (succeeded, expired, failed, cancelled); default all')
    .option('--type <type>', 'only jobs of this task type')
    .option('--before <time>', 'only jobs that ended before this ISO date-time')
    .option('--yes', 'erase without asking (required: the erasure cannot be undone)')
    .action(async (flags: ClientFlags & { tenant?: string; state?: string; type?: string; before?: string; yes?: boolean }) => {
      if (flags.tenant === undefined && flags.type === undefined && flags.before === undefined) {
        throw new CliError('purge needs a filter: --tenant, --type or --before (an unfiltered purge would erase every tenant)');
      }
      if (flags.before !== undefined && !Number.isFinite(Date.parse(flags.before))) throw new CliError(`--before must be an ISO date-time (got "${flags.before}")`);
      if (!flags.yes) throw new CliError('purge erases jobs for good: add --yes to confirm');
      const client = clientFrom(flags);
      const out = await client
        .purge({
          ...(flags.tenant === undefined ? {} : { tenant: flags.tenant }),
          ...(flags.state === undefined ? {} : { state: flags.state }),
          ...(flags.type === undefined ? {} : { type: flags.type }),
          ...(flags.before === undefined ? {} : { before: flags.before }),
        })
        .catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
      if (flags.json) {
        process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
        return;
      }
      const d = out.deleted;
      process.stdout.write(
        `deleted ${d.jobs} jobs, ${d.files} files (${d.resultFiles} file records, ${d.progress} progress rows, ${d.webhooks} webhook targets, ${d.deliveries} delivery log entries, ${d.signals} signals, ${d.attempts ?? 0} attempt records)\n`,
      );
      if (out.skipped > 0) process.stderr.write(`skipped ${out.skipped} jobs that have not ended: cancel them, then purge again\n`);
    });
  registerWorkflowCommands(program);
  registerScheduleCommands(program);
  registerDeadLetterCommands(program);
}
