/**
 * `DELETE /v1/jobs?tenant=...`: erasure of a tenant's or a filter's ended jobs and files (data
 * protection). Admin only: with API keys, the caller's tenant must be listed in
 * LONGHAUL_ADMIN_TENANTS (`adminTenants`); without API keys (a loopback or explicitly insecure
 * server) every caller is. Bad filters are 400 problems; an unfiltered purge is refused.
 */
import type { FastifyInstance } from 'fastify';
import { isJobState, type JobState } from '../../core/states.js';
import type { AppContext } from '../context.js';
import { query, stateListParam, taskTypeParam, tenantParam, timeParam } from '../params.js';
import { HttpProblem, invalidRequest } from '../problem.js';
import { isAdmin } from '../tenant-scope.js';

interface PurgeQuery {
  tenant?: string;
  state?: string;
  type?: string;
  before?: string;
}

/** `before` as an ISO date-time or ms since the epoch. */
function parseBefore(text: string): number {
  const ms = /^\d+$/.test(text) ? Number(text) : Date.parse(text);
  if (!Number.isFinite(ms)) throw invalidRequest(`before must be an ISO date-time or ms since the epoch (got "${text.slice(0, 40)}")`, [{ path: 'before', message: 'invalid time' }]);
  return ms;
}

function parseStates(text: string): JobState[] {
  const states = text.split(',').map((s) => s.trim()).filter(Boolean);
  for (const s of states) if (!isJobState(s)) throw invalidRequest(`state "${s.slice(0, 40)}" is not a job state`, [{ path: 'state', message: 'unknown state' }]);
  return states as JobState[];
}

export const purgeSchema = {
  summary: "Erase a tenant's or a filter's ended jobs, with their rows and files (admin)",
  tags: ['jobs'],
  querystring: query({
    tenant: { ...tenantParam, description: "the tenant whose jobs to erase" },
    state: { ...stateListParam, description: 'ended states, comma-separated (succeeded, expired, failed, cancelled); default all' },
    type: taskTypeParam,
    before: { ...timeParam, description: 'only jobs that ended before this time (ISO 8601 date-time, or ms since the epoch)' },
  }),
  response: {
    200: {
      type: 'object',
      properties: {
        deleted: {
          type: 'object',
          properties: Object.fromEntries(['jobs', 'files', 'resultFiles', 'progress', 'webhooks', 'deliveries', 'signals', 'attempts'].map((k) => [k, { type: 'integer' }])),
        },
        skipped: { type: 'integer', description: 'matching jobs that have not ended (cancel them, then purge again)' },
      },
    },
  },
} as const;

export function registerPurgeRoutes(app: FastifyInstance, ctx: AppContext): void {
  app.delete<{ Querystring: PurgeQuery }>('/v1/jobs', { schema: purgeSchema }, async (request, reply) => {
    if (!isAdmin(ctx, request)) {
      throw new HttpProblem(403, 'FORBIDDEN', 'purging jobs needs an admin API key (a tenant listed in LONGHAUL_ADMIN_TENANTS)');
    }
    const q = request.query;
    const outcome = await ctx.lh.purge({
      ...(q.tenant === undefined ? {} : { tenant: q.tenant }),
      ...(q.type === undefined ? {} : { type: q.type }),
      ...(q.state === undefined ? {} : { states: parseStates(q.state) }),
      ...(q.before === undefined ? {} : { before: parseBefore(q.before) }),
    });
    return reply.code(200).send(outcome);
  });
}
