/**
 * Jobs: the tenant's jobs, newest first, filtered by state and type (server-side) and by text
 * (a full job id is looked up; other text filters the loaded page by id, type and metadata).
 * Cursor pagination; rows update live from the feed, and new jobs that match appear on the
 * first page. An admin (`GET /v1/whoami`) also gets a tenant filter: another tenant's jobs
 * (`tenant=` on every request, and the feed follows that tenant; see app.tsx); others never see it.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError } from '../api';
import { ProgressBar, StatusBadge } from '../components/status';
import { ago } from '../format';
import { useFeed, useNow } from '../hooks';
import { href, navigate, type Route, withTenant } from '../router';
import { taskTypes } from '../task-types';
import { JOB_STATES, type JobPage, type JobSnapshot as Job } from 'longhaul/client';
import { type Caller, whoami } from '../whoami';

const PAGE_SIZE = 50;
const ID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The server's `q` rule, for jobs arriving by the feed: id or metadata JSON, letters A to Z without case. */
function matchesText(job: Job, text: string): boolean {
  const lower = (v: string) => v.replace(/[A-Z]/g, (c) => c.toLowerCase());
  const t = lower(text);
  return lower(job.id).includes(t) || (job.metadata !== null && lower(JSON.stringify(job.metadata)).includes(t));
}

