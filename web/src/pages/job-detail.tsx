/**
 * One job: live progress (from the feed), Cancel and Retry, its transitions, attempts and
 * their errors, checkpoint, children, webhook deliveries, result and files. Every value that
 * comes from the job (input, metadata, errors, results) is rendered as text.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, isMissingRoute } from '../api';
import { JsonView } from '../components/json-view';
import { ProgressBar, StatusBadge } from '../components/status';
import { bytes, ms, time } from '../format';
import { useAsync, useFeed, useThrottled } from '../hooks';
import { href, withTenant } from '../router';
import { type AttemptPage, isTerminal, type JobAttempt, type JobError, type JobPage, type JobSnapshot as Job, type JobTransition } from 'longhaul/client';
import type { WebhookDelivery } from '../types';

/** A job's change sequence (as the server's SSE ids): the later of its state and progress times. */
function seq(j: Job): number {
  return Math.max(Date.parse(j.updatedAt), j.progress.updatedAt ? Date.parse(j.progress.updatedAt) : 0);
}

/** Keeps the newer of two snapshots: an answer may arrive after the feed sent a later state. */
function newer(prev: Job | null, next: Job): Job {
  return prev && prev.id === next.id && seq(next) < seq(prev) ? prev : next;
}

/** `tenant`: another tenant's job, read by an admin (`tenant=` on every request); null: the caller's own. */
export function JobDetail({ id, tenant }: { id: string; tenant: string | null }) {
  const [job, setJob] = useState<Job | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    const controller = new AbortController();
    setJob(null);
    setError(null);
    api<Job>(withTenant(`/v1/jobs/${encodeURIComponent(id)}`, tenant), { signal: controller.signal }).then(setJob, (err: Error) => {
      if (!controller.signal.aborted) setError(err instanceof ApiError && err.status === 404 ? `No job ${id} (or not yours).` : err.message);
    });
    return () => controller.abort();
  }, [id, tenant]);

  const refreshRelated = useThrottled(() => setTick((t) => t + 1), 500);
  useFeed((snap, event) => {
    if (snap === null) {
      api<Job>(withTenant(`/v1/jobs/${encodeURIComponent(id)}`, tenant)).then((j) => setJob((prev) => newer(prev, j)), () => undefined);
      refreshRelated();
      return;
    }
    if (snap.id === id) {
      setJob((prev) => newer(prev, snap));
      if (event === 'status') refreshRelated();
    } else if (snap.parentId === id && event === 'status') {
      refreshRelated();
    }
  });

  const act = async (action: 'cancel' | 'retry') => {
    setBusy(true);
    setNotice(null);
    try {
      const next = await api<Job>(withTenant(`/v1/jobs/${encodeURIComponent(id)}/${action}`, tenant), { method: 'POST' });
      setJob((prev) => newer(prev, next));
      setNotice(action === 'cancel' ? (next.status === 'cancelled' ? 'Cancelled.' : 'Cancel requested: the worker is stopping the job.') : 'Queued again.');
      refreshRelated();
    } catch (err) {
      setNotice((err as Error).message);
    } finally {
      setBusy(false);
    }
  };

  if (error) return <p role="alert">{error}</p>;
  if (!job) return <p aria-busy="true">Loading job…</p>;
  const terminal = isTerminal(job.status);
  const canRetry = job.status === 'failed' || job.status === 'cancelled';

  return (
    <article aria-labelledby="job-title" data-testid="job-detail" data-status={job.status}>
      <p>
        <a href={href('/jobs', { tenant: tenant ?? undefined })}>← Jobs</a>
      </p>
      <h1 id="job-title">
        {job.type} <span class="mono small">{job.id}</span>
      </h1>
      <div class="job-head">
        <StatusBadge job={job} />
        <div class="actions">
          <button type="button" disabled={busy || terminal || job.cancelRequested} onClick={() => act('cancel')}>
            Cancel job
          </button>
          <button type="button" disabled={busy || !canRetry} onClick={() => act('retry')}>
            Retry job
          </button>
        </div>
      </div>
      <p role="status" aria-live="polite" class="notice">
        {notice}
      </p>

      <h2>Progress</h2>
      <ProgressBar job={job} detailed />

      <h2>Facts</h2>
      <dl class="facts">
        <dt>Priority</dt>
        <dd>{job.priority}</dd>
        <dt>Attempts</dt>
        <dd>
          {job.attempts} of {job.maxAttempts}
        </dd>
        <dt>Created</dt>
        <dd>{time(job.createdAt)}</dd>
        <dt>Run at</dt>
        <dd>{time(job.runAt)}</dd>
        <dt>Started</dt>
        <dd>{time(job.startedAt)}</dd>
        <dt>Finished</dt>
        <dd>{time(job.finishedAt)}</dd>
        <dt>Result kept until</dt>
        <dd>{time(job.expiresAt)}</dd>
        {job.parentId ? (
          <>
            <dt>Parent</dt>
            <dd>
              <a class="mono" href={href(`/jobs/${job.parentId}`, { tenant: tenant ?? undefined })}>
                {job.parentId}
              </a>
            </dd>
          </>
        ) : null}
        {job.waitingFor ? (
          <>
            <dt>Waiting for</dt>
            <dd>
              {job.waitingFor.kind}
              {job.waitingFor.name ? ` ${job.waitingFor.name}` : ''}
            </dd>
          </>
        ) : null}
      </dl>

      {job.error || job.lastError ? (
        <>
          <h2>Error</h2>
          <ErrorBox error={job.error ?? job.lastError ?? null} label={job.error ? 'Why the job is in this state' : 'The latest failed attempt'} />
        </>
      ) : null}

      <Attempts id={id} tenant={tenant} tick={tick} job={job} />
      <Timeline id={id} tenant={tenant} tick={tick} />
      <Checkpoint id={id} tenant={tenant} tick={tick} />
      {job.children ? <Children id={id} tenant={tenant} tick={tick} total={job.children.total} byState={job.children.byState} /> : null}
      <Results job={job} />
      <Webhooks id={id} tenant={tenant} tick={tick} />

      <h2>Input</h2>
      <JsonView value={job.input} label="input" />
      <h2>Metadata</h2>
      <JsonView value={job.metadata} label="metadata" />
    </article>
  );
}

