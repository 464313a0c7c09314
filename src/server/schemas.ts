/**
 * JSON Schemas of the v1 routes. Fastify validates requests with them (shape errors → 400),
 * serializes snapshots with them, and @fastify/swagger turns them into /openapi.json.
 */
import type { ScheduleInput } from '../core/api-types.js';
import { JOB_STATES } from '../core/states.js';
import { PRIORITIES } from '../core/job.js';
import { MAX_ATTEMPTS_LIMIT, MAX_BATCH_JOBS, MAX_SCHEDULE_MS, MAX_TIMEOUT_MS } from '../core/limits.js';
import { MAX_LIST_TEXT } from '../facade/reads.js';
import { cursorParam, jobIdParam, orEmpty, pageLimitParam, pathParams, query, scheduleNameParam, signalNameParam, stateListParam, streamTokenParam, taskTypeParam, tenantOrAllParam, tenantParam, textParam } from './params.js';

const nullableString = { type: ['string', 'null'] } as const;
const nullableNumber = { type: ['number', 'null'] } as const;
const nullableTime = { type: ['string', 'null'], format: 'date-time' } as const;

/** A job's error; a saga's also says whether its steps were compensated. */
const errorProperties = {
  message: { type: 'string' },
  code: { type: 'string' },
  retryable: { type: 'boolean' },
  compensated: { type: 'boolean', description: 'a saga whose completed steps were all compensated' },
  compensationFailed: {
    type: 'object',
    description: "a saga whose compensation failed: the step's name and why",
    properties: { step: { type: 'string' }, message: { type: 'string' } },
  },
} as const;

export const progressSchema = {
  type: 'object',
  properties: {
    percent: nullableNumber,
    stage: nullableString,
    itemsDone: nullableNumber,
    itemsTotal: nullableNumber,
    message: nullableString,
    eta: { ...nullableNumber, description: 'estimated ms until done; null until meaningful' },
    updatedAt: nullableTime,
    stagePercent: { ...nullableNumber, description: "tasks with stages: the running stage's own percent (percent is the whole job's, by stage weight)" },
  },
} as const;

export const snapshotSchema = {
  $id: 'JobSnapshot',
  type: 'object',
  properties: {
    id: { type: 'string', format: 'uuid' },
    type: { type: 'string' },
    status: { type: 'string', enum: [...JOB_STATES] },
    priority: { type: 'string', enum: [...PRIORITIES] },
    input: {},
    metadata: { type: ['object', 'null'], additionalProperties: true },
    progress: progressSchema,
    result: {},
    resultUrl: { ...nullableString, description: "signed URL of the first result file (expires; fetch the job again for a fresh one)" },
    results: {
      type: 'array',
      description: 'result files with signed, expiring URLs',
      items: {
        type: 'object',
        properties: { name: { type: 'string' }, size: { type: 'integer' }, contentType: { type: 'string' }, url: { type: 'string' } },
      },
    },
    downloads: { type: 'integer', description: "downloads of the job's result files" },
    error: {
      type: ['object', 'null'],
      description: 'why the job is retrying, failed or cancelled; null in every other status',
      properties: errorProperties,
    },
    lastError: {
      type: ['object', 'null'],
      description: 'the error of the latest failed attempt (or cancel), kept while a new attempt runs and after a success',
      properties: errorProperties,
    },
    attempts: { type: 'integer' },
    maxAttempts: { type: 'integer' },
    cancelRequested: { type: 'boolean' },
    stalled: { type: 'boolean' },
    parentId: nullableString,
    waitingFor: {
      type: ['object', 'null'],
      description: "while waiting: what the job waits for (its children, a time, or a signal by name); null otherwise",
      properties: { kind: { type: 'string', enum: ['children', 'sleep', 'signal'] }, name: nullableString, failFast: { type: 'boolean' } },
    },
    children: {
      type: ['object', 'null'],
      description: 'for a job that spawned children: how many, and how many in each state',
      properties: {
        total: { type: 'integer' },
        byState: { type: 'object', properties: Object.fromEntries(JOB_STATES.map((s) => [s, { type: 'integer' }])) },
      },
    },
    createdAt: { type: 'string', format: 'date-time' },
    startedAt: nullableTime,
    finishedAt: nullableTime,
    updatedAt: { type: 'string', format: 'date-time' },
    runAt: { type: 'string', format: 'date-time' },
    expiresAt: nullableTime,
    links: {
      type: 'object',
      properties: { self: { type: 'string' }, events: { type: 'string' }, cancel: { type: 'string' } },
    },
  },
} as const;

