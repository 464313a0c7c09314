/** The CLI's workflow commands over HTTP: signal (to a job) and submit-batch (jobs from a file, all or none). */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { BatchJob } from '../client/index.js';
import { parseJson } from '../core/json-text.js';
import { idempotencyKeyProblem, MAX_BATCH_JOBS, MAX_IDEMPOTENCY_KEY, signalNameProblem } from '../core/limits.js';
import { type ClientFlags, clientFrom, common, describeFailure, print } from './client-commands.js';
import { CliError } from './runtime.js';

/** The jobs of a batch file: an array of submit bodies, or `{ "jobs": [...] }` (what POST /v1/batches takes). */
export function readBatchFile(path: string): BatchJob[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CliError(`cannot read --file ${path}: ${code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
  }
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (err) {
    throw new CliError(`--file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  const jobs = Array.isArray(value) ? value : value !== null && typeof value === 'object' ? (value as { jobs?: unknown }).jobs : undefined;
  if (!Array.isArray(jobs)) throw new CliError(`--file ${path} must hold an array of jobs ({"type": ..., "input": ...}) or {"jobs": [...]}`);
  if (jobs.length === 0) throw new CliError(`--file ${path} holds no jobs`);
  if (jobs.length > MAX_BATCH_JOBS) throw new CliError(`--file ${path} holds ${jobs.length} jobs; a batch holds at most ${MAX_BATCH_JOBS}: split it`);
  return jobs.map((job, i) => {
    if (job === null || typeof job !== 'object' || Array.isArray(job) || typeof (job as { type?: unknown }).type !== 'string') {
      throw new CliError(`--file ${path}: jobs[${i}] must be an object with a "type" string`);
    }
    // The other fields go to the server as they are: it checks them, and names the job it refuses.
    const { type, input, ...options } = job as { type: string; input?: unknown } & Record<string, unknown>;
    return { type, input, options } as BatchJob;
  });
}

export function registerWorkflowCommands(program: Command): void {
  common(program.command('signal').description('send a signal to a job (wakes it when it waits for that name)').argument('<id>').argument('<name>', 'signal name'))
    .option('--data <json>', 'the payload, as JSON (default null)')
    .action(async (id: string, name: string, flags: ClientFlags & { data?: string }) => {
      const problem = signalNameProblem(name);
      if (problem) throw new CliError(`signal name ${problem}`);
      let payload: unknown = null;
      if (flags.data !== undefined) {
        try {
          payload = parseJson(flags.data);
        } catch (err) {
          throw new CliError(`--data is not valid JSON: ${(err as Error).message}`);
        }
      }
      const outcome = await clientFrom(flags)
        .signal(id, name, payload)
        .catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
      if (flags.json) return print(outcome, flags);
      process.stdout.write(
        outcome.resumed ? `signal "${name}" sent: job ${id} was waiting for it and is queued again\n` : `signal "${name}" sent: kept for job ${id}'s next wait for it\n`,
      );
    });

  common(program.command('submit-batch').description('submit the jobs of a JSON file as one batch: all are created or none'))
    .requiredOption('--file <path>', 'a JSON array of jobs ({"type": ..., "input": ..., "priority": ...}), or {"jobs": [...]}')
    .option('--idempotency-key <key>', `one Idempotency-Key for the batch (1 to ${MAX_IDEMPOTENCY_KEY} printable ASCII characters): the same batch again returns the same jobs`)
    .action(async (flags: ClientFlags & { file: string; idempotencyKey?: string }) => {
      const jobs = readBatchFile(flags.file);
      if (flags.idempotencyKey !== undefined) {
        const problem = idempotencyKeyProblem(flags.idempotencyKey);
        if (problem) throw new CliError(`--idempotency-key ${problem}`);
      }
      const result = await clientFrom(flags)
        .submitBatch(jobs, flags.idempotencyKey === undefined ? {} : { idempotencyKey: flags.idempotencyKey })
        .catch((err: unknown) => {
          throw new CliError(describeFailure(err, flags));
        });
      if (result.replayed) process.stderr.write(`note: replayed: idempotency key "${flags.idempotencyKey}" was already used for this same batch; no new jobs were created\n`);
      if (flags.json) return print({ jobs: result.jobs }, flags);
      for (const j of result.jobs) process.stdout.write(`${j.id}  ${j.status.padEnd(9)}  ${j.type}\n`);
    });
}
