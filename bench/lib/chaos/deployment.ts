/**
 * The chaos run's deployment: `longhaul server` and `longhaul worker` processes (the CLI from
 * source under tsx, test/support/cluster.ts) around one database, with the tasks of
 * test/fixtures/chaos-tasks.ts. PostgreSQL is a private server this run owns
 * (test/support/private-postgres.ts), never the machine's shared one: the run stops it.
 *
 * Each process has a slot; the driver kills what a slot runs (SIGKILL) and starts it again. A
 * start that fails (the process exits before it says it runs, e.g. a worker started while
 * PostgreSQL is down) is tried again after a pause, and counted with its exit and last lines.
 * Every process's log lines at warn and error level are counted by message.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LonghaulProcess, migrate } from '../../../test/support/cluster.js';
import { PrivatePostgres } from '../../../test/support/private-postgres.js';

export const CHAOS_TASKS = 'test/fixtures/chaos-tasks.ts';

export interface Timings {
  heartbeatIntervalMs: number;
  heartbeatTimeoutMs: number;
  sweepIntervalMs: number;
  cancelDrainMs: number;
}

export interface StartFailure {
  slot: string;
  at: number;
  exit: string;
  /** The process's last stderr (or stdout) line. */
  line: string;
}

export interface Kill {
  slot: string;
  pid: number;
  at: number;
  /** When its replacement said it runs (null: never). */
  restartedAt: number | null;
}

type Role = 'server' | 'worker';

export class Slot {
  proc: LonghaulProcess | null = null;
  url = '';
  ready = false;
  restarting: Promise<void> | null = null;

  constructor(
    readonly label: string,
    readonly role: Role,
  ) {}
}

export interface DeploymentOptions {
  store: 'sqlite' | 'pg';
  servers: number;
  workers: number;
  concurrency: number;
  timings: Timings;
  /** SQLite: the database file. */
  sqlitePath?: string;
  ledgerPath: string;
  log: (line: string) => void;
}

function lastLine(text: string): string {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  return (lines.at(-1) ?? '').slice(0, 300);
}

export class Deployment {
  readonly servers: Slot[];
  readonly workers: Slot[];
  readonly kills: Kill[] = [];
  readonly startFailures: StartFailure[] = [];
  /** `level message` → lines, over every process (pino levels 40 warn, 50 error, 60 fatal). */
  readonly logLines = new Map<string, number>();
  readonly env: Record<string, string>;
  private stopping = false;

  private constructor(
    readonly options: DeploymentOptions,
    readonly pg: PrivatePostgres | null,
    databaseUrl: string,
  ) {
    const t = options.timings;
    this.env = {
      LONGHAUL_DATABASE_URL: databaseUrl,
      LONGHAUL_LOG_LEVEL: 'warn',
      LONGHAUL_HEARTBEAT_INTERVAL_MS: String(t.heartbeatIntervalMs),
      LONGHAUL_HEARTBEAT_TIMEOUT_MS: String(t.heartbeatTimeoutMs),
      LONGHAUL_SWEEP_INTERVAL_MS: String(t.sweepIntervalMs),
      LONGHAUL_CANCEL_DRAIN_MS: String(t.cancelDrainMs),
      LONGHAUL_PG_POOL_SIZE: '4',
      LONGHAUL_REDIS_URL: '',
      LH_CHAOS_LEDGER: options.ledgerPath,
    };
    this.servers = Array.from({ length: options.servers }, (_, i) => new Slot(`server-${String.fromCharCode(65 + i)}`, 'server'));
    this.workers = Array.from({ length: options.workers }, (_, i) => new Slot(`worker-${i + 1}`, 'worker'));
  }

  static async start(options: DeploymentOptions): Promise<Deployment> {
    let pg: PrivatePostgres | null = null;
    let url: string;
    if (options.store === 'pg') {
      pg = await PrivatePostgres.start();
      url = await pg.createDatabase('chaos');
    } else {
      if (!options.sqlitePath) throw new Error('sqlitePath is required for the SQLite store');
      url = options.sqlitePath;
    }
    const d = new Deployment(options, pg, url);
    try {
      if (pg) {
        const m = await migrate(d.env, 'migrate');
        if (m.code !== 0) throw new Error(`longhaul migrate failed:\n${m.output}`);
      }
      // The first server creates a SQLite schema before anyone else opens the file.
      await d.startSlot(d.servers[0] as Slot);
      await Promise.all([...d.servers.slice(1), ...d.workers].map((s) => d.startSlot(s)));
    } catch (err) {
      await d.stop();
      throw err;
    }
    return d;
  }

