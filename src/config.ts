/**
 * Configuration: explicit options win, then `LONGHAUL_*` environment variables, then the
 * defaults pinned in DESIGN §7. Invalid values are refused with a message naming the setting
 * that was given (the option or the variable), and so are settings that contradict each other.
 */
import { parseDuration } from './core/duration.js';
import { parseTenantQuotas, type TenantQuota, tenantQuotasFromEnv } from './core/quotas.js';
import { parseRetention, type RetentionInput, type RetentionPolicy, retentionFromEnv } from './core/retention.js';
import { parseSecretsKey } from './core/secret-box.js';

export interface LonghaulConfig {
  database: string;
  maxQueued: number | undefined;
  heartbeatIntervalMs: number;
  heartbeatTimeoutMs: number;
  stallTimeoutMs: number | null;
  sweepIntervalMs: number;
  cancelDrainMs: number;
  /**
   * Handlers abandoned (they ignored their signal past the drain period after their job ended)
   * and still pending, past which a worker reports itself unhealthy (`/healthz`, `/readyz`).
   */
  maxAbandonedHandlers: number;
  resultTtlMs: number;
  defaultMaxAttempts: number;
  concurrency: number;
  /** PostgreSQL only: connections in each process's query pool (LISTEN and the sweeper lock use one more each). */
  pgPoolSize: number;
  /**
   * `redis://` or `rediss://` URL: job events fan out by Redis pub/sub and progress snapshots are
   * kept in Redis with a TTL. Undefined: PostgreSQL relays events by LISTEN/NOTIFY; SQLite needs none.
   */
  redisUrl: string | undefined;
  /** Prefix of the Redis keys and pub/sub channel (several deployments may share one Redis). */
  redisPrefix: string;
  /**
   * How long ended jobs are kept per end state before the sweeper deletes them (ms; null or
   * absent: forever, the default; 0: on completion). Tasks override it per state (`retention`).
   */
  retention: RetentionPolicy;
  /** Lifetime of idempotency keys from their job's creation; a later submission with the key makes a new job. */
  idempotencyTtlMs: number;
  /**
   * Priority aging: a queued job gains one priority level per this many ms it has waited
   * (core/claim-plan.ts). null: strict priority, where a low job can wait forever.
   */
  priorityAgingMs: number | null;
  /**
   * Per-tenant quotas (`"*"`: every tenant not listed; core/quotas.ts `quotaFor`). `maxQueued`:
   * a submission that would take the tenant's backlog past it is refused (429); `maxRunning`:
   * jobs of the tenant running at once. Empty: no tenant quota.
   */
  tenantQuotas: Record<string, TenantQuota>;
  /**
   * The key webhook secrets are sealed with in the database (AES-256-GCM; core/secret-box.ts):
   * 32 bytes as 64 hex digits or base64. Undefined: SQLite generates one into
   * `<database>.secrets-key` (0600); PostgreSQL needs it set wherever a job has its own secret.
   */
  secretsKey: string | undefined;
  /**
   * The shortest interval between two ticks of a schedule created or changed over the API or
   * `lh.schedules` (ms; 0: any, down to every second). Declared schedules are not checked.
   */
  scheduleMinIntervalMs: number;
  /**
   * How long a server trusts its lookup of a database API key (`longhaul keys create`;
   * facade/api-keys.ts): a key revoked elsewhere is refused by every server within this time.
   * 0 to 60 000 ms; 0 reads the key on every request.
   */
  apiKeyCacheMs: number;
}

/** What callers give: any setting, retention as written (`'7d'`, ms, `'forever'`). */
export type ConfigOptions = Partial<Omit<LonghaulConfig, 'retention'>> & { retention?: RetentionInput };

export const DEFAULTS: LonghaulConfig = {
  database: './longhaul.db',
  maxQueued: undefined,
  heartbeatIntervalMs: 5_000,
  heartbeatTimeoutMs: 30_000,
  stallTimeoutMs: 300_000,
  sweepIntervalMs: 1_000,
  cancelDrainMs: 30_000,
  maxAbandonedHandlers: 10,
  resultTtlMs: 7 * 86_400_000,
  defaultMaxAttempts: 3,
  concurrency: 10,
  pgPoolSize: 10,
  redisUrl: undefined,
  redisPrefix: 'longhaul:',
  retention: {},
  idempotencyTtlMs: 86_400_000,
  priorityAgingMs: 300_000,
  tenantQuotas: {},
  secretsKey: undefined,
  scheduleMinIntervalMs: 60_000,
  apiKeyCacheMs: 5_000,
};

