/**
 * Configuration: explicit options win, then `LONGHAUL_*` environment variables, then the
 * defaults pinned in DESIGN §7. Invalid values are refused with a message naming the variable.
 */

export interface LonghaulConfig {
  database: string;
  maxQueued: number | undefined;
  heartbeatIntervalMs: number;
  heartbeatTimeoutMs: number;
  stallTimeoutMs: number | null;
  sweepIntervalMs: number;
  cancelDrainMs: number;
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
}

export const DEFAULTS: LonghaulConfig = {
  database: './longhaul.db',
  maxQueued: undefined,
  heartbeatIntervalMs: 5_000,
  heartbeatTimeoutMs: 30_000,
  stallTimeoutMs: 300_000,
  sweepIntervalMs: 1_000,
  cancelDrainMs: 30_000,
  resultTtlMs: 7 * 86_400_000,
  defaultMaxAttempts: 3,
  concurrency: 10,
  pgPoolSize: 10,
  redisUrl: undefined,
  redisPrefix: 'longhaul:',
};

type Env = Record<string, string | undefined>;

function intFromEnv(env: Env, name: string, min: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return n;
}

/** An empty value means none; anything else must be a redis:// or rediss:// URL. */
function redisUrl(raw: string | undefined): string | undefined {
  if (raw === undefined || raw.trim() === '') return undefined;
  if (!/^rediss?:\/\//.test(raw.trim())) throw new Error(`LONGHAUL_REDIS_URL (--redis-url) must be a redis:// or rediss:// URL (got "${raw}")`);
  return raw.trim();
}

export function resolveConfig(options: Partial<LonghaulConfig>, env: Env = process.env): LonghaulConfig {
  const stallEnv = intFromEnv(env, 'LONGHAUL_STALL_TIMEOUT_MS', 0);
  return {
    database: options.database ?? env.LONGHAUL_DATABASE_URL ?? DEFAULTS.database,
    maxQueued: options.maxQueued ?? intFromEnv(env, 'LONGHAUL_MAX_QUEUED', 1) ?? DEFAULTS.maxQueued,
    heartbeatIntervalMs: options.heartbeatIntervalMs ?? intFromEnv(env, 'LONGHAUL_HEARTBEAT_INTERVAL_MS', 1) ?? DEFAULTS.heartbeatIntervalMs,
    heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? intFromEnv(env, 'LONGHAUL_HEARTBEAT_TIMEOUT_MS', 1) ?? DEFAULTS.heartbeatTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs !== undefined ? options.stallTimeoutMs : stallEnv !== undefined ? stallEnv || null : DEFAULTS.stallTimeoutMs,
    sweepIntervalMs: options.sweepIntervalMs ?? intFromEnv(env, 'LONGHAUL_SWEEP_INTERVAL_MS', 1) ?? DEFAULTS.sweepIntervalMs,
    cancelDrainMs: options.cancelDrainMs ?? intFromEnv(env, 'LONGHAUL_CANCEL_DRAIN_MS', 0) ?? DEFAULTS.cancelDrainMs,
    resultTtlMs: options.resultTtlMs ?? intFromEnv(env, 'LONGHAUL_RESULT_TTL_MS', 1) ?? DEFAULTS.resultTtlMs,
    defaultMaxAttempts: options.defaultMaxAttempts ?? DEFAULTS.defaultMaxAttempts,
    concurrency: options.concurrency ?? intFromEnv(env, 'LONGHAUL_CONCURRENCY', 1) ?? DEFAULTS.concurrency,
    pgPoolSize: options.pgPoolSize ?? intFromEnv(env, 'LONGHAUL_PG_POOL_SIZE', 1) ?? DEFAULTS.pgPoolSize,
    redisUrl: redisUrl(options.redisUrl !== undefined ? options.redisUrl : env.LONGHAUL_REDIS_URL),
    redisPrefix: options.redisPrefix ?? (env.LONGHAUL_REDIS_PREFIX?.trim() || DEFAULTS.redisPrefix),
  };
}
