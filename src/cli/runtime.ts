/** `longhaul dev`, `server` and `worker`: open Longhaul, then serve, work and sweep, until a signal. */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino, { type Logger } from 'pino';
import { LOG_REDACT } from '../core/log-fields.js';
import { MissingPackageError } from '../core/optional-packages.js';
import type { AddressInfo } from 'node:net';
import { DEFAULTS, httpSettingsFromEnv, type HttpSettings, type LogLevel, logLevelFromEnv } from '../config.js';
import { Longhaul } from '../longhaul.js';
import { isLoopbackHost, parseApiKeys } from '../server/auth.js';
import type { FastifyInstance } from 'fastify';
import { buildServer, DEFAULT_STREAM_BUFFER_BYTES } from '../server/app.js';
import { MIN_STREAM_TOKEN_SECRET_LENGTH } from '../server/stream-token.js';
import { DEFAULT_MAX_STREAMS_PER_TENANT, DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET } from '../server/stream-limits.js';
import { buildHealthServer } from '../server/health-server.js';
import { listenWhileWaiting, type WaitingServer } from '../server/waiting-server.js';
import { collectSchedules, collectTasks, type ScheduleDeclaration, type Task } from '../task-api/define.js';
import { exampleTasks } from '../example-tasks/examples.js';
import { describeTasks } from './describe.js';

export interface RuntimeFlags {
  database?: string;
  redisUrl?: string;
  host?: string;
  port?: string;
  tasks?: string;
  concurrency?: string;
  insecureNoAuth?: boolean;
  drainMs?: string;
  /** `worker` only: a port for /healthz, /readyz and /metrics. */
  healthPort?: string;
}

export class CliError extends Error {}

/** A database location fit to print: a URL's password is replaced by `***`. */
export function redactUrl(database: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(database)) return database;
  try {
    const url = new URL(database);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return database.replace(/:\/\/([^:@/]+):[^@/]*@/, '://$1:***@');
  }
}

/** A tasks module's tasks and the schedules it declares (defineSchedule, or a `schedules` export). */
export async function loadTasksModule(file: string): Promise<{ tasks: Task[]; schedules: ScheduleDeclaration[] }> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(resolve(file)).href)) as Record<string, unknown>;
  } catch (err) {
    throw new CliError(`cannot load tasks module ${file}: ${(err as Error).message}`);
  }
  const tasks = collectTasks(mod);
  if (tasks.length === 0) throw new CliError(`${file} exports no tasks (export defineTask(...) values, or a default array/object of them)`);
  return { tasks, schedules: collectSchedules(mod) };
}

/** A setting's value and the name to blame when it is refused: the flag when given, else its variable. */
interface Setting {
  name: string;
  value: string | undefined;
}

export function setting(flag: string, flagValue: string | undefined, variable: string, env: Record<string, string | undefined> = process.env): Setting {
  return flagValue !== undefined ? { name: flag, value: flagValue } : { name: variable, value: env[variable] };
}

export function intSetting({ name, value }: Setting, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined || value.trim() === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new CliError(`${name} must be an integer from ${min} to ${max} (got "${value}")`);
  return n;
}

export function makeLogger(): Logger {
  return pino({ level: logLevel('LONGHAUL_LOG_LEVEL', 'info'), name: 'longhaul', redact: LOG_REDACT });
}

