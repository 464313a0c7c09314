/**
 * Admins reading and acting on another tenant's jobs: routes that opt in (`config.tenantScope`)
 * take a `tenant` query parameter. An admin (a tenant in LONGHAUL_ADMIN_TENANTS, or every
 * caller of a server without API keys) naming a tenant is served as that tenant; `*` (every
 * tenant) is allowed on listings only (`tenantScope: 'all'`), which read it themselves. Any
 * other caller naming a tenant other than its own gets a 403 problem, never a silent fallback
 * to its own jobs; naming its own tenant is allowed. A stream token is never an admin: it opens
 * its own tenant's streams only.
 */
import type { FastifyRequest } from 'fastify';
import type { AppContext } from './context.js';
import { HttpProblem, invalidRequest } from './problem.js';

/** `tenantScope: true`: one named tenant; `'all'`: also `*`, every tenant. */
export type TenantScopeConfig = boolean | 'all';

/**
 * Whether a request's caller is an admin: its key's tenant is in LONGHAUL_ADMIN_TENANTS or it is
 * a database key made with `--admin` (decided at authentication: `request.admin`), or the server
 * has no API keys.
 */
export function isAdmin(ctx: Pick<AppContext, 'authEnabled'>, request: Pick<FastifyRequest, 'admin'>): boolean {
  return !ctx.authEnabled || request.admin;
}

/** The OpenAPI description of the parameter. */
export const tenantQueryField = {
  type: 'string',
  minLength: 1,
  maxLength: 200,
  description: "admins only: another tenant's jobs (default: the caller's). A tenant key naming another tenant gets 403",
} as const;

export const tenantQueryAllField = {
  ...tenantQueryField,
  description: "admins only: another tenant's jobs, or * for every tenant's (default: the caller's). A tenant key naming another tenant gets 403",
} as const;

/** The onRequest hook of an opted-in route (after authentication). */
export function tenantScopeHook(ctx: Pick<AppContext, 'authEnabled' | 'adminTenants'>, scope: TenantScopeConfig) {
  return (request: FastifyRequest, _reply: unknown, done: (err?: Error) => void) => {
    const asked = (request.query as { tenant?: unknown } | undefined)?.tenant;
    if (asked === undefined) return done();
    if (typeof asked !== 'string' || asked === '' || asked.length > 200) {
      return done(invalidRequest('tenant must be one tenant name of 1 to 200 characters', [{ path: 'tenant', message: 'must be one tenant name of 1 to 200 characters' }]));
    }
    if (asked === request.tenant) return done();
    const admin = request.grant === null && isAdmin(ctx, request);
    if (!admin) {
      return done(new HttpProblem(403, 'FORBIDDEN', "reading or acting on another tenant's jobs needs an admin API key (a tenant listed in LONGHAUL_ADMIN_TENANTS)"));
    }
    if (asked === '*') {
      if (scope !== 'all') return done(invalidRequest('tenant=* (every tenant) is for listings; name one tenant here', [{ path: 'tenant', message: 'name one tenant' }]));
      return done();
    }
    request.tenant = asked;
    done();
  };
}
