/**
 * Dead letters: failed jobs grouped by task type and error code (`GET /v1/dead-letters`), each
 * group's jobs (`/v1/dead-letters/jobs`), and replay or discard of one job, a selection or a
 * whole group (`POST /v1/dead-letters/retry|discard` → `{count}`).
 */
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { api, isMissingRoute } from '../api';
import { ago } from '../format';
import { useAsync, useFeed, useThrottled } from '../hooks';
import { href } from '../router';
import type { DeadLetterGroupView as DeadLetterGroup, JobPage } from 'longhaul/client';

type Action = 'retry' | 'discard';
const VERB: Record<Action, string> = { retry: 'Replay', discard: 'Discard' };

type Selection = { type?: string; code?: string | null; ids?: string[] };

async function act(action: Action, selection: Selection): Promise<number> {
  // A group without an error code is named by `code: null` (jobs that failed without one).
  const body: Selection = {};
  if (selection.type !== undefined) body.type = selection.type;
  if (selection.code !== undefined) body.code = selection.code;
  if (selection.ids !== undefined) body.ids = selection.ids;
  return post(action, body);
}

async function post(action: Action, body: Selection): Promise<number> {
  const r = await api<{ count: number }>(`/v1/dead-letters/${action}`, { method: 'POST', body });
  return r.count;
}

function failedAt(v: string | number | null | undefined): string | null {
  if (v === null || v === undefined) return null;
  return typeof v === 'number' ? new Date(v).toISOString() : v;
}

function groupKey(g: DeadLetterGroup): string {
  return `${g.type}\u0000${g.code ?? ''}`;
}