function logLevel(variable: string, fallback: LogLevel): LogLevel {
  try {
    return logLevelFromEnv(variable, fallback);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
}

/** The URL of the address a server actually bound (`0.0.0.0` stays itself; `[::1]` reads `localhost`). */
export function boundUrl(bound: AddressInfo): string {
  const host = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
  return `http://${host === '[::1]' ? 'localhost' : host}:${bound.port}`;
}

/** How this process relays job events to the others, fit to print. */
function describeChannel(lh: Longhaul): string {
  if (lh.channel?.transport === 'redis' && lh.config.redisUrl) return `${redactUrl(lh.config.redisUrl)} (Redis pub/sub, progress kept in Redis)`;
  return 'PostgreSQL LISTEN/NOTIFY';
}

export async function runRuntime(mode: 'dev' | 'server' | 'worker', flags: RuntimeFlags): Promise<void> {
  const env = process.env;
  const logger = makeLogger();
  const httpLogLevel = logLevel('LONGHAUL_HTTP_LOG_LEVEL', 'warn');
  const tasksFile = flags.tasks ?? env.LONGHAUL_TASKS;
  const tasks: Task[] = mode === 'dev' ? [...exampleTasks] : [];
  const loaded = tasksFile ? await loadTasksModule(tasksFile) : null;
  if (loaded) tasks.push(...loaded.tasks.filter((t) => !tasks.some((e) => e.type === t.type)));
  if (mode === 'worker' && tasks.length === 0) throw new CliError('longhaul worker needs --tasks FILE (or LONGHAUL_TASKS)');
  const host = flags.host ?? env.LONGHAUL_HOST ?? '127.0.0.1';
  const port = intSetting(setting('--port', flags.port, 'LONGHAUL_PORT'), 8080, 0, 65535);
  const concurrency = intSetting(setting('--concurrency', flags.concurrency, 'LONGHAUL_CONCURRENCY'), 10, 1, 10_000);
  const drainMs = intSetting({ name: '--drain-ms', value: flags.drainMs }, 10_000, 0);
  const maxBodyBytes = intSetting({ name: 'LONGHAUL_MAX_BODY_BYTES', value: env.LONGHAUL_MAX_BODY_BYTES }, 1 << 20, 1);
  const streamBufferBytes = intSetting({ name: 'LONGHAUL_STREAM_BUFFER_BYTES', value: env.LONGHAUL_STREAM_BUFFER_BYTES }, DEFAULT_STREAM_BUFFER_BYTES, 1024);
  const maxStreamsPerTenant = intSetting({ name: 'LONGHAUL_MAX_STREAMS_PER_TENANT', value: env.LONGHAUL_MAX_STREAMS_PER_TENANT }, DEFAULT_MAX_STREAMS_PER_TENANT, 1);
  const maxSubscriptionsPerSocket = intSetting(
    { name: 'LONGHAUL_MAX_SUBSCRIPTIONS_PER_SOCKET', value: env.LONGHAUL_MAX_SUBSCRIPTIONS_PER_SOCKET },
    DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET,
    1,
  );
  let apiKeys: ReturnType<typeof parseApiKeys>;
  let httpSettings: HttpSettings;
  try {
    apiKeys = parseApiKeys(env.LONGHAUL_API_KEYS);
    httpSettings = httpSettingsFromEnv(env);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  const streamTokenSecret = env.LONGHAUL_STREAM_TOKEN_SECRET;
  if (streamTokenSecret && streamTokenSecret.length < MIN_STREAM_TOKEN_SECRET_LENGTH) {
    throw new CliError(`LONGHAUL_STREAM_TOKEN_SECRET must be at least ${MIN_STREAM_TOKEN_SECRET_LENGTH} characters (a short secret lets anyone forge stream tokens offline)`);
  }
  const serves = mode !== 'worker';
  const healthPortSetting = setting('--health-port', flags.healthPort, 'LONGHAUL_HEALTH_PORT');
  const healthPort = mode === 'worker' && healthPortSetting.value !== undefined && healthPortSetting.value.trim() !== '' ? intSetting(healthPortSetting, 0, 0, 65535) : null;
  // Without LONGHAUL_API_KEYS, a non-loopback address needs keys kept in the database (`longhaul
  // keys create`), which are known once it is open: refused then, before anything listens.
  const needsDatabaseKeys = serves && apiKeys.length === 0 && !isLoopbackHost(host) && !flags.insecureNoAuth;
  const noKeys = () => new CliError(`refusing to listen on ${host} without API keys: set LONGHAUL_API_KEYS or create keys with longhaul keys create, or pass --insecure-no-auth`);
  // How long to wait for a database that does not answer at start (unset: as long as it takes; 0: not at all).
  const waitSetting = { name: 'LONGHAUL_DATABASE_WAIT_MS', value: env.LONGHAUL_DATABASE_WAIT_MS };
  const waitMs = waitSetting.value === undefined || waitSetting.value.trim() === '' ? undefined : intSetting(waitSetting, 0, 0);
  // Meanwhile the HTTP port answers /healthz 200 and /readyz 503 (server/waiting-server.ts).
  const httpPort = serves ? port : healthPort;
  const waiting: { server: Promise<WaitingServer | null> | null } = { server: null };
  const database = flags.database ?? env.LONGHAUL_DATABASE_URL ?? DEFAULTS.database;
  let lh: Longhaul;
  try {
    lh = await Longhaul.open({
      ...(flags.database ? { database: flags.database } : {}),
      ...(flags.redisUrl !== undefined ? { redisUrl: flags.redisUrl } : {}),
      // Checked above, by the name it was given: a flag wins over LONGHAUL_CONCURRENCY, even a bad one.
      concurrency,
      tasks,
      ...(loaded && loaded.schedules.length > 0 ? { schedules: loaded.schedules } : {}),
      logger,
      waitForDatabase:
        waitMs === 0
          ? false
          : {
              ...(waitMs === undefined ? {} : { timeoutMs: waitMs }),
              onWaiting: (err) => {
                if (httpPort === null) return;
                waiting.server = listenWhileWaiting(host, httpPort, err).then(
                  (server) => {
                    logger.info({ url: server.url }, 'until the database answers, /healthz answers 200 and every other path 503');
                    return server;
                  },
                  (listenErr: unknown) => {
                    logger.warn({ err: listenErr }, 'could not listen while waiting for the database');
                    return null;
                  },
                );
              },
            },
    });
  } catch (err) {
    await (await waiting.server)?.close();
    // A feature configured without its optional package: the error says which, and how to install it.
    if (err instanceof MissingPackageError) throw new CliError(err.message);
    // Not a passing outage (or no longer waited for). A driver's error (a refused password, a
    // missing database, a host that does not answer) does not say which database it is about.
    if (typeof (err as { code?: unknown } | null)?.code === 'string') throw new CliError(`cannot open the database ${redactUrl(database)}: ${(err as Error).message}`);
    throw err;
  }
  if (needsDatabaseKeys && !(await lh.apiKeys.inUse().catch(() => false))) {
    await (await waiting.server)?.close();
    await lh.close();
    throw noKeys();
  }
  // The port the placeholder was given (port 0 asks the system for one) is the one the server takes over.
  const placeholder = await waiting.server;
  await placeholder?.close();
  const listenPort = placeholder ? placeholder.port : port;
  let app: FastifyInstance | null = null;
  try {
    if (mode !== 'server') await lh.startWorker({ concurrency, drainMs });
    lh.startSweeper();
    if (serves) {
      app = await buildServer({
        lh,
        apiKeys,
        adminTenants: (env.LONGHAUL_ADMIN_TENANTS ?? '')
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean),
        maxBodyBytes,
        streamBufferBytes,
        maxStreamsPerTenant,
        maxSubscriptionsPerSocket,
        ...(streamTokenSecret ? { streamTokenSecret } : {}),
        ...httpSettings,
        ...(env.LONGHAUL_METRICS_TOKEN ? { metricsToken: env.LONGHAUL_METRICS_TOKEN } : {}),
        logger: logger.child({ component: 'http' }, { level: httpLogLevel }),
      });
      await app.listen({ host, port: listenPort });
      // The address actually bound (Fastify's answer names 127.0.0.1 for 0.0.0.0).
      const base = boundUrl(app.server.address() as AddressInfo);
      if (flags.insecureNoAuth && apiKeys.length === 0) {
        logger.warn(
          { address: base },
          `--insecure-no-auth: serving without API keys on ${base}: anyone who can reach this address reads and changes every job (tenant "default")`,
        );
      }
      process.stdout.write(
        `longhaul ${mode} listening on ${base}\n  dashboard  ${base}/\n  API        ${base}/v1/jobs\n  API docs   ${base}/docs\n  database   ${redactUrl(lh.config.database)}\n  files      ${(await lh.files()).blobs.description}\n` +
          (lh.channel ? `  events     ${describeChannel(lh)}\n` : '') +
          `  tasks      ${describeTasks([...lh.tasks.keys()])}\n` +
          (mode === 'dev'
            ? `  try        curl -si -X POST ${base}/v1/jobs -H 'content-type: application/json' -d '{"type":"demo.sleep","input":{"steps":20}}'\n`
            : ''),
      );
    } else {
      let health = '';
      if (healthPort !== null) {
        app = buildHealthServer({ lh, ...(env.LONGHAUL_METRICS_TOKEN ? { metricsToken: env.LONGHAUL_METRICS_TOKEN } : {}) });
        health = `; health on ${(await app.listen({ host, port: placeholder ? placeholder.port : healthPort })).replace('[::1]', 'localhost')}/healthz`;
      }
      process.stdout.write(
        `longhaul worker running ${[...lh.tasks.keys()].join(', ')} (concurrency ${concurrency}) on ${redactUrl(lh.config.database)}` +
          (lh.channel ? `, events by ${describeChannel(lh)}` : '') +
          health +
          '\n',
      );
    }
  } catch (err) {
    await app?.close();
    await lh.close({ drainMs: 0 });
    throw err;
  }
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(130);
    }
    stopping = true;
    logger.info({ signal, drainMs }, 'shutting down');
    void (async () => {
      try {
        await app?.close();
        await lh.close({ drainMs });
        process.exit(0);
      } catch (err) {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      }
    })();
  };
  // An error nothing handled means this process's state is unknown: log it once, with its
  // stack, and exit non-zero so the supervisor starts a fresh process. Nothing accepted is lost
  // (every job is durable; a running job's lease expires and the sweeper hands it on), while
  // carrying on could leave a half-done write, a stuck worker slot or a leak behind.
  const crash = (kind: string) => (err: unknown) => {
    logger.fatal({ err, kind }, 'unexpected error: exiting so that a supervisor restarts the process');
    process.exit(70);
  };
  process.on('uncaughtException', crash('uncaughtException'));
  process.on('unhandledRejection', crash('unhandledRejection'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}