export const problemSchema = {
  $id: 'Problem',
  type: 'object',
  description: 'RFC 9457 problem details',
  properties: {
    type: { type: 'string' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    code: { type: 'string' },
    instance: { type: 'string' },
    errors: { type: 'array', items: { type: 'object', properties: { path: { type: 'string' }, message: { type: 'string' } } } },
  },
} as const;

const snapshotRef = { $ref: 'JobSnapshot#' } as const;
const problemRef = { $ref: 'Problem#' } as const;


export const submitBodySchema = {
  type: 'object',
  required: ['type'],
  additionalProperties: false,
  properties: {
    type: { type: 'string', minLength: 1, maxLength: 128, description: 'task type' },
    input: { description: 'task input, checked against the task schema' },
    priority: { type: 'string', enum: [...PRIORITIES] },
    runAt: { type: 'string', format: 'date-time' },
    // Bounded so that now + delayMs stays a valid date (an unbounded delay made an unreadable job).
    delayMs: { type: 'integer', minimum: 0, maximum: MAX_SCHEDULE_MS, description: 'ms from now, at most 100 years' },
    maxAttempts: { type: 'integer', minimum: 1, maximum: MAX_ATTEMPTS_LIMIT },
    timeoutMs: { type: 'integer', minimum: 1, maximum: MAX_TIMEOUT_MS, description: 'ms, at most 100 years' },
    metadata: { type: 'object', additionalProperties: true },
    webhook: {
      type: 'object',
      required: ['url'],
      additionalProperties: false,
      description: 'notified (Standard Webhooks) when the job succeeds, fails or is cancelled',
      properties: {
        url: { type: 'string', minLength: 1, maxLength: 2048, description: 'http(s) URL; private and internal addresses are refused (422)' },
        secret: { type: 'string', maxLength: 200, description: "whsec_<base64>; default: the server's LONGHAUL_WEBHOOK_SECRET" },
      },
    },
  },
} as const;

const scheduleFields = {
  task: { type: 'string', minLength: 1, maxLength: 128, description: 'the task type each tick submits' },
  cron: { type: 'string', minLength: 1, maxLength: 256, description: 'five fields (minute first), or six with seconds first' },
  timezone: { type: 'string', minLength: 1, maxLength: 64, description: "IANA timezone the expression is read in (DST followed); default 'UTC'" },
  input: { description: 'the input of every run, checked against the task schema when each run is submitted' },
  catchUp: { type: 'string', enum: ['skip', 'runOnce'], description: "ticks missed while no process ran: 'skip' (default) or one run for all of them" },
  overlap: { type: 'boolean', description: 'false: no new run while the previous one is not terminal (default true)' },
} as const;

export const scheduleBodySchema = {
  type: 'object',
  required: ['name', 'task', 'cron'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 128, description: 'letters, digits and . _ : -; unique in the tenant' },
    ...scheduleFields,
    paused: { type: 'boolean', description: 'create it paused' },
  },
} as const;

/** The body `scheduleBodySchema` checks: the schedule shape of core/api-types.ts. */
export type ScheduleBody = ScheduleInput;

const scheduleView = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    ...scheduleFields,
    paused: { type: 'boolean' },
    declared: { type: 'boolean', description: 'declared in the tasks module: read-only here but for pause, resume, trigger, delete' },
    nextRuns: { type: 'array', items: { type: 'string', format: 'date-time' }, description: 'the next five ticks, ISO in UTC (empty while paused)' },
    lastRun: {
      type: ['object', 'null'],
      properties: { at: { type: 'string', format: 'date-time' }, jobId: { type: 'string' }, status: { type: ['string', 'null'] } },
    },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
  },
} as const;

const nameParams = pathParams({ name: scheduleNameParam });

const idParams = pathParams({ id: jobIdParam });

const errors = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, problemRef]));