export function DeadLetters() {
  const [tick, setTick] = useState(0);
  const [open, setOpen] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const groups = useAsync(async (signal) => {
    try {
      const r = await api<DeadLetterGroup[] | { items: DeadLetterGroup[] }>('/v1/dead-letters', { signal });
      return Array.isArray(r) ? r : r.items;
    } catch (err) {
      if (isMissingRoute(err)) return null;
      throw err;
    }
  }, [tick]);
  const refresh = useThrottled(() => setTick((t) => t + 1), 1_000);
  useFeed((job, event) => {
    if (job === null || (event === 'status' && (job.status === 'failed' || groups.data?.some((g) => g.type === job.type)))) refresh();
  });

  const run = async (action: Action, what: string, body: Selection) => {
    if (!window.confirm(`${VERB[action]} ${what}?`)) return;
    try {
      const n = await act(action, body);
      setNotice(`${VERB[action] === 'Replay' ? 'Replayed' : 'Discarded'} ${n} job${n === 1 ? '' : 's'}.`);
    } catch (err) {
      setNotice((err as Error).message);
    }
    setTick((t) => t + 1);
  };

  return (
    <section aria-labelledby="dl-title">
      <h1 id="dl-title">Dead letters</h1>
      <p role="status" aria-live="polite" class="notice" data-testid="dl-notice">
        {notice}
      </p>
      {groups.error ? <p role="alert">{groups.error.message}</p> : null}
      {groups.data === null ? (
        <p>
          This server has no dead-letter routes yet. Failed jobs are listed under <a href={href('/jobs', { state: 'failed' })}>Jobs, state failed</a>, where
          each can be retried.
        </p>
      ) : null}
      {groups.data && groups.data.length === 0 ? <p class="muted">No failed jobs.</p> : null}
      {groups.data && groups.data.length > 0 ? (
        <table class="data" data-testid="dl-groups">
          <thead>
            <tr>
              <th scope="col">Task type</th>
              <th scope="col">Error code</th>
              <th scope="col" class="num">Jobs</th>
              <th scope="col">Last failure</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {groups.data.map((g) => {
              const key = groupKey(g);
              const label = `${g.type} / ${g.code ?? 'no code'}`;
              return (
                <Fragment key={key}>
                  <tr data-group={label}>
                    <th scope="row">{g.type}</th>
                    <td>
                      <code>{g.code ?? '—'}</code>
                    </td>
                    <td class="num">{g.count}</td>
                    <td>{ago(failedAt(g.lastFailedAt))}</td>
                    <td class="actions">
                      <button type="button" aria-expanded={open === key} onClick={() => setOpen(open === key ? null : key)}>
                        {open === key ? 'Hide jobs' : 'Show jobs'}
                        <span class="visually-hidden"> of {label}</span>
                      </button>
                      <button type="button" onClick={() => run('retry', `all ${g.count} jobs of ${label}`, { type: g.type, code: g.code })}>
                        Replay group<span class="visually-hidden"> {label}</span>
                      </button>
                      <button type="button" class="danger" onClick={() => run('discard', `all ${g.count} jobs of ${label}`, { type: g.type, code: g.code })}>
                        Discard group<span class="visually-hidden"> {label}</span>
                      </button>
                    </td>
                  </tr>
                  {open === key ? (
                    <tr>
                      <td colSpan={5}>
                        <GroupJobs group={g} tick={tick} run={run} />
                      </td>
                    </tr>
                  ) : null}
                </Fragment>
              );
            })}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}

function GroupJobs({
  group,
  tick,
  run,
}: {
  group: DeadLetterGroup;
  tick: number;
  run: (action: Action, what: string, body: Selection) => Promise<void>;
}) {
  const [cursor, setCursor] = useState<string | null>(null);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const page = useAsync(
    (signal) => {
      const qs = new URLSearchParams({ type: group.type });
      if (group.code === null) qs.set('noCode', 'true');
      else qs.set('code', group.code);
      if (cursor) qs.set('cursor', cursor);
      return api<JobPage>(`/v1/dead-letters/jobs?${qs}`, { signal });
    },
    [group.type, group.code, cursor, tick],
  );
  const items = page.data?.items ?? [];
  const toggle = (id: string) =>
    setSelected((s) => {
      const n = new Set(s);
      if (n.has(id)) n.delete(id);
      else n.add(id);
      return n;
    });
  const ids = [...selected];
  return (
    <div class="group-jobs">
      {page.error ? <p role="alert">{page.error.message}</p> : null}
      <div class="actions">
        <button type="button" disabled={ids.length === 0} onClick={() => run('retry', `${ids.length} selected jobs`, { ids }).then(() => setSelected(new Set()))}>
          Replay selected ({ids.length})
        </button>
        <button type="button" class="danger" disabled={ids.length === 0} onClick={() => run('discard', `${ids.length} selected jobs`, { ids }).then(() => setSelected(new Set()))}>
          Discard selected ({ids.length})
        </button>
      </div>
      <table class="data">
        <thead>
          <tr>
            <th scope="col">Select</th>
            <th scope="col">Job</th>
            <th scope="col">Error</th>
            <th scope="col">Failed</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          {items.map((j) => (
            <tr key={j.id}>
              <td>
                <input type="checkbox" checked={selected.has(j.id)} onChange={() => toggle(j.id)} aria-label={`select job ${j.id}`} />
              </td>
              <td>
                <a class="mono" href={href(`/jobs/${j.id}`)}>
                  {j.id}
                </a>
              </td>
              <td>{j.error?.message ?? j.lastError?.message ?? ''}</td>
              <td>{ago(j.finishedAt)}</td>
              <td class="actions">
                <button type="button" onClick={() => run('retry', `job ${j.id}`, { ids: [j.id] })}>
                  Replay<span class="visually-hidden"> job {j.id}</span>
                </button>
                <button type="button" class="danger" onClick={() => run('discard', `job ${j.id}`, { ids: [j.id] })}>
                  Discard<span class="visually-hidden"> job {j.id}</span>
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {page.data?.nextCursor ? (
        <button type="button" onClick={() => setCursor(page.data?.nextCursor ?? null)}>
          More jobs
        </button>
      ) : null}
    </div>
  );
}
