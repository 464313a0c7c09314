/** Operational routes: health, readiness, stats, and who the caller is. */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.js';
import { checkLive, checkReady } from '../health.js';
import { routeSchemas } from '../schemas.js';
import { isAdmin } from '../tenant-scope.js';

export function registerOpsRoutes(app: FastifyInstance, ctx: AppContext): void {
  const { lh } = ctx;
  app.get('/healthz', { schema: { summary: "Liveness: the process answers and its workers are healthy", tags: ['ops'] } }, async (request) => checkLive(lh, request.log));
  app.get('/readyz', { schema: { summary: 'Readiness: live, and the database answers', tags: ['ops'] } }, async (request) => checkReady(lh, request.log));

  app.get('/v1/stats', { schema: routeSchemas.stats }, async (request) => lh.stats({ tenant: request.tenant }));

  // What a client (the dashboard) may offer this caller: an admin may name other tenants
  // (`tenant=` on the job routes, dead letters, purge); the suggestions are the tenants of the
  // configured API keys (jobs submitted through the library may have others).
  app.get('/v1/whoami', { schema: routeSchemas.whoami }, async (request) => {
    const admin = request.grant === null && isAdmin(ctx, request);
    return { tenant: request.tenant, admin, tenants: admin ? (ctx.keyTenants.length > 0 ? ctx.keyTenants : [request.tenant]) : [request.tenant] };
  });
}
