/**
 * What `/healthz` and `/readyz` answer, for the API server (routes/ops.ts) and a worker's own
 * health port (health-server.ts) alike.
 *
 * - Live (`/healthz`): the process answers, and its workers are healthy: a worker holding more
 *   abandoned handlers than `maxAbandonedHandlers` (worker/stuck-handlers.ts) is not, and only a
 *   restart releases what they hold. The database is not asked: an outage is no reason to restart.
 * - Ready (`/readyz`): live, and the database answers one cheap read within a few seconds.
 *
 * Both are unauthenticated: a 503 says why in a `reason` code (`WORKER_UNHEALTHY`,
 * `DATABASE_UNAVAILABLE`, `DATABASE_TIMEOUT`). A database error, which can name hosts and users,
 * goes to the log only (at most once per `DETAIL_LOG_EVERY_MS`: probes come often); a worker's
 * state (how many handlers it abandoned) is the process's own and stays in the answer.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Longhaul } from '../longhaul.js';
import { HttpProblem } from './problem.js';

/** How long `/readyz` waits for the database before answering 503. */
const READY_TIMEOUT_MS = 3_000;

const DETAIL_LOG_EVERY_MS = 10_000;
let detailLoggedAt = Number.NEGATIVE_INFINITY;

/** The 503 of a probe: its reason code in the answer, the details in the log. */
function notReady(code: string, reason: string, detail: string, log: FastifyBaseLogger | undefined, err?: unknown): HttpProblem {
  const now = Date.now();
  if (log && now - detailLoggedAt >= DETAIL_LOG_EVERY_MS) {
    detailLoggedAt = now;
    log.warn({ reason, ...(err === undefined ? {} : { err }) }, `${code === 'UNHEALTHY' ? '/healthz' : '/readyz'} answered 503: ${detail}`);
  }
  const text = reason === 'WORKER_UNHEALTHY' ? detail : 'the database is not answering (details in the server log)';
  return new HttpProblem(503, code, text, { members: { reason } });
}

/** `/healthz`: throws a 503 problem when this process's workers are unhealthy. */
export function checkLive(lh: Longhaul, log?: FastifyBaseLogger): { status: 'ok' } {
  const health = lh.workerHealth();
  if (!health.healthy) throw notReady('UNHEALTHY', 'WORKER_UNHEALTHY', `worker unhealthy: ${health.reason}`, log);
  return { status: 'ok' };
}

/** `/readyz`: throws a 503 problem when the workers are unhealthy or the database does not answer in time. */
export async function checkReady(lh: Longhaul, log?: FastifyBaseLogger): Promise<{ status: 'ready' }> {
  const health = lh.workerHealth();
  if (!health.healthy) throw notReady('NOT_READY', 'WORKER_UNHEALTHY', `worker unhealthy: ${health.reason}`, log);
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  try {
    // One cheap read of Longhaul's schema; a database that hangs (unreachable network) is as
    // not-ready as one that refuses, and a probe must not wait for the pool's connect timeout.
    await Promise.race([
      lh.ping(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          timedOut = true;
          reject(new Error(`no answer within ${READY_TIMEOUT_MS} ms`));
        }, READY_TIMEOUT_MS);
      }),
    ]);
    return { status: 'ready' };
  } catch (err) {
    // Any failure, transient or not, is the one answer a probe acts on: not ready (left to the
    // error handler it would be DATABASE_UNAVAILABLE, or INTERNAL for a schema not migrated).
    throw notReady('NOT_READY', timedOut ? 'DATABASE_TIMEOUT' : 'DATABASE_UNAVAILABLE', `database is not answering: ${(err as Error).message}`, log, err);
  } finally {
    clearTimeout(timer);
  }
}
