/** Rendering a job's progress for a terminal: one line, redrawn in place. Pure functions. */
import type { JobSnapshot } from '../core/job.js';
import { isTerminal } from '../core/states.js';

export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

/** `[██████░░░░░░]  45%  stage  9/20  ETA 3s` sized to `width` columns. */
export function renderBar(job: JobSnapshot, width = 80): string {
  const p = job.progress;
  const percent = job.status === 'succeeded' ? 100 : (p.percent ?? 0);
  const parts = [`${String(Math.round(percent)).padStart(3)}%`, job.status];
  if (p.stage) parts.push(p.stage);
  if (p.itemsTotal !== null) parts.push(`${p.itemsDone ?? 0}/${p.itemsTotal}`);
  if (p.eta !== null && job.status === 'running') parts.push(`ETA ${formatDuration(p.eta)}`);
  if (job.cancelRequested && !isTerminal(job.status)) parts.push('cancelling');
  const tail = parts.join('  ');
  const barWidth = Math.max(10, Math.min(40, width - tail.length - 4));
  const filled = Math.round((percent / 100) * barWidth);
  return `[${'█'.repeat(filled)}${'░'.repeat(barWidth - filled)}]  ${tail}`.slice(0, Math.max(20, width - 1));
}

/** A plain line for logs and pipes (no cursor movement). */
export function renderLine(job: JobSnapshot): string {
  const p = job.progress;
  const bits = [`${job.id}`, job.status];
  if (p.percent !== null) bits.push(`${p.percent}%`);
  if (p.stage) bits.push(`stage=${p.stage}`);
  if (p.itemsTotal !== null) bits.push(`items=${p.itemsDone ?? 0}/${p.itemsTotal}`);
  if (p.eta !== null && job.status === 'running') bits.push(`eta=${formatDuration(p.eta)}`);
  if (job.cancelRequested && !isTerminal(job.status)) bits.push('cancel-requested');
  if (job.error) bits.push(`error=${JSON.stringify(job.error.message)}`);
  return bits.join(' ');
}