function ErrorBox({ error, stack, label }: { error: JobError | null; stack?: string | null; label: string }) {
  if (!error) return null;
  return (
    <div class="error-box" data-testid="error">
      <p class="muted">{label}</p>
      <p>
        {error.code ? <code>{error.code}</code> : null} {error.message}
      </p>
      {stack ? (
        <details>
          <summary>Stack</summary>
          <pre class="json">{stack}</pre>
        </details>
      ) : null}
    </div>
  );
}

/** The job's identity on the API: its id, and the tenant an admin reads it as (null: the caller's own). */
type JobRef = { id: string; tenant: string | null; tick: number };

function Attempts({ id, tenant, tick, job }: JobRef & { job: Job }) {
  const [cursor, setCursor] = useState<string | null>(null);
  const [earlier, setEarlier] = useState<JobAttempt[]>([]);
  const attempts = useAsync(async (signal) => {
    try {
      return await api<AttemptPage>(withTenant(`/v1/jobs/${encodeURIComponent(id)}/attempts${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`, tenant), { signal });
    } catch (err) {
      if (isMissingRoute(err)) return null;
      throw err;
    }
  }, [id, tenant, tick, cursor]);
  const items = attempts.data ? [...earlier, ...attempts.data.items] : [];
  return (
    <>
      <h2>Attempts</h2>
      {attempts.error ? <p role="alert">{attempts.error.message}</p> : null}
      {attempts.data === null ? (
        <p class="muted">This server does not list attempts; the latest failure is shown under Error.{job.lastError ? '' : ' No attempt has failed.'}</p>
      ) : items.length > 0 ? (
        <ol class="attempts" data-testid="attempts">
          {items.map((a, i) => (
            <li key={`${i}-${a.attempt}`}>
              <strong>Attempt {a.attempt}</strong>: {a.outcome}
              {a.reason ? <span class="muted"> ({a.reason})</span> : null}
              <span class="muted">
                {' '}
                {time(a.startedAt)} → {a.endedAt ? time(a.endedAt) : 'now'}
              </span>
              {a.workerId ? <span class="muted mono"> {a.workerId}</span> : null}
              {a.error ? <ErrorBox error={a.error} stack={a.stack} label="Error" /> : null}
            </li>
          ))}
        </ol>
      ) : attempts.data ? (
        <p class="muted">No attempt yet.</p>
      ) : null}
      {attempts.data?.nextCursor ? (
        <button
          type="button"
          onClick={() => {
            setEarlier(items);
            setCursor(attempts.data?.nextCursor ?? null);
          }}
        >
          More attempts
        </button>
      ) : null}
    </>
  );
}

function Timeline({ id, tenant, tick }: JobRef) {
  const t = useAsync((signal) => api<{ items: JobTransition[] }>(withTenant(`/v1/jobs/${encodeURIComponent(id)}/transitions`, tenant), { signal }), [id, tenant, tick]);
  return (
    <>
      <h2>Transitions</h2>
      {t.error ? <p role="alert">{t.error.message}</p> : null}
      <ol class="timeline" data-testid="timeline">
        {(t.data?.items ?? []).map((e, i) => (
          <li key={`${e.at}-${i}`}>
            <time dateTime={e.at}>{time(e.at)}</time>{' '}
            <span>
              {e.from ?? '∅'} → <strong>{e.to}</strong>
            </span>
            {e.reason ? <span class="muted"> ({e.reason})</span> : null}
            <span class="muted"> attempt {e.attempt}</span>
            {e.workerId ? <span class="muted mono"> {e.workerId}</span> : null}
          </li>
        ))}
      </ol>
    </>
  );
}

