/**
 * The CLI's dead-letter commands over HTTP: `attempts <id>` (a job's attempt history) and
 * `dead-letters list|jobs|retry|discard` (failed jobs by group; bulk replay and discard by filter).
 */
import type { Command } from 'commander';
import type { DeadLetterFilter, JobAttempt } from '../client/index.js';
import { parseDuration } from '../core/duration.js';
import { type ClientFlags, clientFrom, common, describeFailure } from './client-commands.js';
import { CliError } from './runtime.js';

interface FilterFlags extends ClientFlags {
  type?: string;
  /** false: --no-code, the jobs that failed without an error code. */
  code?: string | false;
  since?: string;
  until?: string;
  tenant?: string;
}

/**
 * A time flag: an ISO 8601 date-time, or a duration (`30m`, `2h`, `7d`) meaning that long ago.
 * The server reads ISO times; a duration is turned into one here.
 */
export function parseTimeFlag(name: string, text: string, now = Date.now()): string {
  if (/^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)\s*$/.test(text)) return new Date(now - parseDuration(text)).toISOString();
  const ms = Date.parse(text);
  if (!Number.isFinite(ms)) throw new CliError(`--${name} must be an ISO date-time (2026-05-01T12:00:00Z) or a duration ago (30m, 2h, 7d); got "${text}"`);
  return new Date(ms).toISOString();
}

function filterOf(flags: FilterFlags): DeadLetterFilter {
  const filter: DeadLetterFilter = {};
  if (flags.type !== undefined) filter.type = flags.type;
  if (flags.code === false) filter.code = null;
  else if (flags.code !== undefined) filter.code = flags.code;
  if (flags.tenant !== undefined) filter.tenant = flags.tenant;
  if (flags.since !== undefined) filter.failedAfter = parseTimeFlag('since', flags.since);
  if (flags.until !== undefined) filter.failedBefore = parseTimeFlag('until', flags.until);
  return filter;
}

const filterOptions = (cmd: Command): Command =>
  cmd
    .option('--type <type>', 'only jobs of this task type')
    .option('--code <code>', 'only jobs whose error has this code')
    .option('--no-code', 'only jobs that failed without an error code (the group listed as "(no code)")')
    .option('--since <time>', 'only jobs that failed at or after this time (ISO date-time, or a duration ago: 2h, 7d)')
    .option('--until <time>', 'only jobs that failed before this time (same forms)')
    .option('--tenant <tenant>', "admins only: another tenant's jobs, or * for every tenant's");

function limitOf(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d{1,4}$/.test(text) || Number(text) < 1 || Number(text) > 1000) throw new CliError(`--limit must be a number from 1 to 1000 (got "${text}")`);
  return Number(text);
}

function attemptLine(a: JobAttempt, stack: boolean): string {
  const when = a.endedAt === null ? `${a.startedAt ?? '?'} → (running)` : `${a.startedAt ?? '?'} → ${a.endedAt}`;
  const head = `#${a.attempt}  ${a.outcome.padEnd(9)}  ${when}  worker ${a.workerId ?? '-'}`;
  const why = a.error ? `  ${a.error.code}: ${a.error.message}` : a.reason && a.outcome !== 'succeeded' ? `  (${a.reason})` : '';
  const lines = [`${head}${why}`];
  if (stack && a.stack) lines.push(...a.stack.split('\n').map((l) => `    ${l}`));
  return lines.join('\n');
}

/** What a filter selects, in words, for the confirmation message. */
function describeFilter(filter: DeadLetterFilter, ids: string[] | undefined): string {
  const parts: string[] = [];
  if (filter.type) parts.push(`type ${filter.type}`);
  if (filter.code === null) parts.push('no error code');
  else if (filter.code) parts.push(`code ${filter.code}`);
  if (filter.failedAfter) parts.push(`failed since ${String(filter.failedAfter)}`);
  if (filter.failedBefore) parts.push(`failed before ${String(filter.failedBefore)}`);
  if (ids) parts.push(`${ids.length} id(s)`);
  if (filter.tenant) parts.push(filter.tenant === '*' ? 'every tenant' : `tenant ${filter.tenant}`);
  return parts.length === 0 ? 'every failed job' : `failed jobs with ${parts.join(', ')}`;
}

