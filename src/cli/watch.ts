/**
 * Following a job from the CLI (`submit --watch`, `status --watch`) until it ends: a bar redrawn
 * in place on a terminal, one plain line per change otherwise, or with `--json` one compact JSON
 * snapshot per change (NDJSON; the last line is the final snapshot). Whatever happens (the job
 * ends, the stream fails, Ctrl-C) a terminal's bar line is ended before anything else is printed.
 */
import type { LonghaulClient } from '../client/index.js';
import type { JobSnapshot } from '../core/job.js';
import { isTerminal } from '../core/states.js';
import { renderBar, renderLine } from './progress-bar.js';

/** The plain last line of a watch: how the job ended. */
export function outcomeLine(end: JobSnapshot): string {
  if (end.status === 'succeeded') return `succeeded${end.result !== null && end.result !== undefined ? `: ${JSON.stringify(end.result)}` : ''}`;
  // A plain cancel's error says just "cancelled"; a timeout's or a failure's says more.
  return `${end.status}${end.error && end.error.message !== end.status ? `: ${end.error.message}` : ''}`;
}

export async function watchJob(client: LonghaulClient, job: JobSnapshot, json: boolean): Promise<JobSnapshot> {
  const tty = process.stdout.isTTY === true && !json;
  let last = job;
  let lastLine = '';
  let barOpen = false;
  const endBar = () => {
    if (barOpen) process.stdout.write('\n');
    barOpen = false;
  };
  const show = (s: JobSnapshot) => {
    last = s;
    if (json) {
      process.stdout.write(`${JSON.stringify(s)}\n`);
    } else if (tty) {
      // A pseudo-terminal may report 0 columns: fall back to 80.
      process.stdout.write(`\r\x1b[2K${renderBar(s, process.stdout.columns || 80)}`);
      barOpen = true;
    } else {
      const line = renderLine(s);
      if (line !== lastLine) process.stdout.write(`${line}\n`);
      lastLine = line;
    }
  };
  // Ctrl-C leaves the job running; it only stops watching, on a line of its own.
  const onSigint = () => {
    endBar();
    process.stderr.write(`stopped watching; job ${job.id} goes on (longhaul status ${job.id} --watch to follow it again)\n`);
    process.exit(130);
  };
  if (tty) process.once('SIGINT', onSigint);
  try {
    show(job);
    if (!isTerminal(job.status)) for await (const s of client.stream(job.id)) show(s);
  } finally {
    endBar();
    process.off('SIGINT', onSigint);
  }
  return last;
}
