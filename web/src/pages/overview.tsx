/**
 * Overview: what `/v1/stats` says, refreshed every few seconds and soon after feed changes.
 * The per-minute chart is drawn from the samples this page has taken since it opened (the
 * API gives the current rates, not their history).
 */
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api';
import { LineChart } from '../components/line-chart';
import { Queues } from '../components/queues';
import { count, ms } from '../format';
import { useFeed, useThrottled } from '../hooks';
import { href } from '../router';
import { JOB_STATES, type JobStats } from 'longhaul/client';

const POLL_MS = 5_000;
const MAX_SAMPLES = 720;

/** Samples kept across visits of the page (module state: the tab's lifetime). */
const samples: { t: number; submitted: number; finished: number }[] = [];

export function Overview() {
  const [stats, setStats] = useState<JobStats | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [version, setVersion] = useState(0);

  const load = async () => {
    try {
      const s = await api<JobStats>('/v1/stats');
      setStats(s);
      setError(null);
      const t = Date.now() / 1000;
      const last = samples[samples.length - 1];
      if (!last || t - last.t >= 1) {
        samples.push({ t, submitted: s.rates.submittedPerMinute, finished: s.rates.finishedPerMinute });
        if (samples.length > MAX_SAMPLES) samples.shift();
        setVersion((v) => v + 1);
      }
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const refreshSoon = useThrottled(load, 1_000);
  useEffect(() => {
    load();
    const t = setInterval(load, POLL_MS);
    return () => clearInterval(t);
  }, []);
  useFeed((_job, event) => {
    if (event === 'status' || event === 'reconnect') refreshSoon();
  });

  if (!stats) return <section aria-busy="true">{error ? <p role="alert">{error}</p> : <p>Loading…</p>}</section>;
  const c = stats.counts;
  const ended = (c.succeeded ?? 0) + (c.failed ?? 0);
  const failureRate = ended === 0 ? null : (100 * (c.failed ?? 0)) / ended;
  const backlog = (c.pending ?? 0) + (c.queued ?? 0) + (c.retrying ?? 0);
  const maxCount = Math.max(1, ...JOB_STATES.map((s) => c[s] ?? 0));

  return (
    <section aria-labelledby="overview-title">
      <h1 id="overview-title">Overview</h1>
      {error ? <p role="alert">Could not refresh: {error}</p> : null}
      <ul class="tiles" data-testid="tiles">
        <Tile label="Running" value={count(c.running)} to={href('/jobs', { state: 'running' })} />
        <Tile label="Backlog (pending, queued, retrying)" value={count(backlog)} to={href('/jobs', { state: 'pending,queued,retrying' })} />
        <Tile label="Submitted / min" value={count(stats.rates.submittedPerMinute)} />
        <Tile label="Finished / min" value={count(stats.rates.finishedPerMinute)} />
        <Tile label="Failure rate (failed of ended)" value={failureRate === null ? '—' : `${failureRate.toFixed(1)} %`} />
        <Tile label="Dead letters (failed)" value={count(c.failed)} to="#/dead-letters" />
        <Tile label="Stalled now (running, no progress)" value={stats.sweeper ? count(stats.sweeper.stalled) : '—'} testId="tile-stalled" />
        <Tile label="Zombies reaped (last 15 min)" value={stats.sweeper ? count(stats.sweeper.zombiesReaped) : '—'} testId="tile-zombies" />
      </ul>

      <div class="grid-2">
        <LineChart
          title="Submitted vs finished per minute (sampled since this page opened)"
          times={samples.map((s) => s.t)}
          series={[
            { label: 'submitted', color: '#2563eb', values: samples.map((s) => s.submitted) },
            { label: 'finished', color: '#16a34a', values: samples.map((s) => s.finished) },
          ]}
        />
        <figure class="chart">
          <figcaption>Jobs by state</figcaption>
          <table class="bars" data-testid="state-counts">
            <tbody>
              {JOB_STATES.map((s) => (
                <tr key={s}>
                  <th scope="row">
                    <a href={href('/jobs', { state: s })}>{s}</a>
                  </th>
                  <td class="bar-cell">
                    <span class={`bar bar-${s}`} style={{ width: `${(100 * (c[s] ?? 0)) / maxCount}%` }} />
                  </td>
                  <td class="num">{count(c[s])}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </figure>
      </div>

      <Queues refresh={version} />

      <h2>Run time per task type (jobs finished in the last 15 minutes)</h2>
      <table class="data" data-testid="durations">
        <thead>
          <tr>
            <th scope="col">Task type</th>
            <th scope="col" class="num">Finished</th>
            <th scope="col" class="num">p50</th>
            <th scope="col" class="num">p95</th>
            <th scope="col" class="num">p99</th>
          </tr>
        </thead>
        <tbody>
          {Object.entries(stats.durations).length === 0 ? (
            <tr>
              <td colSpan={5} class="muted">
                No job finished in the last 15 minutes.
              </td>
            </tr>
          ) : (
            Object.entries(stats.durations)
              .sort(([a], [b]) => a.localeCompare(b))
              .map(([type, d]) => (
                <tr key={type}>
                  <th scope="row">
                    <a href={href('/jobs', { type })}>{type}</a>
                  </th>
                  <td class="num">{count(d.count)}</td>
                  <td class="num">{ms(d.p50)}</td>
                  <td class="num">{ms(d.p95)}</td>
                  <td class="num">{ms(d.p99)}</td>
                </tr>
              ))
          )}
        </tbody>
      </table>
    </section>
  );
}

function Tile({ label, value, to, testId }: { label: string; value: string; to?: string; testId?: string }) {
  return (
    <li class="tile" data-testid={testId}>
      <span class="tile-value">{value}</span>
      {to ? (
        <a class="tile-label" href={to}>
          {label}
        </a>
      ) : (
        <span class="tile-label">{label}</span>
      )}
    </li>
  );
}