type Env = Record<string, string | undefined>;

function intFromEnv(env: Env, name: string, min: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return n;
}

/** A duration (`24h`, `30m`, ms) from the environment, refused by name when malformed. */
function durationFromEnv(env: Env, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  try {
    return parseDuration(raw);
  } catch {
    throw new Error(`${name} must be a duration such as 24h, 30m or 86400000 (got "${raw}")`);
  }
}

/** An empty value means none; anything else must be a redis:// or rediss:// URL. */
function redisUrl(raw: string | undefined): string | undefined {
  if (raw === undefined || raw.trim() === '') return undefined;
  if (!/^rediss?:\/\//.test(raw.trim())) throw new Error(`LONGHAUL_REDIS_URL (--redis-url) must be a redis:// or rediss:// URL (got "${raw}")`);
  return raw.trim();
}

/** The levels pino knows, plus `silent`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A log level from the environment (`LONGHAUL_LOG_LEVEL`, `LONGHAUL_HTTP_LOG_LEVEL`), refused by name when unknown. */
export function logLevelFromEnv(name: string, fallback: LogLevel, env: Env = process.env): LogLevel {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const level = raw.trim().toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new Error(`${name} must be one of ${LOG_LEVELS.join(', ')} (got "${raw}")`);
  return level as LogLevel;
}

/**
 * A worker writes a running job's heartbeat every interval (checked up to a second late), and
 * the sweeper takes the job away once its heartbeat is older than the timeout: a timeout under
 * twice the interval reaps healthy jobs whenever one heartbeat is a little late.
 * `names` say where each value came from, for the message.
 */
export function checkHeartbeat(intervalMs: number, timeoutMs: number, names = { interval: 'heartbeatIntervalMs', timeout: 'heartbeatTimeoutMs' }): void {
  if (timeoutMs < 2 * intervalMs) {
    throw new Error(
      `${names.timeout} must be at least twice ${names.interval}: ` +
        `${timeoutMs} ms < 2 × ${intervalMs} ms, and a running job whose heartbeat is older than the timeout is taken for crashed`,
    );
  }
}

/** Which setting a value came from, for messages: the option when given, else the variable (set, or left at its default). */
function origin(options: ConfigOptions, key: keyof LonghaulConfig, variable: string, env: Env): string {
  if (options[key] !== undefined) return key;
  return env[variable] !== undefined && env[variable]?.trim() !== '' ? variable : `${variable} (unset: the default)`;
}

export function resolveConfig(options: ConfigOptions, env: Env = process.env): LonghaulConfig {
  const config = readConfig(options, env);
  checkHeartbeat(config.heartbeatIntervalMs, config.heartbeatTimeoutMs, {
    interval: origin(options, 'heartbeatIntervalMs', 'LONGHAUL_HEARTBEAT_INTERVAL_MS', env),
    timeout: origin(options, 'heartbeatTimeoutMs', 'LONGHAUL_HEARTBEAT_TIMEOUT_MS', env),
  });
  return config;
}

function readConfig(options: ConfigOptions, env: Env): LonghaulConfig {
  const stallEnv = intFromEnv(env, 'LONGHAUL_STALL_TIMEOUT_MS', 0);
  return {
    database: options.database ?? env.LONGHAUL_DATABASE_URL ?? DEFAULTS.database,
    maxQueued: options.maxQueued ?? intFromEnv(env, 'LONGHAUL_MAX_QUEUED', 1) ?? DEFAULTS.maxQueued,
    heartbeatIntervalMs: options.heartbeatIntervalMs ?? intFromEnv(env, 'LONGHAUL_HEARTBEAT_INTERVAL_MS', 1) ?? DEFAULTS.heartbeatIntervalMs,
    heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? intFromEnv(env, 'LONGHAUL_HEARTBEAT_TIMEOUT_MS', 1) ?? DEFAULTS.heartbeatTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs !== undefined ? options.stallTimeoutMs : stallEnv !== undefined ? stallEnv || null : DEFAULTS.stallTimeoutMs,
    sweepIntervalMs: options.sweepIntervalMs ?? intFromEnv(env, 'LONGHAUL_SWEEP_INTERVAL_MS', 1) ?? DEFAULTS.sweepIntervalMs,
    cancelDrainMs: options.cancelDrainMs ?? intFromEnv(env, 'LONGHAUL_CANCEL_DRAIN_MS', 0) ?? DEFAULTS.cancelDrainMs,
    maxAbandonedHandlers: options.maxAbandonedHandlers ?? intFromEnv(env, 'LONGHAUL_MAX_ABANDONED_HANDLERS', 0) ?? DEFAULTS.maxAbandonedHandlers,
    resultTtlMs: options.resultTtlMs ?? intFromEnv(env, 'LONGHAUL_RESULT_TTL_MS', 1) ?? DEFAULTS.resultTtlMs,
    defaultMaxAttempts: options.defaultMaxAttempts ?? DEFAULTS.defaultMaxAttempts,
    concurrency: options.concurrency ?? intFromEnv(env, 'LONGHAUL_CONCURRENCY', 1) ?? DEFAULTS.concurrency,
    pgPoolSize: options.pgPoolSize ?? intFromEnv(env, 'LONGHAUL_PG_POOL_SIZE', 1) ?? DEFAULTS.pgPoolSize,
    redisUrl: redisUrl(options.redisUrl !== undefined ? options.redisUrl : env.LONGHAUL_REDIS_URL),
    redisPrefix: options.redisPrefix ?? (env.LONGHAUL_REDIS_PREFIX?.trim() || DEFAULTS.redisPrefix),
    // Options as parsed policies (ms); each state the options leave out comes from the environment.
    retention: { ...retentionFromEnv(env), ...parseRetention(options.retention) },
    idempotencyTtlMs: options.idempotencyTtlMs ?? durationFromEnv(env, 'LONGHAUL_IDEMPOTENCY_TTL') ?? DEFAULTS.idempotencyTtlMs,
    priorityAgingMs: options.priorityAgingMs !== undefined ? checkAging(options.priorityAgingMs) : agingFromEnv(env),
    // The option, when given, replaces the variable as a whole (quotas are one table, not per-state settings).
    tenantQuotas: options.tenantQuotas !== undefined ? parseTenantQuotas(options.tenantQuotas) : tenantQuotasFromEnv(env),
    secretsKey: secretsKey(options.secretsKey, env),
    scheduleMinIntervalMs: scheduleMinInterval(options.scheduleMinIntervalMs, env),
    apiKeyCacheMs: apiKeyCacheMs(options.apiKeyCacheMs, env),
  };
}

/** `apiKeyCacheMs` / LONGHAUL_API_KEY_CACHE_MS: 0 to 60 000 ms (a revocation must reach every server within a minute at most). */
function apiKeyCacheMs(option: number | undefined, env: Env): number {
  const name = option !== undefined ? 'apiKeyCacheMs' : 'LONGHAUL_API_KEY_CACHE_MS';
  const raw = option !== undefined ? option : env.LONGHAUL_API_KEY_CACHE_MS;
  if (raw === undefined || (typeof raw === 'string' && raw.trim() === '')) return DEFAULTS.apiKeyCacheMs;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 60_000) throw new Error(`${name} must be an integer of ms from 0 to 60000 (got "${String(raw)}")`);
  return n;
}

