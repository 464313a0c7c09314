/**
 * Dead-letter routes: a job's attempts, the failed jobs grouped by task type and error code, the
 * jobs of one group, bulk replay and discard; and the task types a form may submit.
 *
 * Tenancy: everything acts on the caller's tenant. An admin (a tenant in LONGHAUL_ADMIN_TENANTS,
 * or every caller of a server without API keys, as for purge) may name another tenant with
 * `tenant`, or every tenant with `tenant=*`; anyone else naming another tenant gets a 403.
 *
 * The group of jobs that failed without an error code (listed with `code: null`) is named by
 * `"code": null` in a bulk body and by `noCode=true` in a listing's query string.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { DEAD_LETTER_BATCH, MAX_DEAD_LETTER_IDS } from '../../core/limits.js';
import type { DeadLetterSelection } from '../../longhaul.js';
import type { AppContext } from '../context.js';
import { HttpProblem, invalidRequest } from '../problem.js';
import { isAdmin } from '../tenant-scope.js';
import { attemptCursorParam, cursorParam, errorCodeParam, jobIdParam, pageLimitParam, pathParams, taskTypeParam, tenantOrAllParam, tenantParam, timeParam } from '../params.js';

const problemRef = { $ref: 'Problem#' } as const;
const errors = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, problemRef]));
const nullableString = { type: ['string', 'null'] } as const;
const errorSchema = {
  type: ['object', 'null'],
  properties: { message: { type: 'string' }, code: { type: 'string' }, retryable: { type: 'boolean' } },
} as const;

const tenantField = {
  type: 'string',
  minLength: 1,
  maxLength: 200,
  description: "admins only: another tenant's jobs, or * for every tenant's (default: the caller's)",
} as const;

const codeField = { type: 'string', minLength: 1, maxLength: 200, description: "the failed job's error code" } as const;

/** The filter fields of the bulk routes (bodies: the library refuses what a store cannot hold, facade/dead-letters.ts). */
const filterFields = {
  tenant: tenantField,
  type: { type: 'string', minLength: 1, maxLength: 128 },
  failedAfter: timeParam,
  failedBefore: timeParam,
} as const;

/** The filter of the listing routes: a query string has no null, so the group without an error code is `noCode=true`. */
const filterQuery = {
  tenant: { ...tenantOrAllParam, description: tenantField.description },
  type: taskTypeParam,
  failedAfter: timeParam,
  failedBefore: timeParam,
  code: errorCodeParam,
  noCode: { type: 'string', enum: ['true', 'false'], description: 'true: only jobs that failed without an error code (the group listed with code null); not with code' },
} as const;

const selectionBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    ...filterFields,
    code: { ...codeField, type: ['string', 'null'], description: "the failed job's error code; null: only jobs that failed without one (the group listed with code null)" },
    ids: { type: 'array', minItems: 1, maxItems: MAX_DEAD_LETTER_IDS, items: { type: 'string', minLength: 1, maxLength: 64 }, description: 'only these jobs' },
  },
} as const;

const limitQuery = (fallback: number) => pageLimitParam(fallback);

export const deadLetterSchemas = {
  attempts: {
    summary: "A job's attempts: each one's error, stack, worker and times, oldest first",
    tags: ['jobs'],
    params: pathParams({ id: jobIdParam }),
    querystring: { type: 'object', additionalProperties: false, properties: { limit: limitQuery(100), cursor: attemptCursorParam, tenant: tenantParam } },
    response: {
      200: {
        type: 'object',
        properties: {
          items: {
            type: 'array',
            items: {
              type: 'object',
              properties: {
                attempt: { type: 'integer' },
                workerId: nullableString,
                startedAt: { type: ['string', 'null'], format: 'date-time' },
                endedAt: { type: ['string', 'null'], format: 'date-time' },
                outcome: { type: 'string', description: 'failed, retrying, cancelled, waiting, succeeded, or running (the attempt running now)' },
                reason: nullableString,
                error: errorSchema,
                stack: nullableString,
              },
            },
          },
          nextCursor: nullableString,
        },
      },
      ...errors(400, 401, 403, 404),
    },
  },
  groups: {
    summary: 'Failed jobs grouped by task type and error code, newest failure first',
    tags: ['dead letters'],
    querystring: { type: 'object', additionalProperties: false, properties: { ...filterQuery, limit: limitQuery(100) } },
    response: {
      200: {
        type: 'object',
        properties: {
          items: {
            type: 'array',
            items: {
              type: 'object',
              properties: {
                type: { type: 'string' },
                code: nullableString,
                count: { type: 'integer' },
                lastFailedAt: { type: 'string', format: 'date-time' },
                tenant: { type: 'string', description: 'with tenant=* only' },
              },
            },
          },
        },
      },
      ...errors(400, 401, 403),
    },
  },
  jobs: {
    summary: 'The failed jobs of a filter (one group: type and code), newest failure first',
    tags: ['dead letters'],
    querystring: { type: 'object', additionalProperties: false, properties: { ...filterQuery, limit: limitQuery(50), cursor: cursorParam } },
    response: {
      200: { type: 'object', properties: { items: { type: 'array', items: { $ref: 'JobSnapshot#' } }, nextCursor: nullableString } },
      ...errors(400, 401, 403),
    },
  },
  bulk: (what: string) => ({
    summary: `${what} the failed jobs of a filter, in batches of ${DEAD_LETTER_BATCH}`,
    tags: ['dead letters'],
    body: selectionBody,
    response: { 200: { type: 'object', properties: { count: { type: 'integer' } } }, ...errors(400, 401, 403, 415) },
  }),
  taskTypes: {
    summary: 'The task types this server accepts, with the JSON Schema of their input',
    tags: ['jobs'],
    response: {
      200: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            type: { type: 'string' },
            inputSchema: { description: 'a JSON Schema; null when the task declares none (or only a Standard Schema without one)' },
            description: nullableString,
            maxAttempts: { type: ['integer', 'null'] },
            priority: nullableString,
            timeoutMs: { type: ['number', 'null'] },
            concurrency: { type: ['integer', 'null'] },
          },
        },
      },
      ...errors(401),
    },
  },
} as const;

