/**
 * The one HTTP error type: everything the API refuses is rendered by `sendProblem` as an
 * RFC 9457 problem+json document with a stable `code`.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { isTransientStoreError } from '../core/store-errors.js';
import { patternMessage } from './params.js';
import { BatchItemError, InputValidationError, InvalidOptionsError, InvalidScheduleError, LonghaulError, QueueFullError, ScheduleTooFrequentError, TenantQuotaExceededError, UnstorableValueError, UploadQuotaExceededError } from '../core/errors.js';

export interface FieldError {
  path: string;
  message: string;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  410: 'Gone',
  413: 'Content Too Large',
  414: 'URI Too Long',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    detail: string,
    readonly extra: { errors?: FieldError[]; retryAfterSeconds?: number; /** Extension members of the document (`reason` of /readyz). */ members?: Record<string, string> } = {},
  ) {
    super(detail);
    this.name = 'HttpProblem';
  }
}

function slug(code: string): string {
  return code.toLowerCase().replaceAll('_', '-');
}

/** The RFC 9457 document of a problem. */
export function problemBody(problem: HttpProblem, instance?: string): Record<string, unknown> {
  return {
    type: `urn:longhaul:problem:${slug(problem.code)}`,
    title: TITLES[problem.status] ?? 'Error',
    status: problem.status,
    detail: problem.message,
    code: problem.code,
    ...(instance ? { instance } : {}),
    ...(problem.extra.errors ? { errors: problem.extra.errors } : {}),
    ...problem.extra.members,
  };
}

export function sendProblem(reply: FastifyReply, problem: HttpProblem, instance?: string): FastifyReply {
  if (problem.extra.retryAfterSeconds !== undefined) reply.header('Retry-After', String(problem.extra.retryAfterSeconds));
  return reply.code(problem.status).type('application/problem+json').send(problemBody(problem, instance));
}

/**
 * `400 INVALID_REQUEST`: a field of the request (body, query or path parameter) has a value the
 * API refuses; `errors` names the fields. The one code for that kind of mistake, whichever layer
 * found it (the route schema, the route, or the library behind it).
 */
export function invalidRequest(detail: string, errors: FieldError[] = []): HttpProblem {
  return new HttpProblem(400, 'INVALID_REQUEST', detail, errors.length > 0 ? { errors } : {});
}

/** Maps any thrown value to a problem; unknown errors become a 500 without internals. */
export function toProblem(err: unknown): HttpProblem {
  if (err instanceof HttpProblem) return err;
  // A batch's refused job: the problem its own submission would have got, under its index.
  if (err instanceof BatchItemError) {
    const single = toProblem(err.cause);
    const at = `jobs[${err.index}]`;
    const errors = single.extra.errors?.map((e) => ({ path: e.path ? `${at}.${e.path}` : at, message: e.message }));
    return new HttpProblem(single.status, single.code, `${at}: ${single.message}`, errors ? { errors } : {});
  }
  if (err instanceof InputValidationError) return new HttpProblem(422, err.code, err.message, { errors: err.issues });
  if (err instanceof InvalidScheduleError) return new HttpProblem(422, err.code, err.message, { errors: err.issues });
  if (err instanceof UnstorableValueError) return new HttpProblem(err.status, err.code, err.message, { errors: [{ path: err.path, message: err.issue }] });
  if (err instanceof QueueFullError) return new HttpProblem(503, err.code, err.message, { retryAfterSeconds: 5 });
  if (err instanceof TenantQuotaExceededError) return new HttpProblem(429, err.code, err.message, { retryAfterSeconds: err.retryAfterSeconds });
  if (err instanceof UploadQuotaExceededError) return new HttpProblem(429, err.code, err.message, { retryAfterSeconds: err.retryAfterSeconds });
  if (err instanceof ScheduleTooFrequentError) return new HttpProblem(422, err.code, err.message, { errors: err.details as FieldError[] });
  // Over HTTP a bad option is a bad request field like any other: one code, the field named.
  if (err instanceof InvalidOptionsError) return invalidRequest(err.message, err.field === undefined ? [] : [{ path: err.field, message: err.message }]);
  if (err instanceof LonghaulError) return new HttpProblem(err.status, err.code, err.message);
  const fe = err as FastifyError;
  if (fe && Array.isArray(fe.validation)) {
    const errors = fe.validation.map((v) => ({
      path: (v.instancePath ?? '').replace(/^\//, '').replaceAll('/', '.') || String((v.params as { missingProperty?: string })?.missingProperty ?? ''),
      message:
        v.keyword === 'additionalProperties'
          ? `unknown field "${String((v.params as { additionalProperty?: string }).additionalProperty)}"`
          : v.keyword === 'required'
            ? `"${String((v.params as { missingProperty?: string }).missingProperty)}" is required`
            : v.keyword === 'enum'
              ? `must be one of ${((v.params as { allowedValues?: unknown[] }).allowedValues ?? []).map(String).join(', ')}`
              : v.keyword === 'pattern'
                ? (patternMessage(String((v.params as { pattern?: string }).pattern)) ?? v.message ?? 'is invalid')
                : (v.message ?? 'is invalid'),
    }));
    const where = fe.validationContext === 'body' ? 'request body' : (fe.validationContext ?? 'request');
    return invalidRequest(`${where} is invalid: ${errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join('; ')}`, errors);
  }
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    const codes: Record<number, string> = { 400: 'BAD_REQUEST', 404: 'NOT_FOUND', 405: 'METHOD_NOT_ALLOWED', 413: 'PAYLOAD_TOO_LARGE', 414: 'URI_TOO_LONG', 415: 'UNSUPPORTED_MEDIA_TYPE' };
    return new HttpProblem(fe.statusCode, codes[fe.statusCode] ?? 'BAD_REQUEST', fe.message);
  }
  // The database could not be reached or was busy: the same request succeeds later.
  if (isTransientStoreError(err)) return new HttpProblem(503, 'DATABASE_UNAVAILABLE', 'the database is not answering; try again', { retryAfterSeconds: 2 });
  return new HttpProblem(500, 'INTERNAL', 'internal error');
}

/**
 * 503s for a database that does not answer are logged at most once per this many ms, with how
 * many were answered since the last line: under traffic, an outage would log every request.
 */
const UNAVAILABLE_LOG_EVERY_MS = 10_000;
const unavailable = { loggedAt: Number.NEGATIVE_INFINITY, answered: 0 };

export function problemHandler(err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const problem = toProblem(err);
  if (problem.status >= 500 && problem.code === 'INTERNAL') request.log.error({ err }, 'unhandled error');
  else if (problem.code === 'DATABASE_UNAVAILABLE') {
    unavailable.answered++;
    const now = Date.now();
    if (now - unavailable.loggedAt >= UNAVAILABLE_LOG_EVERY_MS) {
      request.log.warn({ err, url: request.url, answered: unavailable.answered }, 'database unavailable: answered 503');
      unavailable.loggedAt = now;
      unavailable.answered = 0;
    }
  }
  return sendProblem(reply, problem, request.url.split('?')[0]);
}
