/**
 * What `/healthz` and `/readyz` answer, for the API server (routes/ops.ts) and a worker's own
 * health port (health-server.ts) alike.
 *
 * - Live (`/healthz`): the process answers, and its workers are healthy: a worker holding more
 *   abandoned handlers than `maxAbandonedHandlers` (worker/stuck-handlers.ts) is not, and only a
 *   restart releases what they hold. The database is not asked: an outage is no reason to restart.
 * - Ready (`/readyz`): live, and the database answers one cheap read within a few seconds.
 */
import type { Longhaul } from '../longhaul.js';
import { HttpProblem } from './problem.js';

/** How long `/readyz` waits for the database before answering 503. */
const READY_TIMEOUT_MS = 3_000;

/** `/healthz`: throws a 503 problem when this process's workers are unhealthy. */
export function checkLive(lh: Longhaul): { status: 'ok' } {
  const health = lh.workerHealth();
  if (!health.healthy) throw new HttpProblem(503, 'UNHEALTHY', `worker unhealthy: ${health.reason}`);
  return { status: 'ok' };
}

/** `/readyz`: throws a 503 problem when the workers are unhealthy or the database does not answer in time. */
export async function checkReady(lh: Longhaul): Promise<{ status: 'ready' }> {
  const health = lh.workerHealth();
  if (!health.healthy) throw new HttpProblem(503, 'NOT_READY', `worker unhealthy: ${health.reason}`);
  let timer: NodeJS.Timeout | undefined;
  try {
    // One cheap read of Longhaul's schema; a database that hangs (unreachable network) is as
    // not-ready as one that refuses, and a probe must not wait for the pool's connect timeout.
    await Promise.race([
      lh.ping(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
      }),
    ]);
    return { status: 'ready' };
  } catch (err) {
    // Any failure, transient or not, is the one answer a probe acts on: not ready (left to the
    // error handler it would be DATABASE_UNAVAILABLE, or INTERNAL for a schema not migrated).
    throw new HttpProblem(503, 'NOT_READY', `database is not answering: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
}
