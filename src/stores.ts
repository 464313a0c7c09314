/**
 * `longhaul/stores`: the store classes, for a caller that opens its own store and hands it to
 * `Longhaul.open({ store })`. Not in the root entry, which loads no driver: importing this
 * entry loads `pg` (PostgresStore's driver) whichever store is used.
 */
export { PostgresStore, type PostgresStoreOptions } from './store/postgres/postgres-store.js';
export { SqliteStore, type SqliteStoreOptions } from './store/sqlite/sqlite-store.js';
export type { MigrationResult, SqlTransaction, Store } from './store/store.js';
