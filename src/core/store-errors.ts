/**
 * Which store errors are passing (the database unreachable, restarting, busy) and which are a
 * refusal of what was written. A passing error is retried, the same write later; a refusal
 * never succeeds by retrying, so it must end the one write (or job) it belongs to, never a loop
 * shared with other jobs. Pure: it only reads the error object a driver (`pg`, node:sqlite,
 * Node's sockets) threw.
 */

/** SQLSTATE classes of a connection that failed or a server that is going away or overloaded. */
const TRANSIENT_SQLSTATE_CLASSES = new Set([
  '08', // connection exception
  '53', // insufficient resources (too many connections, out of memory, disk full)
  '57', // operator intervention: admin/crash shutdown, cannot connect now, statement timeout
  '58', // system error (I/O) outside PostgreSQL
]);

/** Single SQLSTATEs that succeed when tried again. */
const TRANSIENT_SQLSTATES = new Set([
  '40001', // serialization failure
  '40P01', // deadlock detected
  '55P03', // lock not available
]);

/** A protocol violation is a message the server could not read: not a passing state. */
const NOT_TRANSIENT = new Set(['08P01', '57P04' /* database dropped */]);

const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * node:sqlite throws `ERR_SQLITE_ERROR` with SQLite's extended result code as `errcode`; its low
 * byte is the primary code: BUSY 5, LOCKED 6, IOERR 10, FULL 13, CANTOPEN 14, PROTOCOL 15.
 */
const SQLITE_TRANSIENT_CODES = new Set([5, 6, 10, 13, 14, 15]);

/** What `pg` says, without a code, when a connection dies or cannot be made in time. */
const PG_CONNECTION_MESSAGES =
  /connection terminated|timeout exceeded when trying to connect|not queryable|terminating connection|the database system is (starting up|shutting down|in recovery mode)/i;

/**
 * True for errors that say the store could not be reached or was busy (retry the same write
 * later); false for a store that answered and refused the write (its data, a constraint, a bug).
 */
export function isTransientStoreError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  // Several addresses tried (IPv4 and IPv6): passing if any failure was.
  const inner = (err as { errors?: unknown }).errors;
  if (Array.isArray(inner) && inner.some((e) => e !== err && isTransientStoreError(e))) return true;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (NOT_TRANSIENT.has(code)) return false;
    if (SOCKET_CODES.has(code)) return true;
    if (code === 'ERR_SQLITE_ERROR') {
      const errcode = (err as { errcode?: unknown }).errcode;
      return typeof errcode === 'number' && SQLITE_TRANSIENT_CODES.has(errcode & 0xff);
    }
    if (/^[0-9A-Z]{5}$/.test(code)) return TRANSIENT_SQLSTATES.has(code) || TRANSIENT_SQLSTATE_CLASSES.has(code.slice(0, 2));
  }
  const message = (err as { message?: unknown }).message;
  return typeof message === 'string' && PG_CONNECTION_MESSAGES.test(message);
}

/**
 * Runs one store write (named for the log) through a short outage: the worker's
 * (worker/store-retry.ts) is handed to what writes on a handler's behalf, such as blobs/.
 */
export type StoreWriteRetry = <T>(what: string, write: () => Promise<T>) => Promise<T>;
