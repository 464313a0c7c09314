/**
 * The chaos driver: submits the plan through the API servers (HTTP, an Idempotency-Key per job,
 * tried again on the other server until accepted), sends the signals the signal waits expect
 * (HTTP, tried again until accepted), and injects the faults while the work runs:
 * - a `kill -9` of a random running worker every `killEveryMs` (a random time in the range),
 *   restarted at once (a restart that fails is tried again and counted, see deployment.ts);
 * - one API server killed (and restarted) at `serverKillAt` of the submission window;
 * - PostgreSQL stopped for `pgDownMs` at `pgOutageAt` of the submission window.
 * Faults stop once every job was submitted, the one-off faults happened, at least `minKills`
 * kills were made, and the open jobs (not yet terminal) are down to `stopOpenFraction` of the
 * plan (or `maxChaosMs` passed). Then it waits for the drain: no job open.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChaosApi } from './api.js';
import { OPEN_STATES, type SentSignal } from './audit.js';
import type { Deployment, Slot } from './deployment.js';
import type { Plan, PlannedJob } from './plan.js';

export interface FaultOptions {
  killEveryMs: [number, number];
  minKills: number;
  serverKill: boolean;
  /** 0: no outage (always 0 on SQLite). */
  pgDownMs: number;
  /** Fractions of the submission window. */
  serverKillAt: number;
  pgOutageAt: number;
  stopOpenFraction: number;
  maxChaosMs: number;
}

export interface Accepted {
  key: string;
  id: string;
  type: string;
  /** 200: a replay (the first try's answer was lost). */
  status: number;
  tries: number;
}

export interface FaultLog {
  serverKill: { slot: string; at: number; restartedAt: number | null } | null;
  pgOutage: { stoppedAt: number; startedAt: number } | null;
  /** When the faults stopped, and the time of the last one (a kill, the server kill, or PostgreSQL back). */
  stoppedAt: number;
  lastFaultAt: number;
}

const pick = <T>(list: readonly T[], rand: () => number): T => list[Math.floor(rand() * list.length)] as T;

export class Driver {
  readonly accepted: Accepted[] = [];
  readonly signals: SentSignal[] = [];
  private readonly signalSends: Promise<void>[] = [];
  submittedAll = false;
  /** Open jobs as /v1/stats last said (the whole plan until it answers). */
  open: number;
  private statsTotal = 0;

  constructor(
    private readonly api: ChaosApi,
    private readonly deployment: Deployment,
    private readonly plan: Plan,
    private readonly rand: () => number,
    private readonly log: (line: string) => void,
  ) {
    this.open = plan.total;
  }