/** `scheduleMinIntervalMs` (ms ≥ 0), else LONGHAUL_SCHEDULE_MIN_INTERVAL (a duration, or 0), else 1 minute. */
function scheduleMinInterval(option: number | undefined, env: Env): number {
  if (option !== undefined) {
    if (!Number.isSafeInteger(option) || option < 0) throw new Error(`scheduleMinIntervalMs must be an integer of ms ≥ 0 (got ${String(option)})`);
    return option;
  }
  return durationFromEnv(env, 'LONGHAUL_SCHEDULE_MIN_INTERVAL') ?? DEFAULTS.scheduleMinIntervalMs;
}

/** The secrets key as given (option, else LONGHAUL_SECRETS_KEY), checked now so that a malformed one is refused at start. */
function secretsKey(option: string | undefined, env: Env): string | undefined {
  if (option !== undefined) {
    parseSecretsKey(option, 'secretsKey');
    return option.trim();
  }
  const raw = env.LONGHAUL_SECRETS_KEY;
  if (raw === undefined || raw.trim() === '') return undefined;
  parseSecretsKey(raw, 'LONGHAUL_SECRETS_KEY');
  return raw.trim();
}

/** `priorityAgingMs`: a positive number of ms, or null (strict priority). */
function checkAging(ms: number | null): number | null {
  if (ms === null) return null;
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1) throw new Error(`priorityAgingMs must be a positive integer of ms, or null for strict priority (got ${String(ms)})`);
  return ms;
}

