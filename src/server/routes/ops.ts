/** Operational routes: health, readiness, stats. */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../app.js';
import { routeSchemas } from '../schemas.js';

/** How long `/readyz` waits for the database before answering 503. */
const READY_TIMEOUT_MS = 3_000;

export function registerOpsRoutes(app: FastifyInstance, { lh }: AppContext): void {
  app.get('/healthz', { schema: { summary: 'Liveness', tags: ['ops'] } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: { summary: 'Readiness: the database answers', tags: ['ops'] } }, async (_request, reply) => {
    let timer: NodeJS.Timeout | undefined;
    try {
      // One cheap read of Longhaul's schema; a database that hangs (unreachable network) is as
      // not-ready as one that refuses, and a probe must not wait for the pool's connect timeout.
      await Promise.race([
        lh.store.ping(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
        }),
      ]);
      return { status: 'ready' };
    } catch (err) {
      return reply.code(503).type('application/problem+json').send({
        type: 'urn:longhaul:problem:not-ready',
        title: 'Service Unavailable',
        status: 503,
        detail: `database is not answering: ${(err as Error).message}`,
        code: 'NOT_READY',
      });
    } finally {
      clearTimeout(timer);
    }
  });

  app.get('/v1/stats', { schema: routeSchemas.stats }, async (request) => lh.stats({ tenant: request.tenant }));
}
