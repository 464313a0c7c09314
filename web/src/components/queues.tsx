/**
 * Queue depth and wait per task type, from `GET /metrics` (Prometheus text) where the server
 * has it and the key may read it (no keys configured, an admin key): `longhaul_jobs` by state
 * and type (all tenants), and the queue-wait histogram of the serving process since it started.
 * Anywhere else the section says why it is empty; it never asks the user to sign in again.
 */
import { useEffect, useState } from 'preact/hooks';
import { authHeaders } from '../api';
import { count, ms } from '../format';
import { histogramQuantiles, parsePrometheus, sumBy } from '../prometheus';
import { href } from '../router';

interface QueueRow {
  type: string;
  queued: number;
  waitingToRun: number;
  running: number;
  waitP50: number | null;
  waitP95: number | null;
}

type State = { rows: QueueRow[] } | { unavailable: string } | null;

async function readQueues(): Promise<State> {
  const res = await fetch('/metrics', { headers: { accept: 'text/plain', ...authHeaders() }, cache: 'no-store' });
  if (res.status === 404) return { unavailable: 'This server has no /metrics: queue depth and wait per task type are not available.' };
  if (res.status === 401 || res.status === 403) return { unavailable: 'Queue figures cover every tenant: they need an admin API key.' };
  if (!res.ok) return { unavailable: `/metrics answered ${res.status}.` };
  const samples = parsePrometheus(await res.text());
  const jobs = (state: string) => sumBy(samples, 'longhaul_jobs', 'task_type', (l) => l.state === state);
  const queued = jobs('queued');
  const pending = jobs('pending');
  const retrying = jobs('retrying');
  const running = jobs('running');
  const p50 = histogramQuantiles(samples, 'longhaul_job_queue_wait_seconds', 'task_type', 0.5);
  const p95 = histogramQuantiles(samples, 'longhaul_job_queue_wait_seconds', 'task_type', 0.95);
  const types = new Set([...queued.keys(), ...pending.keys(), ...retrying.keys(), ...running.keys(), ...p50.keys()]);
  const rows = [...types]
    .filter((t) => t !== '')
    .sort()
    .map((type) => ({
      type,
      queued: queued.get(type) ?? 0,
      waitingToRun: (pending.get(type) ?? 0) + (retrying.get(type) ?? 0),
      running: running.get(type) ?? 0,
      waitP50: p50.get(type) ?? null,
      waitP95: p95.get(type) ?? null,
    }));
  return { rows };
}

export function Queues({ refresh }: { refresh: number }) {
  const [state, setState] = useState<State>(null);
  useEffect(() => {
    let live = true;
    readQueues().then(
      (s) => live && setState(s),
      (err: Error) => live && setState({ unavailable: err.message }),
    );
    return () => {
      live = false;
    };
  }, [refresh]);
  return (
    <>
      <h2>Queues per task type</h2>
      {state === null ? <p aria-busy="true">Loading…</p> : null}
      {state && 'unavailable' in state ? <p class="muted">{state.unavailable}</p> : null}
      {state && 'rows' in state ? (
        <table class="data" data-testid="queues">
          <caption class="visually-hidden">Queue depth and wait per task type, all tenants</caption>
          <thead>
            <tr>
              <th scope="col">Task type</th>
              <th scope="col" class="num">Queued</th>
              <th scope="col" class="num">Pending or retrying</th>
              <th scope="col" class="num">Running</th>
              <th scope="col" class="num">Wait p50</th>
              <th scope="col" class="num">Wait p95</th>
            </tr>
          </thead>
          <tbody>
            {state.rows.length === 0 ? (
              <tr>
                <td colSpan={6} class="muted">
                  No jobs.
                </td>
              </tr>
            ) : (
              state.rows.map((r) => (
                <tr key={r.type}>
                  <th scope="row">
                    <a href={href('/jobs', { type: r.type, state: 'queued' })}>{r.type}</a>
                  </th>
                  <td class="num">{count(r.queued)}</td>
                  <td class="num">{count(r.waitingToRun)}</td>
                  <td class="num">{count(r.running)}</td>
                  <td class="num">{r.waitP50 === null ? '—' : ms(r.waitP50 * 1000)}</td>
                  <td class="num">{r.waitP95 === null ? '—' : ms(r.waitP95 * 1000)}</td>
                </tr>
              ))
            )}
          </tbody>
        </table>
      ) : null}
      {state && 'rows' in state ? (
        <p class="help">Every tenant's jobs (from /metrics); waits are those of the jobs this server's process claimed since it started.</p>
      ) : null}
    </>
  );
}
