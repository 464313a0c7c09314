/**
 * `longhaul/stores`: the store classes, for a caller that opens its own store and hands it to
 * `Longhaul.open({ store })`. Not in the root entry, which loads no driver: importing this
 * entry loads `pg` (PostgresStore's driver) whichever store is used. `pg` is an optional
 * package: without it this entry still loads, SqliteStore works, and `new PostgresStore(...)`
 * throws the MissingPackageError naming it (any other failure to load is thrown at import).
 */
import { loadOptional, MissingPackageError, OPTIONAL_PACKAGES } from './core/optional-packages.js';
import type { PostgresStore as PostgresStoreClass } from './store/postgres/postgres-store.js';

const postgres = await loadOptional(OPTIONAL_PACKAGES.postgres, () => import('./store/postgres/postgres-store.js')).catch((err: unknown) => {
  if (err instanceof MissingPackageError) return err;
  throw err;
});

/** A class that cannot be made: its constructor throws why (as a new error, from where it is called). */
function unavailable(why: MissingPackageError): typeof PostgresStoreClass {
  return class {
    constructor() {
      throw new MissingPackageError(OPTIONAL_PACKAGES.postgres, why.missing, { cause: why.cause });
    }
  } as unknown as typeof PostgresStoreClass;
}

export const PostgresStore: typeof PostgresStoreClass = postgres instanceof MissingPackageError ? unavailable(postgres) : postgres.PostgresStore;
export type PostgresStore = PostgresStoreClass;
export type { PostgresStoreOptions } from './store/postgres/postgres-store.js';
export { SqliteStore, type SqliteStoreOptions } from './store/sqlite/sqlite-store.js';
export type { MigrationResult, SqlTransaction, Store } from './store/store.js';
