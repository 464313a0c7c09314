/** Operational routes: health, readiness, stats, and who the caller is. */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.js';
import { HttpProblem } from '../problem.js';
import { routeSchemas } from '../schemas.js';
import { isAdmin } from '../tenant-scope.js';

/** How long `/readyz` waits for the database before answering 503. */
const READY_TIMEOUT_MS = 3_000;

export function registerOpsRoutes(app: FastifyInstance, ctx: AppContext): void {
  const { lh } = ctx;
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

  // What a client (the dashboard) may offer this caller: an admin may name other tenants
  // (`tenant=` on the job routes, dead letters, purge); the suggestions are the tenants of the
  // configured API keys (jobs submitted through the library may have others).
  app.get('/v1/whoami', { schema: routeSchemas.whoami }, async (request) => {
    const admin = request.grant === null && isAdmin(ctx, request.tenant);
    return { tenant: request.tenant, admin, tenants: admin ? (ctx.keyTenants.length > 0 ? ctx.keyTenants : [request.tenant]) : [request.tenant] };
  });
}
