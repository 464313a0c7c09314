/** Starting the built `longhaul` binary as a child process, for end-to-end and CLI tests. */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';

export const BIN = join(process.cwd(), 'dist/cli/main.js');

export interface Dev {
  child: ChildProcess;
  base: string;
}

/** `longhaul dev --port 0 --database <database> [...args]`; resolves once it prints its URL. */
export function startDev(database: string, extraEnv: Record<string, string> = {}, args: string[] = []): Promise<Dev> {
  const child = spawn(process.execPath, [BIN, 'dev', '--port', '0', '--database', database, ...args], {
    env: {
      ...process.env,
      LONGHAUL_LOG_LEVEL: 'silent',
      // A fast reaper so a restarted process takes an orphaned job over quickly.
      LONGHAUL_HEARTBEAT_INTERVAL_MS: '200',
      LONGHAUL_HEARTBEAT_TIMEOUT_MS: '1500',
      LONGHAUL_SWEEP_INTERVAL_MS: '100',
      ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`longhaul dev did not start: ${out}`)), 20_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ child, base: m[1] as string });
      }
    });
    child.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`longhaul dev exited with ${code}: ${out}`));
    });
  });
}

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `longhaul ...args` to completion (stdout is a pipe, not a terminal); an `undefined` in `env` unsets that variable. */
export function runCli(args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 30_000): Promise<CliRun> {
  const merged: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, ...env })) if (v !== undefined) merged[k] = v;
  const child = spawn(process.execPath, [BIN, ...args], { env: merged, stdio: ['ignore', 'pipe', 'pipe'] });
  return collect(child, timeoutMs);
}

export function collect(child: ChildProcess, timeoutMs = 30_000): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`longhaul did not exit within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
