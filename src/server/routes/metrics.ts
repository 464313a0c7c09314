/**
 * `GET /metrics`: the Prometheus text exposition of the instance's metrics (src/metrics/metrics.ts).
 *
 * Who may scrape: without API keys, anyone who reaches the server (like the rest of the API).
 * With API keys, `Authorization: Bearer <token>` where the token is LONGHAUL_METRICS_TOKEN
 * (`metricsToken`) or an admin API key (a tenant of LONGHAUL_ADMIN_TENANTS, or a database key
 * made with `longhaul keys create --admin`): the job counts are
 * every tenant's, so an ordinary tenant's key may not read them.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ApiKeyCaller } from '../../facade/api-keys.js';
import { type ApiKey, bearerToken } from '../auth.js';
import { type DatabaseKeys, KeyCheck } from '../key-check.js';
import type { AppContext } from '../context.js';
import { HttpProblem } from '../problem.js';

export interface MetricsRouteOptions {
  apiKeys: readonly ApiKey[];
  /** The API keys kept in the database, when the server checks them (key-check.ts). */
  databaseKeys?: DatabaseKeys;
  /** A bearer token for scrapers only (LONGHAUL_METRICS_TOKEN). */
  metricsToken?: string;
}

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest();

export function registerMetricsRoute(app: FastifyInstance, ctx: Pick<AppContext, 'lh' | 'authEnabled' | 'adminTenants'>, options: MetricsRouteOptions): void {
  const tokenDigest = options.metricsToken ? sha256(options.metricsToken) : null;
  const keys = new KeyCheck(options.apiKeys, ctx.adminTenants, options.databaseKeys ?? null);
  const authorize = (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) => {
    if (!ctx.authEnabled && tokenDigest === null) return done();
    const presented = bearerToken(request.headers.authorization);
    if (!presented) return done(new HttpProblem(401, 'UNAUTHORIZED', 'missing Authorization: Bearer <metrics token or admin API key>'));
    if (tokenDigest !== null && timingSafeEqual(sha256(presented), tokenDigest)) return done();
    const decide = (caller: ApiKeyCaller | null) => {
      if (caller?.admin) return done();
      if (caller !== null) return done(new HttpProblem(403, 'FORBIDDEN', 'metrics need LONGHAUL_METRICS_TOKEN or an admin API key (a tenant listed in LONGHAUL_ADMIN_TENANTS)'));
      done(new HttpProblem(401, 'UNAUTHORIZED', 'not a valid metrics token or API key'));
    };
    const caller = keys.resolve(presented);
    if (caller instanceof Promise) return void caller.then(decide, done);
    decide(caller);
  };
  app.get('/metrics', { schema: { summary: 'Prometheus metrics', tags: ['ops'], hide: true }, onRequest: authorize }, async (_request, reply) => {
    const text = await ctx.lh.metrics.render();
    return reply.type(ctx.lh.metrics.contentType).send(text);
  });
}
