/**
 * What the PostgreSQL store shares with the NOTIFY relay through its `capabilities.notify`:
 * its pool, to publish through, and the process's one LISTEN connection. The store contract
 * keeps that share opaque (`StoreNotify.shared: unknown`, no `pg` type in store/store.ts); the
 * PostgreSQL store fills it here and the channel narrows it here, so both sides agree on one
 * shape.
 */
import pg from 'pg';
import { ListenConnection } from './listen-connection.js';

/** `StoreNotify.kind` of the PostgreSQL store's notify capability. */
export const POSTGRES_NOTIFY = 'postgres';

export interface PostgresNotifyShare {
  pool: pg.Pool;
  listen: ListenConnection;
}

/**
 * The PostgreSQL share of a store's notify capability, or null when there is none or it is of
 * another kind. A 'postgres' capability sharing anything else is a bug of the store: thrown.
 */
export function postgresNotifyShare(notify: { kind: string; shared: unknown } | null | undefined): PostgresNotifyShare | null {
  if (!notify || notify.kind !== POSTGRES_NOTIFY) return null;
  const shared = notify.shared as Partial<PostgresNotifyShare> | null;
  if (!shared || !(shared.pool instanceof pg.Pool) || !(shared.listen instanceof ListenConnection)) {
    throw new TypeError("a 'postgres' notify capability must share { pool: pg.Pool, listen: ListenConnection }");
  }
  return { pool: shared.pool, listen: shared.listen };
}