export function Jobs({ route }: { route: Route }) {
  const state = route.params.get('state') ?? '';
  const type = route.params.get('type') ?? '';
  const q = route.params.get('q') ?? '';
  const cursor = route.params.get('cursor') ?? '';
  // Another tenant's jobs (admins); empty: the caller's own.
  const tenant = route.params.get('tenant') ?? '';
  const [caller, setCaller] = useState<Caller | null>(null);
  const [page, setPage] = useState<(JobPage & { filterKey?: string }) | null>(null);
  const filterKey = `${state}|${type}|${q}|${cursor}|${tenant}`;
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [types, setTypes] = useState<string[]>([]);
  const [reloadTick, setReloadTick] = useState(0);
  const now = useNow(5_000);
  // Cursors of the pages before this one, for "Previous": carried in history state.
  const back = (history.state as { back?: string[] } | null)?.back ?? [];

  // The type suggestions wait for the first page of jobs: on an older server they cost a
  // `/v1/stats` read, which must not delay the table.
  const firstLoaded = page !== null;
  useEffect(() => {
    whoami().then(setCaller, () => undefined);
  }, []);
  useEffect(() => {
    if (!firstLoaded) return;
    taskTypes().then(
      (t) => setTypes(t.types.map((x) => x.type)),
      () => undefined,
    );
  }, [firstLoaded]);

  useEffect(() => {
    const controller = new AbortController();
    setLoading(true);
    // Rows of other filters must not linger (nor take feed updates) while the new page loads.
    setPage((p) => (p && p.filterKey === filterKey ? p : null));
    const load = async (): Promise<JobPage> => {
      if (ID_PATTERN.test(q.trim())) {
        try {
          return { items: [await api<Job>(withTenant(`/v1/jobs/${encodeURIComponent(q.trim())}`, tenant || null), { signal: controller.signal })], nextCursor: null };
        } catch (err) {
          if (err instanceof ApiError && (err.status === 404 || err.status === 410)) return { items: [], nextCursor: null };
          throw err;
        }
      }
      const qs = new URLSearchParams({ limit: String(PAGE_SIZE) });
      if (state) qs.set('status', state);
      if (type) qs.set('type', type);
      if (q.trim()) qs.set('q', q.trim());
      if (cursor) qs.set('cursor', cursor);
      if (tenant) qs.set('tenant', tenant);
      return api<JobPage>(`/v1/jobs?${qs}`, { signal: controller.signal });
    };
    load().then(
      (p) => {
        setPage({ ...p, filterKey });
        setError(null);
        setLoading(false);
      },
      (err: Error) => {
        if (controller.signal.aborted) return;
        setError(err.message);
        setLoading(false);
      },
    );
    return () => controller.abort();
  }, [state, type, q, cursor, tenant, reloadTick]);

  useFeed((job) => {
    if (job === null) return setReloadTick((t) => t + 1);
    setPage((p) => {
      if (!p) return p;
      const i = p.items.findIndex((x) => x.id === job.id);
      if (i >= 0) {
        const items = p.items.slice();
        items[i] = job;
        return { ...p, items };
      }
      // A job this page does not show: on the first page, a new job that matches goes on top.
      if (cursor || ID_PATTERN.test(q.trim())) return p;
      if (state && !state.split(',').includes(job.status)) return p;
      if (type && job.type !== type) return p;
      if (q.trim() && !matchesText(job, q.trim())) return p;
      const newest = p.items[0];
      if (newest && job.createdAt < newest.createdAt) return p;
      return { ...p, items: [job, ...p.items].slice(0, PAGE_SIZE) };
    });
  });

  const setFilter = (next: Record<string, string | undefined>) => {
    navigate('/jobs', { state, type, q, tenant, ...next, cursor: undefined });
  };
  // The filter is offered to admins, and kept visible while a link names a tenant.
  const tenantFilter = caller?.admin === true || tenant !== '';
  const rowTenant = tenant || undefined;

  const shown = page?.items ?? [];

  return (
    <section aria-labelledby="jobs-title">
      <h1 id="jobs-title">Jobs</h1>
      {tenant ? (
        <p class="notice" data-testid="jobs-tenant">
          Tenant <strong>{tenant}</strong>'s jobs.
        </p>
      ) : null}
      <form
        class="filters"
        aria-label="Filter jobs"
        onSubmit={(e) => {
          e.preventDefault();
          const f = new FormData(e.currentTarget);
          setFilter({
            state: String(f.get('state') ?? ''),
            type: String(f.get('type') ?? '').trim(),
            q: String(f.get('q') ?? '').trim(),
            ...(tenantFilter ? { tenant: String(f.get('tenant') ?? '').trim() } : {}),
          });
        }}
      >
        <label>
          State
          <select name="state" value={state} onChange={(e) => setFilter({ state: e.currentTarget.value })}>
            <option value="">any</option>
            {JOB_STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
            <option value="pending,queued,retrying">backlog (pending, queued, retrying)</option>
            <option value="failed,cancelled">failed or cancelled</option>
            {state && !JOB_STATES.includes(state as never) && !['pending,queued,retrying', 'failed,cancelled'].includes(state) ? <option value={state}>{state}</option> : null}
          </select>
        </label>
        <label>
          Task type
          <input name="type" list="task-type-list" defaultValue={type} key={`t-${type}`} autoComplete="off" />
          <datalist id="task-type-list">
            {types.map((t) => (
              <option key={t} value={t} />
            ))}
          </datalist>
        </label>
        {tenantFilter ? (
          <label>
            Tenant
            <input
              name="tenant"
              list="tenant-list"
              defaultValue={tenant}
              key={`tenant-${tenant}`}
              autoComplete="off"
              placeholder={caller ? `${caller.tenant} (yours)` : 'yours'}
              aria-describedby="tenant-help"
            />
            <datalist id="tenant-list">
              {(caller?.tenants ?? []).map((t) => (
                <option key={t} value={t} />
              ))}
            </datalist>
          </label>
        ) : null}
        <label>
          Search
          <input name="q" type="search" defaultValue={q} key={`q-${q}`} placeholder="id or metadata text" aria-describedby="search-help" />
        </label>
        <button type="submit">Apply</button>
        <p id="search-help" class="help">
          Finds jobs whose id or metadata contains the text (letters in any case).
        </p>
        {tenantFilter ? (
          <p id="tenant-help" class="help">
            An admin key sees any tenant's jobs: name the tenant (empty: your own).
          </p>
        ) : null}
      </form>

      {error ? <p role="alert">{error}</p> : null}
      <table class="data jobs" aria-busy={loading} data-testid="jobs-table">
        <caption class="visually-hidden">{tenant ? `Tenant ${tenant}'s jobs, newest first` : 'Jobs, newest first'}</caption>
        <thead>
          <tr>
            <th scope="col">Job</th>
            <th scope="col">Type</th>
            <th scope="col">State</th>
            <th scope="col">Progress</th>
            <th scope="col">Attempts</th>
            <th scope="col">Created</th>
          </tr>
        </thead>
        <tbody>
          {shown.length === 0 && !loading ? (
            <tr>
              <td colSpan={6} class="muted">
                No jobs match.
              </td>
            </tr>
          ) : null}
          {shown.map((j) => (
            <tr key={j.id} data-job-id={j.id}>
              <td>
                <a href={href(`/jobs/${j.id}`, { tenant: rowTenant })} class="mono">
                  {j.id}
                </a>
              </td>
              <td>{j.type}</td>
              <td>
                <StatusBadge job={j} />
              </td>
              <td>
                <ProgressBar job={j} />
              </td>
              <td class="num">
                {j.attempts}/{j.maxAttempts}
              </td>
              <td title={j.createdAt}>{ago(j.createdAt, now)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        <button
          type="button"
          disabled={!cursor}
          onClick={() => {
            const prev = back.slice(0, -1);
            history.pushState({ back: prev }, '', href('/jobs', { state, type, q, tenant: rowTenant, cursor: back[back.length - 1] || undefined }));
            window.dispatchEvent(new HashChangeEvent('hashchange'));
          }}
        >
          Previous page
        </button>
        <button
          type="button"
          disabled={!page?.nextCursor}
          onClick={() => {
            if (!page?.nextCursor) return;
            history.pushState({ back: [...back, cursor] }, '', href('/jobs', { state, type, q, tenant: rowTenant, cursor: page.nextCursor }));
            window.dispatchEvent(new HashChangeEvent('hashchange'));
          }}
        >
          Next page
        </button>
      </nav>
    </section>
  );
}
