/** A job's status as a labelled badge, and its progress as an accessible progress bar. */
import { ms } from '../format';
import type { JobSnapshot as Job } from 'longhaul/client';

export function StatusBadge({ job }: { job: Pick<Job, 'status' | 'cancelRequested' | 'stalled'> }) {
  return (
    <span class="status-cell">
      <span class={`badge badge-${job.status}`}>{job.status}</span>
      {job.cancelRequested && job.status === 'running' ? <span class="badge badge-flag">cancel requested</span> : null}
      {job.stalled ? <span class="badge badge-flag">stalled</span> : null}
    </span>
  );
}

export function percentOf(job: Pick<Job, 'progress' | 'status'>): number | null {
  if (job.status === 'succeeded') return 100;
  const p = job.progress;
  if (typeof p.percent === 'number') return Math.max(0, Math.min(100, p.percent));
  if (p.itemsTotal && p.itemsDone !== null) return Math.max(0, Math.min(100, (100 * p.itemsDone) / p.itemsTotal));
  return null;
}

export function ProgressBar({ job, detailed = false }: { job: Pick<Job, 'progress' | 'status' | 'id'>; detailed?: boolean }) {
  const pct = percentOf(job);
  const p = job.progress;
  const label = pct === null ? 'no progress reported' : `${Math.round(pct)} %`;
  return (
    <div class={detailed ? 'progress detailed' : 'progress'}>
      <div
        class="progress-track"
        role="progressbar"
        aria-label={`progress of job ${job.id}`}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={pct === null ? undefined : Math.round(pct)}
        aria-valuetext={label}
        data-testid="progress"
      >
        <div class="progress-fill" style={{ width: `${pct ?? 0}%` }} />
      </div>
      <span class="progress-label">{label}</span>
      {detailed ? (
        <dl class="progress-facts">
          <dt>Stage</dt>
          <dd data-testid="stage">{p.stage ?? '—'}</dd>
          <dt>Items</dt>
          <dd>{p.itemsTotal !== null ? `${p.itemsDone ?? 0} of ${p.itemsTotal}` : (p.itemsDone ?? '—')}</dd>
          <dt>ETA</dt>
          <dd>{p.eta === null ? '—' : ms(p.eta)}</dd>
          <dt>Message</dt>
          <dd>{p.message ?? '—'}</dd>
        </dl>
      ) : null}
    </div>
  );
}