/** LONGHAUL_PRIORITY_AGING: a duration (`5m`), or `off` for strict priority. */
function agingFromEnv(env: Env): number | null {
  const raw = env.LONGHAUL_PRIORITY_AGING?.trim();
  if (raw === undefined || raw === '') return DEFAULTS.priorityAgingMs;
  if (raw.toLowerCase() === 'off') return null;
  const ms = durationFromEnv(env, 'LONGHAUL_PRIORITY_AGING') as number;
  if (ms < 1) throw new Error(`LONGHAUL_PRIORITY_AGING must be a positive duration such as 5m, or off (got "${raw}")`);
  return ms;
}

/**
 * The HTTP server's limits from the environment (server/http-limits.ts, browser-guard.ts,
 * auth-throttle.ts; docs/security.md): only the variables that are set, each refused by name
 * when invalid. `longhaul dev` and `longhaul server` pass them to buildServer.
 */
export interface HttpSettings {
  httpLimits: {
    requestTimeoutMs?: number;
    keepAliveTimeoutMs?: number;
    maxConnections?: number;
    healthConnections?: number;
    transferMinBytes?: number;
    transferWindowMs?: number;
  };
  allowedHosts?: string[];
  allowedOrigins?: string[];
  /** `false`: LONGHAUL_AUTH_MAX_FAILURES=0, no throttling. */
  authThrottle?: { maxFailures?: number; windowMs?: number } | false;
}

export function httpSettingsFromEnv(env: Env = process.env): HttpSettings {
  const positiveDuration = (name: string): number | undefined => {
    const ms = durationFromEnv(env, name);
    if (ms !== undefined && ms < 1) throw new Error(`${name} must be a positive duration such as 30s (got "${env[name]}")`);
    return ms;
  };
  const list = (name: string): string[] | undefined => {
    const raw = env[name];
    if (raw === undefined || raw.trim() === '') return undefined;
    return raw
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  };
  const limits: HttpSettings['httpLimits'] = {};
  const set = <K extends keyof HttpSettings['httpLimits']>(key: K, value: number | undefined) => {
    if (value !== undefined) limits[key] = value;
  };
  set('requestTimeoutMs', positiveDuration('LONGHAUL_REQUEST_TIMEOUT'));
  set('keepAliveTimeoutMs', positiveDuration('LONGHAUL_KEEP_ALIVE_TIMEOUT'));
  set('maxConnections', intFromEnv(env, 'LONGHAUL_MAX_CONNECTIONS', 1));
  set('healthConnections', intFromEnv(env, 'LONGHAUL_HEALTH_CONNECTIONS', 0));
  set('transferMinBytes', intFromEnv(env, 'LONGHAUL_TRANSFER_MIN_BYTES', 0));
  set('transferWindowMs', positiveDuration('LONGHAUL_TRANSFER_WINDOW'));
  const origins = list('LONGHAUL_ALLOWED_ORIGINS');
  for (const o of origins ?? []) {
    if (o === '*') continue;
    let ok = false;
    try {
      ok = /^https?:$/.test(new URL(o).protocol) && new URL(o).origin === o.replace(/\/$/, '');
    } catch {
      ok = false;
    }
    if (!ok) throw new Error(`LONGHAUL_ALLOWED_ORIGINS entries must be origins such as https://app.example.com, or * (got "${o}")`);
  }
  const hosts = list('LONGHAUL_ALLOWED_HOSTS');
  for (const h of hosts ?? []) {
    if (h !== '*' && !/^\.?[A-Za-z0-9.-]+$/.test(h)) throw new Error(`LONGHAUL_ALLOWED_HOSTS entries must be host names (no port), .domain for its subdomains, or * (got "${h}")`);
  }
  const maxFailures = intFromEnv(env, 'LONGHAUL_AUTH_MAX_FAILURES', 0);
  const windowMs = positiveDuration('LONGHAUL_AUTH_FAILURE_WINDOW');
  const authThrottle =
    maxFailures === 0 ? false : maxFailures === undefined && windowMs === undefined ? undefined : { ...(maxFailures === undefined ? {} : { maxFailures }), ...(windowMs === undefined ? {} : { windowMs }) };
  return {
    httpLimits: limits,
    ...(hosts ? { allowedHosts: hosts } : {}),
    ...(origins ? { allowedOrigins: origins } : {}),
    ...(authThrottle === undefined ? {} : { authThrottle }),
  };
}
