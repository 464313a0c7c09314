/**
 * Picks the channel for a deployment: Redis when a Redis URL is configured
 * (`LONGHAUL_REDIS_URL`), else LISTEN/NOTIFY when the database is PostgreSQL, else none (one
 * machine on SQLite: the in-process bus plus store polling are enough). The chosen channel's
 * module, and its driver (`ioredis`, `pg`: optional packages, MissingPackageError without
 * them), is loaded here, only when it is the one chosen.
 */
import type pg from 'pg';
import { loadOptional, OPTIONAL_PACKAGES } from '../core/optional-packages.js';
import type { ListenConnection } from '../store/postgres/listen-connection.js';
import type { Channel, ChannelLogger } from './channel.js';

export interface CreateChannelOptions {
  /** The database URL or SQLite path the process uses. */
  databaseUrl: string;
  /** Default: `LONGHAUL_REDIS_URL` from `env`. An empty string means none. */
  redisUrl?: string | undefined;
  /** PostgreSQL: publish through this pool (the store's) instead of opening one. */
  pool?: pg.Pool;
  /** PostgreSQL: LISTEN on this connection (the store's) instead of opening one. */
  listen?: ListenConnection;
  /**
   * The store's notify capability (store.ts StoreNotify, structurally): PostgreSQL's shares its
   * pool and LISTEN connection, used unless `pool` or `listen` is given.
   */
  storeNotify?: { kind: string; shared: unknown } | null;
  /** PostgreSQL: the NOTIFY channel name (default `longhaul_events`). */
  notifyChannel?: string;
  /** Redis: key and channel prefix (default `longhaul:`). */
  redisPrefix?: string;
  /** Redis: progress snapshot TTL (default 1 h). */
  progressTtlMs?: number;
  /** application_name / CLIENT SETNAME of the channel's connections (default `longhaul`). */
  connectionName?: string;
  logger?: ChannelLogger;
  env?: Record<string, string | undefined>;
}

const POSTGRES_URL = /^postgres(ql)?:\/\//;

export async function createChannel(options: CreateChannelOptions): Promise<Channel | null> {
  const redisUrl = options.redisUrl ?? (options.env ?? process.env).LONGHAUL_REDIS_URL;
  if (redisUrl !== undefined && redisUrl.trim() !== '') {
    if (!/^rediss?:\/\//.test(redisUrl)) throw new Error(`LONGHAUL_REDIS_URL must be a redis:// or rediss:// URL (got "${redisUrl}")`);
    const { RedisChannel } = await loadOptional(OPTIONAL_PACKAGES.redis, () => import('./redis.js'));
    return new RedisChannel({
      url: redisUrl,
      ...(options.redisPrefix === undefined ? {} : { prefix: options.redisPrefix }),
      ...(options.progressTtlMs === undefined ? {} : { progressTtlMs: options.progressTtlMs }),
      ...(options.connectionName === undefined ? {} : { connectionName: options.connectionName }),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
    });
  }
  if (POSTGRES_URL.test(options.databaseUrl)) {
    const [{ postgresNotifyShare }, { PostgresNotifyChannel }] = await loadOptional(OPTIONAL_PACKAGES.postgres, () =>
      Promise.all([import('../store/postgres/notify-share.js'), import('./postgres-notify.js')]),
    );
    const share = postgresNotifyShare(options.storeNotify);
    const pool = options.pool ?? share?.pool;
    const listen = options.listen ?? share?.listen;
    return new PostgresNotifyChannel({
      connectionString: options.databaseUrl,
      ...(pool === undefined ? {} : { pool }),
      ...(listen === undefined ? {} : { listen }),
      ...(options.notifyChannel === undefined ? {} : { channel: options.notifyChannel }),
      ...(options.connectionName === undefined ? {} : { applicationName: options.connectionName }),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
    });
  }
  return null;
}
