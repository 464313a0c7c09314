/**
 * `longhaul schedules ls|get|create|update|pause|resume|delete|trigger`: schedules over HTTP
 * (docs/schedules.md). Refusals print the server's problem in one line (describeFailure).
 */
import type { Command } from 'commander';
import type { LonghaulClient, ScheduleInput, SchedulePatch, ScheduleView } from '../client/index.js';
import { parseJson } from '../core/json-text.js';
import { type ClientFlags, clientFrom, common, describeFailure, print } from './client-commands.js';
import { CliError } from './runtime.js';

interface SpecFlags extends ClientFlags {
  task?: string;
  cron?: string;
  timezone?: string;
  input?: string;
  catchUp?: string;
  overlap?: boolean;
  paused?: boolean;
}

function describeSchedule(s: ScheduleView): string {
  const state = s.paused ? 'paused' : 'active';
  const lines = [
    `${s.name}  ${state}${s.declared ? ' (declared in the tasks module)' : ''}`,
    `  task      ${s.task}`,
    `  cron      ${s.cron}  (${s.timezone})`,
    `  catch-up  ${s.catchUp}, overlap ${s.overlap ? 'allowed' : 'forbidden'}`,
    `  input     ${JSON.stringify(s.input)}`,
    `  last run  ${s.lastRun ? `${s.lastRun.at}  job ${s.lastRun.jobId}  ${s.lastRun.status ?? 'gone'}` : 'none yet'}`,
    `  next runs ${s.nextRuns.length > 0 ? s.nextRuns.join('\n            ') : 'none (paused)'}`,
  ];
  return lines.join('\n');
}

function show(s: ScheduleView, flags: ClientFlags): void {
  if (flags.json) print(s, flags);
  else process.stdout.write(`${describeSchedule(s)}\n`);
}

/** The fields of create and update the flags give. */
function specOf(flags: SpecFlags): SchedulePatch {
  const spec: SchedulePatch = {};
  if (flags.task !== undefined) spec.task = flags.task;
  if (flags.cron !== undefined) spec.cron = flags.cron;
  if (flags.timezone !== undefined) spec.timezone = flags.timezone;
  if (flags.input !== undefined) {
    try {
      spec.input = parseJson(flags.input);
    } catch (err) {
      throw new CliError(`--input is not valid JSON: ${(err as Error).message}`);
    }
  }
  if (flags.catchUp !== undefined) {
    if (flags.catchUp !== 'skip' && flags.catchUp !== 'runOnce') throw new CliError(`--catch-up must be skip or runOnce (got "${flags.catchUp}")`);
    spec.catchUp = flags.catchUp;
  }
  if (flags.overlap !== undefined) spec.overlap = flags.overlap;
  return spec;
}

/** Runs a client call, turning its failure into one readable line. */
async function run<T>(flags: ClientFlags, fn: (client: LonghaulClient) => Promise<T>): Promise<T> {
  return fn(clientFrom(flags)).catch((err: unknown) => {
    throw new CliError(describeFailure(err, flags));
  });
}

const specOptions = (cmd: Command): Command =>
  cmd
    .option('--task <type>', 'the task type each tick submits')
    .option('--cron <expr>', 'five fields (minute first), or six with seconds first; quote it')
    .option('--timezone <tz>', 'IANA timezone the expression is read in (default UTC)')
    .option('--input <json>', 'the input of every run, as JSON')
    .option('--catch-up <policy>', 'ticks missed while nothing ran: skip (default) or runOnce')
    .option('--no-overlap', 'no new run while the previous one is not terminal');

export function registerScheduleCommands(program: Command): void {
  const schedules = program.command('schedules').description('cron schedules: ls, get, create, update, pause, resume, delete, trigger');

  common(schedules.command('ls').description("list the tenant's schedules")).action(async (flags: ClientFlags) => {
    const items = await run(flags, (c) => c.listSchedules());
    if (flags.json) return print({ items }, flags);
    if (items.length === 0) {
      process.stdout.write('no schedules\n');
      return;
    }
    for (const s of items) {
      process.stdout.write(`${s.name.padEnd(24)} ${(s.paused ? 'paused' : 'active').padEnd(7)} ${s.cron.padEnd(18)} ${s.timezone.padEnd(16)} next ${s.nextRuns[0] ?? '-'}\n`);
    }
  });

  common(schedules.command('get').description('a schedule with its next five runs').argument('<name>')).action(async (name: string, flags: ClientFlags) => {
    show(await run(flags, (c) => c.getSchedule(name)), flags);
  });

  common(specOptions(schedules.command('create').description('create a schedule').argument('<name>')))
    .option('--paused', 'create it paused')
    .action(async (name: string, flags: SpecFlags) => {
      const spec = specOf(flags);
      if (spec.task === undefined || spec.cron === undefined) throw new CliError('schedules create needs --task and --cron');
      const body: ScheduleInput = { name, ...spec, task: spec.task, cron: spec.cron, ...(flags.paused ? { paused: true } : {}) };
      show(await run(flags, (c) => c.createSchedule(body)), flags);
    });

  common(specOptions(schedules.command('update').description('change a schedule (the options given)').argument('<name>'))).action(async (name: string, flags: SpecFlags) => {
    const patch = specOf(flags);
    if (Object.keys(patch).length === 0) throw new CliError('schedules update needs at least one of --task, --cron, --timezone, --input, --catch-up, --no-overlap');
    show(await run(flags, (c) => c.updateSchedule(name, patch)), flags);
  });

  for (const [verb, description] of [
    ['pause', 'pause a schedule (no runs until resumed)'],
    ['resume', 'resume a schedule from its next tick'],
  ] as const) {
    common(schedules.command(verb).description(description).argument('<name>')).action(async (name: string, flags: ClientFlags) => {
      show(await run(flags, (c) => (verb === 'pause' ? c.pauseSchedule(name) : c.resumeSchedule(name))), flags);
    });
  }

  common(schedules.command('delete').description('delete a schedule (its runs are left alone)').argument('<name>')).action(async (name: string, flags: ClientFlags) => {
    await run(flags, (c) => c.deleteSchedule(name));
    if (flags.json) return print({ deleted: name }, flags);
    process.stdout.write(`schedule ${name} deleted\n`);
  });

  common(schedules.command('trigger').description('submit one run now, outside the cron times').argument('<name>')).action(async (name: string, flags: ClientFlags) => {
    const job = await run(flags, (c) => c.triggerSchedule(name));
    print(job, flags);
  });
}