  get databaseUrl(): string {
    return this.env.LONGHAUL_DATABASE_URL as string;
  }

  /** The API servers that answer now. */
  serverUrls(): string[] {
    return this.servers.filter((s) => s.ready).map((s) => s.url);
  }

  private spawn(slot: Slot): LonghaulProcess {
    const args =
      slot.role === 'server'
        ? ['server', '--port', '0', '--tasks', CHAOS_TASKS]
        : ['worker', '--tasks', CHAOS_TASKS, '--concurrency', String(this.options.concurrency), '--drain-ms', '1000'];
    const p = new LonghaulProcess(args, this.env, slot.label);
    let buffer = '';
    p.child.proc.stdout?.on('data', (chunk: string) => {
      buffer += chunk;
      let nl = buffer.indexOf('\n');
      while (nl >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        nl = buffer.indexOf('\n');
        if (!line.startsWith('{')) continue;
        try {
          const entry = JSON.parse(line) as { level?: number; msg?: string };
          if ((entry.level ?? 0) >= 40) {
            const k = `${entry.level} ${entry.msg ?? ''}`;
            this.logLines.set(k, (this.logLines.get(k) ?? 0) + 1);
          }
        } catch {
          // not a log line
        }
      }
    });
    return p;
  }

  /** Starts what `slot` runs, trying again (and counting each failure) until it says it runs. */
  async startSlot(slot: Slot, deadlineMs = 180_000): Promise<void> {
    const deadline = Date.now() + deadlineMs;
    for (let tries = 1; ; tries++) {
      const p = this.spawn(slot);
      slot.proc = p;
      try {
        if (slot.role === 'server') {
          const m = await p.waitOutput(/listening on (http:\/\/\S+)/, 'listening', 60_000);
          slot.url = (m[1] as string).replace('localhost', '127.0.0.1');
        } else {
          await p.waitOutput(/longhaul worker running/, 'running', 60_000);
        }
        slot.ready = true;
        return;
      } catch (err) {
        const exit = p.child.exitInfo;
        if (!exit) await p.child.kill();
        if (this.stopping) return;
        const info = p.child.exitInfo;
        this.startFailures.push({
          slot: slot.label,
          at: Date.now(),
          exit: info ? `code ${info.code} signal ${info.signal}` : 'no start within 60 s',
          line: lastLine(p.child.stderr) || lastLine(p.stdout) || (err as Error).message.slice(0, 300),
        });
        this.options.log(`${slot.label} failed to start (try ${tries}): ${this.startFailures.at(-1)?.exit}: ${this.startFailures.at(-1)?.line}`);
        if (Date.now() > deadline) throw new Error(`${slot.label} did not start within ${deadlineMs} ms (${tries} tries)`);
        await sleep(Math.min(2000, 250 * tries));
      }
    }
  }

  /** kill -9 of what `slot` runs, then its restart (in the background; `slot.restarting` resolves when it runs again). */
  kill(slot: Slot): Kill {
    const proc = slot.proc;
    if (!proc || !slot.ready) throw new Error(`${slot.label} is not running`);
    slot.ready = false;
    const kill: Kill = { slot: slot.label, pid: proc.pid, at: Date.now(), restartedAt: null };
    proc.child.proc.kill('SIGKILL');
    this.kills.push(kill);
    slot.restarting = (async () => {
      await proc.child.exited;
      await this.startSlot(slot);
      kill.restartedAt = slot.ready ? Date.now() : null;
      slot.restarting = null;
    })();
    return kill;
  }

  /** Stops PostgreSQL for `downMs` (every session ends), then starts it again on the same data; resolves once it accepts connections. */
  async pgOutage(downMs: number): Promise<{ stoppedAt: number; startedAt: number }> {
    if (!this.pg) throw new Error('no PostgreSQL to stop');
    const stoppedAt = Date.now();
    await this.pg.restart(downMs);
    return { stoppedAt, startedAt: Date.now() };
  }

  /** Stops every process (SIGKILL: nothing is left to drain), then PostgreSQL. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.servers, ...this.workers].map(async (s) => s.proc?.child.kill()));
    await Promise.all([...this.servers, ...this.workers].map((s) => s.restarting?.catch(() => undefined)));
    await Promise.all([...this.servers, ...this.workers].map(async (s) => s.proc?.child.kill()));
    await this.pg?.destroy();
  }
}
