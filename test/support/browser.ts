/**
 * Browser tests of the dashboard: Debian's Chromium (never a downloaded browser) driven by
 * playwright-core, against an in-process server on a temp SQLite file with demo.sleep and a
 * task that always fails. Pages are watched for errors and CSP violations; screenshots go to
 * .screenshots/ (gitignored), and with LONGHAUL_DOCS_SCREENSHOTS=1 also to docs/img/.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { type Browser, chromium, type Page } from 'playwright-core';
import { FatalError } from '../../src/core/errors.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { DEFAULT_DASHBOARD_DIR } from '../../src/server/dashboard.js';
import { defineTask } from '../../src/task-api/define.js';
import { demoSleep } from '../../src/example-tasks/examples.js';
import { exportShard, shardedExport } from '../../src/example-tasks/sharded-export.js';

export const CHROMIUM = process.env.LONGHAUL_CHROMIUM ?? '/usr/bin/chromium';
const SCREENSHOT_DIR = join(import.meta.dirname, '../../.screenshots');
const DOCS_IMG_DIR = join(import.meta.dirname, '../../docs/img');

export const failingTask = defineTask({
  type: 'demo.fail',
  maxAttempts: 1,
  async run(input) {
    const { code = 'DEMO_FAILURE' } = (input ?? {}) as { code?: string };
    throw new FatalError(`demo.fail failed on purpose (${code})`, { code });
  },
});

/** Why the browser tests cannot run here, or null. */
export function browserMissing(): string | null {
  if (!existsSync(CHROMIUM)) return `no Chromium at ${CHROMIUM} (apt-get install -y chromium; .ci/run installs it)`;
  if (!existsSync(join(DEFAULT_DASHBOARD_DIR, 'index.html'))) return `the dashboard is not built in ${DEFAULT_DASHBOARD_DIR} (npm run build)`;
  return null;
}

export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    timeout: 60_000,
  });
}

export interface DashboardServer {
  lh: Longhaul;
  app: FastifyInstance;
  base: string;
  close(): Promise<void>;
}

export async function startDashboardServer(options: { apiKeys?: string; adminTenants?: string[]; database?: string } = {}): Promise<DashboardServer> {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-web-'));
  const lh = await Longhaul.open({
    database: options.database ?? join(dir, 'web.db'),
    tasks: [demoSleep, failingTask, shardedExport, exportShard],
    logger: pino({ level: 'silent' }),
    sweepIntervalMs: 100,
  });
  await lh.startWorker({ concurrency: 16, pollIntervalMs: 20, cancelPollMs: 50, progressIntervalMs: 50 });
  lh.startSweeper();
  const app = await buildServer({ lh, apiKeys: parseApiKeys(options.apiKeys), adminTenants: options.adminTenants ?? [], keepaliveMs: 1000, logger: false });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    lh,
    app,
    base,
    async close() {
      await app.close();
      await lh.close({ drainMs: 0 });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Routes the dashboard probes for, and the answers that are expected of them: the 404 of a
 * route another branch adds (remove each once it exists), and /metrics, which answers 401 or
 * 403 to a key that is not an admin's (the overview then says why it has no queue figures).
 */
const PROBED: { path: RegExp; statuses: number[] }[] = [
  { path: /^\/metrics$/, statuses: [401, 403, 404] },
  { path: /\/favicon\.ico$/, statuses: [404] },
];

/**
 * Problems a page reported: uncaught errors, console errors (CSP violations are console
 * errors), and answers of 400 or more other than the 404s of probed routes (`allowStatus`:
 * statuses a test expects, e.g. 401 before signing in).
 */
export function watchPage(page: Page, allowStatus: number[] = []): string[] {
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    // The browser logs every failed answer; those are judged below, by URL.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) problems.push(`console: ${msg.text()}`);
  });
  page.on('response', (res) => {
    const status = res.status();
    if (status < 400 || allowStatus.includes(status)) return;
    const path = new URL(res.url()).pathname;
    if (PROBED.some((p) => p.path.test(path) && p.statuses.includes(status))) return;
    problems.push(`${status} ${res.request().method()} ${path}`);
  });
  return problems;
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const file = join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  if (process.env.LONGHAUL_DOCS_SCREENSHOTS === '1') {
    mkdirSync(DOCS_IMG_DIR, { recursive: true });
    copyFileSync(file, join(DOCS_IMG_DIR, `dashboard-${name}.png`));
  }
}