interface FilterFields {
  tenant?: string;
  type?: string;
  /** null (bodies): jobs without an error code. */
  code?: string | null;
  /** 'true' (query strings): jobs without an error code. */
  noCode?: string;
  failedAfter?: string;
  failedBefore?: string;
  ids?: string[];
}

/**
 * The library selection of a request's filter, with its tenant: the caller's, or for an admin
 * the one named (`*`: every tenant, no tenant in the selection).
 */
function selectionOf(ctx: AppContext, request: FastifyRequest, fields: FilterFields): DeadLetterSelection {
  const { tenant: asked, ...rest } = fields;
  const admin = isAdmin(ctx, request);
  if (asked !== undefined && asked !== request.tenant && !admin) {
    throw new HttpProblem(403, 'FORBIDDEN', "acting on another tenant's dead letters needs an admin API key (a tenant listed in LONGHAUL_ADMIN_TENANTS)");
  }
  if (rest.noCode === 'true' && rest.code !== undefined) {
    throw invalidRequest('name either code or noCode=true, not both', [{ path: 'noCode', message: 'not with code' }]);
  }
  const selection: DeadLetterSelection = {};
  if (asked !== '*') selection.tenant = asked ?? request.tenant;
  for (const key of ['type', 'failedAfter', 'failedBefore'] as const) {
    const v = rest[key];
    if (v !== undefined) selection[key] = v;
  }
  if (rest.code !== undefined) selection.code = rest.code;
  if (rest.noCode === 'true') selection.code = null;
  if (rest.ids !== undefined) selection.ids = rest.ids;
  return selection;
}

/** A `limit` the route's schema let through (1 to MAX_PAGE_LIMIT, in decimal). */
function limitOf(text: string | undefined): number | undefined {
  return text === undefined ? undefined : Number(text);
}

export function registerDeadLetterRoutes(app: FastifyInstance, ctx: AppContext): void {
  const { lh } = ctx;

  app.get<{ Params: { id: string }; Querystring: { limit?: string; cursor?: string } }>(
    '/v1/jobs/:id/attempts',
    // An admin's `tenant` parameter: another tenant's job (../tenant-scope.ts).
    { schema: deadLetterSchemas.attempts, config: { tenantScope: true } },
    async (request) => {
      const limit = limitOf(request.query.limit);
      return lh.attempts(request.params.id, {
        tenant: request.tenant,
        ...(limit === undefined ? {} : { limit }),
        ...(request.query.cursor ? { cursor: request.query.cursor } : {}),
      });
    },
  );

  app.get<{ Querystring: FilterFields & { limit?: string } }>('/v1/dead-letters', { schema: deadLetterSchemas.groups }, async (request) => {
    const { limit, ...fields } = request.query;
    const n = limitOf(limit);
    return { items: await lh.deadLetterGroups({ ...selectionOf(ctx, request, fields), ...(n === undefined ? {} : { limit: n }) }) };
  });

  app.get<{ Querystring: FilterFields & { limit?: string; cursor?: string } }>('/v1/dead-letters/jobs', { schema: deadLetterSchemas.jobs }, async (request) => {
    const { limit, cursor, ...fields } = request.query;
    const n = limitOf(limit);
    return lh.deadLetterJobs({ ...selectionOf(ctx, request, fields), ...(n === undefined ? {} : { limit: n }), ...(cursor ? { cursor } : {}) });
  });

  app.post<{ Body: FilterFields | undefined }>('/v1/dead-letters/retry', { schema: deadLetterSchemas.bulk('Replay (retry)') }, async (request) =>
    lh.retryDeadLetters(selectionOf(ctx, request, request.body ?? {})),
  );

  app.post<{ Body: FilterFields | undefined }>(
    '/v1/dead-letters/discard',
    { schema: deadLetterSchemas.bulk('Discard (delete, with their rows and files)') },
    async (request) => lh.discardDeadLetters(selectionOf(ctx, request, request.body ?? {})),
  );

  app.get('/v1/task-types', { schema: deadLetterSchemas.taskTypes }, async () => lh.taskTypes());
}
