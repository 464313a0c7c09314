/**
 * A Longhaul deployment made of real processes for the scale-out tests: `longhaul server` and
 * `longhaul worker` (the CLI, run from source under tsx) around one PostgreSQL database, with
 * the tasks of test/fixtures/scale-tasks.ts. Children are registered with process-harness.ts,
 * so none outlives the test run.
 */
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkerChild, waitFor } from '../fixtures/process-harness.js';

const ROOT = new URL('../..', import.meta.url).pathname;
export const SCALE_TASKS = 'test/fixtures/scale-tasks.ts';

/** One `longhaul` process with all of its output kept (stdout: banner and pino log lines). */
export class LonghaulProcess {
  stdout = '';
  readonly child: WorkerChild;

  constructor(
    args: string[],
    env: Record<string, string>,
    readonly label: string,
  ) {
    const proc = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
      cwd: ROOT,
      // Every API server of one deployment signs result URLs with one shared secret (required on PostgreSQL).
      env: { ...process.env, LONGHAUL_URL_SIGNING_SECRET: 'test-cluster-url-signing-secret-0123456789', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = new WorkerChild(proc, label);
    proc.stdout?.on('data', (chunk: string) => {
      this.stdout = (this.stdout + chunk).slice(-200_000);
    });
  }

  get pid(): number {
    return this.child.pid;
  }

  /** Waits until stdout matches `pattern`; fails early if the process exits. */
  async waitOutput(pattern: RegExp, what: string, timeoutMs = 60_000): Promise<RegExpMatchArray> {
    return waitFor(
      () => {
        const m = this.stdout.match(pattern);
        if (m) return m;
        if (this.child.exitInfo) throw new Error(`${this.label} exited (${JSON.stringify(this.child.exitInfo)}) before ${what}:\n${this.output()}`);
        return undefined;
      },
      `${this.label}: ${what}`,
      timeoutMs,
      50,
    );
  }

  output(): string {
    return `--- ${this.label} stdout ---\n${this.stdout.slice(-4000)}\n--- ${this.label} stderr ---\n${this.child.stderr.slice(-4000)}`;
  }

  signal(sig: NodeJS.Signals): void {
    this.child.signal(sig);
  }

  /** SIGTERM, then SIGKILL if it has not exited after `graceMs`. */
  async stop(graceMs = 8000): Promise<void> {
    if (this.child.exitInfo) return;
    this.child.signal('SIGCONT');
    this.child.signal('SIGTERM');
    await Promise.race([this.child.exited, sleep(graceMs, undefined, { ref: false }).then(() => this.child.kill())]);
  }
}

export class ServerProcess extends LonghaulProcess {
  url = '';

  static async start(env: Record<string, string>, label: string): Promise<ServerProcess> {
    const s = new ServerProcess(['server', '--port', '0', '--tasks', SCALE_TASKS], env, label);
    const m = await s.waitOutput(/listening on (http:\/\/\S+)/, 'listening');
    s.url = (m[1] as string).replace('localhost', '127.0.0.1');
    return s;
  }
}

export class WorkerProcess extends LonghaulProcess {
  static async start(env: Record<string, string>, label: string, concurrency = 4): Promise<WorkerProcess> {
    const w = new WorkerProcess(['worker', '--tasks', SCALE_TASKS, '--concurrency', String(concurrency), '--drain-ms', '1000'], env, label);
    await w.waitOutput(/longhaul worker running/, 'running');
    return w;
  }
}

/** Runs `longhaul migrate` to its end; resolves with its exit code and output. */
export async function migrate(env: Record<string, string>, label: string): Promise<{ code: number | null; output: string }> {
  const p = new LonghaulProcess(['migrate'], env, label);
  const exit = await Promise.race([p.child.exited, sleep(60_000, undefined, { ref: false }).then(() => null)]);
  if (!exit) {
    await p.child.kill();
    throw new Error(`${label} did not finish within 60 s:\n${p.output()}`);
  }
  return { code: exit.code, output: p.output() };
}

export interface Submitted {
  id: string;
  status: string;
}

/** POST /v1/jobs; throws with the problem body on anything but 202/200. */
export async function submitJob(base: string, type: string, input: unknown, headers: Record<string, string> = {}): Promise<Submitted> {
  const res = await fetch(`${base}/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ type, input }),
    signal: AbortSignal.timeout(15_000),
  });
  const body = (await res.json()) as Submitted & { detail?: string };
  if (res.status !== 202 && res.status !== 200) throw new Error(`POST /v1/jobs answered ${res.status}: ${JSON.stringify(body)}`);
  return body;
}

export async function getJob(base: string, id: string): Promise<Record<string, unknown> & { status: string }> {
  const res = await fetch(`${base}/v1/jobs/${id}`, { signal: AbortSignal.timeout(15_000) });
  if (res.status !== 200) throw new Error(`GET /v1/jobs/${id} answered ${res.status}`);
  return (await res.json()) as Record<string, unknown> & { status: string };
}