/** An admin's `tenant` (tenant-scope.ts) on one job's routes. */
const tenantQuery = query({ tenant: tenantParam });

/** A `{items: [...]}` answer whose items are objects with these properties. */
const itemList = <P extends Record<string, unknown>>(properties: P) =>
  ({ type: 'object', properties: { items: { type: 'array', items: { type: 'object', properties } } } }) as const;

export const routeSchemas = {
  submit: {
    summary: 'Submit a job',
    tags: ['jobs'],
    body: submitBodySchema,
    headers: { type: 'object', properties: { 'idempotency-key': { type: 'string' } } },
    response: { 200: snapshotRef, 202: snapshotRef, ...errors(400, 401, 413, 415, 422, 429, 503) },
  },
  batch: {
    summary: 'Submit a batch of jobs: all or none (also POST /v1/jobs with an array body)',
    tags: ['jobs'],
    body: {
      type: 'object',
      required: ['jobs'],
      additionalProperties: false,
      properties: { jobs: { type: 'array', description: `submit bodies, 1 to ${MAX_BATCH_JOBS}`, items: {} } },
    },
    headers: { type: 'object', properties: { 'idempotency-key': { type: 'string', description: 'one key for the whole batch' } } },
    response: {
      200: { type: 'object', properties: { jobs: { type: 'array', items: snapshotRef } } },
      202: { type: 'object', properties: { jobs: { type: 'array', items: snapshotRef } } },
      ...errors(400, 401, 413, 415, 422, 429, 503),
    },
  },
  signal: {
    summary: 'Send a signal to a job (its body, any JSON, is the payload; empty: null)',
    tags: ['jobs'],
    params: pathParams({ id: jobIdParam, name: signalNameParam }),
    response: {
      202: { type: 'object', properties: { jobId: { type: 'string' }, name: { type: 'string' }, resumed: { type: 'boolean' } } },
      ...errors(400, 401, 404, 409, 413, 415, 422),
    },
  },
  get: { summary: 'Get a job', tags: ['jobs'], params: idParams, querystring: tenantQuery, response: { 200: snapshotRef, ...errors(400, 401, 403, 404, 410) } },
  list: {
    summary: 'List jobs, newest first',
    tags: ['jobs'],
    querystring: query({
      status: { ...stateListParam, description: 'one status or several, comma-separated' },
      type: orEmpty(taskTypeParam),
      parentId: { ...orEmpty(jobIdParam), description: "only this job's children (ctx.spawn), oldest first" },
      q: { ...textParam(MAX_LIST_TEXT), description: `only jobs whose id or metadata (as JSON text) contains this text; letters A to Z without case; at most ${MAX_LIST_TEXT} characters` },
      tenant: tenantOrAllParam,
      limit: pageLimitParam(50),
      cursor: cursorParam,
    }),
    response: {
      200: { type: 'object', properties: { items: { type: 'array', items: snapshotRef }, nextCursor: nullableString } },
      ...errors(400, 401, 403),
    },
  },
  cancel: { summary: 'Cancel a job', tags: ['jobs'], params: idParams, querystring: tenantQuery, response: { 202: snapshotRef, ...errors(400, 401, 403, 404, 409) } },
  retry: {
    summary: 'Retry a failed or cancelled job',
    tags: ['jobs'],
    params: idParams,
    querystring: tenantQuery,
    response: { 202: snapshotRef, ...errors(400, 401, 403, 404, 409) },
  },
  checkpoint: {
    summary: "A job's last saved checkpoint",
    tags: ['jobs'],
    params: idParams,
    querystring: tenantQuery,
    response: {
      200: {
        type: 'object',
        required: ['checkpoint'],
        properties: {
          checkpoint: {
            anyOf: [
              { type: 'null' },
              { type: 'object', required: ['version', 'data', 'corrupt'], properties: { version: { type: 'integer' }, data: {}, corrupt: { type: 'boolean' } } },
            ],
          },
        },
      },
      ...errors(400, 401, 403, 404),
    },
  },
  transitions: {
    summary: "A job's transition log",
    tags: ['jobs'],
    params: idParams,
    querystring: tenantQuery,
    response: {
      200: itemList({
        from: nullableString,
        to: { type: 'string' },
        at: { type: 'string', format: 'date-time' },
        reason: { type: 'string' },
        attempt: { type: 'integer' },
        workerId: nullableString,
      }),
      ...errors(400, 401, 403, 404),
    },
  },
  webhooks: {
    summary: "A job's webhook delivery log",
    tags: ['jobs'],
    params: idParams,
    querystring: tenantQuery,
    response: {
      200: itemList({
        deliveryId: { type: 'string' },
        event: { type: 'string' },
        attempt: { type: 'integer' },
        at: { type: 'string', format: 'date-time' },
        url: { type: 'string' },
        status: { type: ['integer', 'null'] },
        ok: { type: 'boolean' },
        error: nullableString,
        durationMs: { type: 'integer' },
        response: nullableString,
      }),
      ...errors(400, 401, 403, 404),
    },
  },
  jobEvents: {
    summary: 'Server-Sent Events of one job',
    tags: ['streams'],
    params: idParams,
    querystring: query({ token: streamTokenParam, tenant: tenantParam }),
  },
  feed: {
    summary: "Server-Sent Events of every change to the tenant's jobs",
    tags: ['streams'],
    querystring: query({ token: streamTokenParam, tenant: tenantParam }),
  },
  streamToken: {
    summary: 'Mint a short-lived token for EventSource / WebSocket',
    tags: ['streams'],
    body: {
      type: 'object',
      additionalProperties: false,
      properties: {
        jobs: { type: 'array', items: { type: 'string', maxLength: 64 }, minItems: 1, maxItems: 1000 },
        all: { type: 'boolean' },
        ttlSeconds: { type: 'integer', minimum: 1, maximum: 3600 },
      },
    },
    response: { 201: { type: 'object', properties: { token: { type: 'string' }, expiresAt: { type: 'string', format: 'date-time' } } }, ...errors(400, 401) },
  },
  stats: { summary: 'Counts, rates and durations', tags: ['ops'] },
  whoami: {
    summary: "The caller's tenant, and whether it is an admin (may name other tenants with tenant=)",
    tags: ['ops'],
    response: {
      200: {
        type: 'object',
        required: ['tenant', 'admin', 'tenants'],
        properties: {
          tenant: { type: 'string' },
          admin: { type: 'boolean', description: 'a tenant in LONGHAUL_ADMIN_TENANTS, or any caller of a server without API keys' },
          tenants: { type: 'array', items: { type: 'string' }, description: "admins: the tenants of the configured API keys (suggestions, not every tenant that has jobs); others: their own" },
        },
      },
      ...errors(401),
    },
  },
  scheduleCreate: {
    summary: 'Create a schedule',
    tags: ['schedules'],
    body: scheduleBodySchema,
    response: { 201: scheduleView, ...errors(400, 401, 409, 413, 415, 422, 429) },
  },
  scheduleList: { summary: "List the tenant's schedules, by name", tags: ['schedules'], response: { 200: { type: 'object', properties: { items: { type: 'array', items: scheduleView } } }, ...errors(401) } },
  scheduleGet: { summary: 'Get a schedule with its next five runs', tags: ['schedules'], params: nameParams, response: { 200: scheduleView, ...errors(401, 404) } },
  scheduleUpdate: {
    summary: 'Change a schedule (not one declared in the tasks module: 409)',
    tags: ['schedules'],
    params: nameParams,
    body: { type: 'object', additionalProperties: false, properties: scheduleFields },
    response: { 200: scheduleView, ...errors(400, 401, 404, 409, 413, 415, 422) },
  },
  schedulePause: { summary: 'Pause a schedule', tags: ['schedules'], params: nameParams, response: { 200: scheduleView, ...errors(401, 404) } },
  scheduleResume: { summary: 'Resume a schedule from its next tick', tags: ['schedules'], params: nameParams, response: { 200: scheduleView, ...errors(401, 404) } },
  scheduleDelete: { summary: 'Delete a schedule (its runs are left alone)', tags: ['schedules'], params: nameParams, response: { ...errors(401, 404) } },
  scheduleTrigger: { summary: 'Submit one run now', tags: ['schedules'], params: nameParams, response: { 202: snapshotRef, ...errors(401, 404, 422, 503) } },
} as const;