  /** Submits every planned job, spread evenly over `windowMs`, `width` at a time. */
  async submitAll(windowMs: number, width = 8): Promise<void> {
    const jobs = this.plan.jobs;
    const t0 = Date.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: width }, async () => {
        while (next < jobs.length) {
          const i = next++;
          const due = t0 + (i * windowMs) / jobs.length;
          if (due > Date.now()) await sleep(due - Date.now());
          await this.submit(jobs[i] as PlannedJob);
        }
      }),
    );
    this.submittedAll = true;
  }

  private async submit(job: PlannedJob): Promise<void> {
    const { answer, tries } = await this.api.persist<{ id: string }>(
      'POST',
      '/v1/jobs',
      (a) => {
        if (a.status === 202 || a.status === 200) return true;
        if (a.status === 429 || a.status >= 500) return false;
        throw new Error(`submission ${job.key} refused: ${a.status} ${JSON.stringify(a.body)}`);
      },
      { body: { type: job.type, input: { ...job.input, key: job.key }, ...job.options }, headers: { 'idempotency-key': job.key } },
    );
    this.accepted.push({ key: job.key, id: answer.body.id, type: job.type, status: answer.status, tries });
    for (const s of job.signals ?? []) {
      this.signalSends.push(
        sleep(s.delayMs)
          .then(() => this.signal(answer.body.id, s.name, s.nonce))
          .catch((err: Error) => {
            this.log(`signal ${s.name} to ${answer.body.id} not sent: ${err.message}`);
            this.signals.push({ jobId: answer.body.id, name: s.name, nonce: s.nonce, outcome: 'unsent', tries: 0 });
          }),
      );
    }
  }

  private async signal(jobId: string, name: string, nonce: string): Promise<void> {
    const { answer, tries } = await this.api.persist<{ code?: string }>(
      'POST',
      `/v1/jobs/${jobId}/signals/${name}`,
      (a) => {
        if (a.status === 202 || a.status === 409) return true;
        if (a.status === 404 || a.status === 429 || a.status >= 500) return false;
        throw new Error(`signal ${name} to ${jobId} refused: ${a.status} ${JSON.stringify(a.body)}`);
      },
      { body: { nonce } },
    );
    const outcome = answer.status === 202 ? 'accepted' : tries > 1 ? 'ended-after-retry' : 'refused';
    this.signals.push({ jobId, name, nonce, outcome, tries });
  }

  /** Follows /v1/stats until `stop()` says so: the open count that tells the faults when to stop, and a progress line every 5 s. */
  async monitor(stop: () => boolean, t0: number): Promise<void> {
    let lastLine = 0;
    while (!stop()) {
      try {
        const { status, body } = await this.api.once<{ counts: Record<string, number> }>('GET', '/v1/stats', { timeoutMs: 5000 });
        if (status === 200) {
          const c = body.counts;
          this.open = OPEN_STATES.split(',').reduce((n, s) => n + (c[s] ?? 0), 0);
          this.statsTotal = Object.values(c).reduce((a, b) => a + b, 0);
        }
      } catch {
        // a server down, or the database: next time
      }
      if (Date.now() - lastLine > 5000) {
        lastLine = Date.now();
        this.log(
          `${((Date.now() - t0) / 1000).toFixed(0)} s: ${this.accepted.length}/${this.plan.jobs.length} submitted, ${this.statsTotal} jobs, ${this.open} open, ${this.deployment.kills.length} kills, ${this.deployment.startFailures.length} failed starts`,
        );
      }
      await sleep(250);
    }
  }

  /** Injects the faults until the stop condition (see the header); returns what it did. */
  async faults(options: FaultOptions, windowMs: number, t0: number): Promise<FaultLog> {
    const d = this.deployment;
    const log: FaultLog = { serverKill: null, pgOutage: null, stoppedAt: 0, lastFaultAt: 0 };
    const oneOffs: Promise<void>[] = [];
    if (options.serverKill) {
      oneOffs.push(
        (async () => {
          await sleep(Math.max(0, t0 + options.serverKillAt * windowMs - Date.now()));
          const slot = await this.readySlot(d.servers);
          const kill = d.kill(slot);
          this.log(`killed ${slot.label} (pid ${kill.pid})`);
          log.serverKill = { slot: slot.label, at: kill.at, restartedAt: null };
          await slot.restarting;
          log.serverKill.restartedAt = kill.restartedAt;
          this.log(`${slot.label} back after ${(kill.restartedAt ?? Date.now()) - kill.at} ms`);
        })(),
      );
    }
    if (options.pgDownMs > 0) {
      oneOffs.push(
        (async () => {
          await sleep(Math.max(0, t0 + options.pgOutageAt * windowMs - Date.now()));
          this.log(`stopping PostgreSQL for ${options.pgDownMs} ms`);
          log.pgOutage = await d.pgOutage(options.pgDownMs);
          this.log(`PostgreSQL back after ${log.pgOutage.startedAt - log.pgOutage.stoppedAt} ms`);
        })(),
      );
    }
    let oneOffsDone = false;
    void Promise.all(oneOffs).then(() => {
      oneOffsDone = true;
    });
    const [lo, hi] = options.killEveryMs;
    for (;;) {
      await sleep(lo + this.rand() * (hi - lo));
      const enough = this.submittedAll && oneOffsDone && d.kills.filter((k) => k.slot.startsWith('worker')).length >= options.minKills;
      if (enough && (this.open <= options.stopOpenFraction * this.plan.total || Date.now() - t0 > options.maxChaosMs)) break;
      const ready = d.workers.filter((w) => w.ready);
      if (ready.length === 0) continue;
      const slot = pick(ready, this.rand);
      const kill = d.kill(slot);
      this.log(`killed ${slot.label} (pid ${kill.pid})`);
    }
    await Promise.all(oneOffs);
    log.stoppedAt = Date.now();
    log.lastFaultAt = Math.max(log.serverKill?.at ?? 0, log.pgOutage?.startedAt ?? 0, ...d.kills.map((k) => k.at));
    return log;
  }

  private async readySlot(slots: Slot[]): Promise<Slot> {
    for (;;) {
      const ready = slots.filter((s) => s.ready);
      if (ready.length > 0) return pick(ready, this.rand);
      await sleep(50);
    }
  }

  /** Waits until no job is open (listed by the API) and every signal was sent; the time it happened, or null after `timeoutMs`. */
  async drain(timeoutMs: number): Promise<number | null> {
    const deadline = Date.now() + timeoutMs;
    await Promise.all(this.signalSends);
    while (Date.now() < deadline) {
      try {
        const { status, body } = await this.api.once<{ items: unknown[] }>('GET', `/v1/jobs?status=${OPEN_STATES}&limit=1`, { timeoutMs: 5000 });
        if (status === 200 && body.items.length === 0) return Date.now();
      } catch {
        // try again
      }
      await sleep(100);
    }
    return null;
  }

  /** Every restart still under way has ended (or failed for good). */
  async restartsDone(): Promise<void> {
    await Promise.all([...this.deployment.servers, ...this.deployment.workers].map((s) => s.restarting?.catch(() => undefined)));
  }
}