export function registerDeadLetterCommands(program: Command): void {
  common(program.command('attempts').description("a job's attempts: each one's outcome, error, worker and times").argument('<id>'))
    .option('--stack', 'print the stack of each failed attempt')
    .option('--limit <n>', 'attempts per page (1 to 1000)', '100')
    .option('--cursor <cursor>', 'the next page (from the previous output)')
    .action(async (id: string, flags: ClientFlags & { stack?: boolean; limit: string; cursor?: string }) => {
      const client = clientFrom(flags);
      const limit = limitOf(flags.limit);
      const page = await client.attempts(id, { ...(limit === undefined ? {} : { limit }), ...(flags.cursor ? { cursor: flags.cursor } : {}) }).catch((err: unknown) => {
        throw new CliError(describeFailure(err, flags));
      });
      if (flags.json) {
        process.stdout.write(`${JSON.stringify(page, null, 2)}\n`);
        return;
      }
      if (page.items.length === 0) process.stdout.write('no attempts yet\n');
      for (const a of page.items) process.stdout.write(`${attemptLine(a, flags.stack === true)}\n`);
      if (page.nextCursor) process.stderr.write(`more attempts: longhaul attempts ${id} --cursor ${page.nextCursor}\n`);
    });

  const dl = program.command('dead-letters').description('failed jobs: list them by group, replay (retry) or discard them in bulk');

  filterOptions(common(dl.command('list').description('failed jobs grouped by task type and error code, newest failure first'))).action(async (flags: FilterFlags) => {
    const client = clientFrom(flags);
    const groups = await client.deadLetters(filterOf(flags)).catch((err: unknown) => {
      throw new CliError(describeFailure(err, flags));
    });
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(groups, null, 2)}\n`);
      return;
    }
    if (groups.length === 0) {
      process.stdout.write('no failed jobs\n');
      return;
    }
    const width = Math.max(5, ...groups.map((g) => String(g.count).length));
    process.stdout.write(`${'count'.padStart(width)}  last failure              ${flags.tenant === '*' ? 'tenant  ' : ''}type  code\n`);
    for (const g of groups) {
      process.stdout.write(`${String(g.count).padStart(width)}  ${g.lastFailedAt}  ${g.tenant !== undefined ? `${g.tenant}  ` : ''}${g.type}  ${g.code ?? '(no code)'}\n`);
    }
  });

  filterOptions(common(dl.command('jobs').description('the failed jobs of a filter (a group: --type and --code, or --no-code), newest failure first')))
    .option('--limit <n>', 'jobs per page (1 to 1000)', '50')
    .option('--cursor <cursor>', 'the next page (from the previous output)')
    .action(async (flags: FilterFlags & { limit: string; cursor?: string }) => {
      const client = clientFrom(flags);
      const limit = limitOf(flags.limit);
      const page = await client
        .deadLetterJobs({ ...filterOf(flags), ...(limit === undefined ? {} : { limit }), ...(flags.cursor ? { cursor: flags.cursor } : {}) })
        .catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
      if (flags.json) {
        process.stdout.write(`${JSON.stringify(page, null, 2)}\n`);
        return;
      }
      if (page.items.length === 0) process.stdout.write(flags.cursor ? 'no more failed jobs\n' : 'no failed jobs\n');
      for (const j of page.items) process.stdout.write(`${j.id}  ${j.finishedAt}  ${j.type}  ${j.error?.code ?? '-'}: ${j.error?.message ?? ''}\n`);
      if (page.nextCursor) process.stderr.write(`more failed jobs: add --cursor ${page.nextCursor}\n`);
    });

  for (const [name, verb, description] of [
    ['retry', 'replayed', 'replay failed jobs: each is retried with a fresh attempt budget (as `longhaul retry`)'],
    ['discard', 'discarded', 'delete failed jobs with their rows and files, for good'],
  ] as const) {
    filterOptions(common(dl.command(name).description(description)))
      .option('--ids <ids>', 'only these jobs (comma-separated ids)')
      .option('--yes', `${name === 'retry' ? 'replay' : 'discard'} without asking (required: it acts on every matching job)`)
      .action(async (flags: FilterFlags & { ids?: string; yes?: boolean }) => {
        const filter = filterOf(flags);
        const ids = flags.ids
          ?.split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        if (ids !== undefined && ids.length === 0) throw new CliError('--ids names no job');
        if (!flags.yes) {
          throw new CliError(`this ${name === 'retry' ? 'replays' : 'deletes for good'} ${describeFilter(filter, ids)}: add --yes to confirm`);
        }
        const client = clientFrom(flags);
        const request = { ...filter, ...(ids === undefined ? {} : { ids }) };
        const out = await (name === 'retry' ? client.retryDeadLetters(request) : client.discardDeadLetters(request)).catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
        if (flags.json) {
          process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
          return;
        }
        process.stdout.write(`${verb} ${out.count} failed job${out.count === 1 ? '' : 's'}\n`);
      });
  }
}
