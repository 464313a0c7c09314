/** Operational routes: health, readiness, stats. */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.js';
import { HttpProblem } from '../problem.js';
import { routeSchemas } from '../schemas.js';

/** How long `/readyz` waits for the database before answering 503. */
const READY_TIMEOUT_MS = 3_000;

export function registerOpsRoutes(app: FastifyInstance, { lh }: AppContext): void {
  app.get('/healthz', { schema: { summary: 'Liveness', tags: ['ops'] } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: { summary: 'Readiness: the database answers', tags: ['ops'] } }, async () => {
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
  });

  app.get('/v1/stats', { schema: routeSchemas.stats }, async (request) => lh.stats({ tenant: request.tenant }));
}