function Checkpoint({ id, tenant, tick }: JobRef) {
  const c = useAsync(async (signal) => {
    try {
      const r = await api<{ checkpoint: { version: number; data: unknown; corrupt: boolean } | null }>(withTenant(`/v1/jobs/${encodeURIComponent(id)}/checkpoint`, tenant), {
        signal,
      });
      return { found: true as const, value: r.checkpoint };
    } catch (err) {
      if (isMissingRoute(err)) return { found: false as const, value: null };
      throw err;
    }
  }, [id, tenant, tick]);
  return (
    <>
      <h2>Checkpoint</h2>
      {c.error ? <p role="alert">{c.error.message}</p> : null}
      {c.data && !c.data.found ? <p class="muted">This server does not expose checkpoints.</p> : null}
      {c.data?.found && c.data.value === null ? <p class="muted">none (a job's checkpoint is cleared when it succeeds)</p> : null}
      {c.data?.found && c.data.value ? (
        <>
          <p class="muted">
            version {c.data.value.version}
            {c.data.value.corrupt ? ' (unreadable: the next attempt starts over)' : ''}
          </p>
          <JsonView value={c.data.value.data} label="checkpoint" />
        </>
      ) : null}
    </>
  );
}

function Children({ id, tenant, tick, total, byState }: JobRef & { total: number; byState: Record<string, number> }) {
  const [cursor, setCursor] = useState<string | null>(null);
  const page = useAsync(
    (signal) => api<JobPage>(withTenant(`/v1/jobs?parentId=${encodeURIComponent(id)}&limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, tenant), { signal }),
    [id, tenant, tick, cursor],
  );
  const summary = Object.entries(byState)
    .filter(([, n]) => n > 0)
    .map(([s, n]) => `${n} ${s}`)
    .join(', ');
  return (
    <>
      <h2>Children</h2>
      <p>
        {total} in all{summary ? `: ${summary}` : ''}
      </p>
      <ul class="children" data-testid="children">
        {(page.data?.items ?? []).map((c) => (
          <li key={c.id}>
            <a class="mono" href={href(`/jobs/${c.id}`, { tenant: tenant ?? undefined })}>
              {c.id}
            </a>{' '}
            {c.type} <StatusBadge job={c} />
          </li>
        ))}
      </ul>
      {page.data?.nextCursor ? (
        <button type="button" onClick={() => setCursor(page.data?.nextCursor ?? null)}>
          Next children
        </button>
      ) : null}
    </>
  );
}

function Results({ job }: { job: Job }) {
  const files = job.results ?? [];
  return (
    <>
      <h2>Result</h2>
      <JsonView value={job.result} label="result" />
      {files.length > 0 ? (
        <ul class="files" data-testid="result-files">
          {files.map((f) => (
            <li key={f.name}>
              <a href={f.url} download={f.name} rel="noopener">
                {f.name}
              </a>{' '}
              <span class="muted">
                {f.contentType}, {bytes(f.size)}
              </span>
            </li>
          ))}
        </ul>
      ) : null}
      {job.downloads ? <p class="muted">downloaded {job.downloads} times</p> : null}
    </>
  );
}

function Webhooks({ id, tenant, tick }: JobRef) {
  const w = useAsync((signal) => api<{ items: WebhookDelivery[] }>(withTenant(`/v1/jobs/${encodeURIComponent(id)}/webhooks`, tenant), { signal }), [id, tenant, tick]);
  const items = w.data?.items ?? [];
  return (
    <>
      <h2>Webhook deliveries</h2>
      {w.error ? <p role="alert">{w.error.message}</p> : null}
      {items.length === 0 ? (
        <p class="muted">none</p>
      ) : (
        <table class="data">
          <thead>
            <tr>
              <th scope="col">At</th>
              <th scope="col">Event</th>
              <th scope="col">Attempt</th>
              <th scope="col">Status</th>
              <th scope="col">Took</th>
              <th scope="col">Error</th>
            </tr>
          </thead>
          <tbody>
            {items.map((d) => (
              <tr key={`${d.deliveryId}-${d.attempt}`}>
                <td>{time(d.at)}</td>
                <td>{d.event}</td>
                <td class="num">{d.attempt}</td>
                <td>{d.ok ? `ok ${d.status ?? ''}` : (d.status ?? 'failed')}</td>
                <td class="num">{ms(d.durationMs)}</td>
                <td>{d.error ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
