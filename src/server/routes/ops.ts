/** Operational routes: health, readiness, stats. */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../app.js';
import { routeSchemas } from '../schemas.js';

export function registerOpsRoutes(app: FastifyInstance, { lh }: AppContext): void {
  app.get('/healthz', { schema: { summary: 'Liveness', tags: ['ops'] } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: { summary: 'Readiness: the database answers', tags: ['ops'] } }, async (_request, reply) => {
    try {
      await lh.store.countByState({ tenant: '\u0000readyz' });
      return { status: 'ready' };
    } catch (err) {
      return reply.code(503).type('application/problem+json').send({
        type: 'urn:longhaul:problem:not-ready',
        title: 'Service Unavailable',
        status: 503,
        detail: `database is not answering: ${(err as Error).message}`,
        code: 'NOT_READY',
      });
    }
  });

  app.get('/v1/stats', { schema: routeSchemas.stats }, async (request) => lh.stats({ tenant: request.tenant }));
}
