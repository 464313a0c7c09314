/**
 * The kinds of query and path parameters the v1 routes take, one JSON Schema each (ids, names,
 * tenants, task types, limits, cursors, times, free text). Every route's `params` and
 * `querystring` schema is built from these, so Fastify refuses a value outside them (400
 * INVALID_REQUEST naming the parameter) before a route or a store sees it, and /openapi.json
 * documents the rule. Each rule is what both stores can hold: no U+0000 (PostgreSQL refuses it
 * in text), no number past what a 64-bit column or a Date holds, no id that is not a UUID (a
 * PostgreSQL `uuid` column refuses one). Query strings that are not valid UTF-8 once
 * percent-decoded are refused before validation (query-string.ts).
 */
import { MAX_PAGE_LIMIT } from '../core/limits.js';

/** A pattern and the words a refusal says about it (Ajv's own would quote the expression). */
const patterns = new Map<string, string>();
function rule(pattern: string, message: string): string {
  const known = patterns.get(pattern);
  if (known !== undefined && known !== message) throw new Error(`params: two messages for the pattern ${pattern}`);
  patterns.set(pattern, message);
  return pattern;
}

/** Task types and schedule names (task-api/define.ts, core/schedule.ts). */
const NAME = rule('^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$', 'must be 1 to 128 letters, digits or . _ : - characters, starting with a letter or digit');

/** The sentence for a value a parameter's `pattern` refused, or undefined for a pattern not declared here. */
export function patternMessage(pattern: string): string | undefined {
  return patterns.get(pattern);
}

/**
 * One or more characters, none of them U+0000 (PostgreSQL's text cannot hold it). Other control
 * characters are stored as given (docs/api.md, "Strings Longhaul stores"): an error code or
 * metadata may hold a tab, and a filter must be able to name it. A lone surrogate cannot come
 * through a query string that decodes as UTF-8 (query-string.ts refuses one that does not).
 */
const STORABLE = rule('^[^\\u0000]+$', 'must not contain U+0000');
/** Like STORABLE, and empty too. */
const STORABLE_OR_EMPTY = rule('^[^\\u0000]*$', 'must not contain U+0000');

const UUID = rule('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$', 'must be an id as the server gave it: a UUID in lower-case hex');

/** A job's id (path `{id}`, `parentId`). */
export const jobIdParam = { type: 'string', pattern: UUID, description: 'a job id (a UUID, lower-case hex, as the server gave it)' } as const;

/** An upload's id. */
export const uploadIdParam = { type: 'string', pattern: UUID, description: 'an upload id (a UUID, lower-case hex)' } as const;

/** A schedule's name: the rule of core/schedule.ts. */
export const scheduleNameParam = {
  type: 'string',
  pattern: NAME,
  description: 'a schedule name: 1 to 128 letters, digits and . _ : -, starting with a letter or digit',
} as const;

/** A signal's name: the rule of core/limits.ts (`signalNameProblem`). */
export const signalNameParam = {
  type: 'string',
  pattern: rule('^[A-Za-z0-9._:-]{1,128}$', 'must be a signal name: 1 to 128 letters, digits or . _ : - characters'),
  description: 'letters, digits and . _ : -, 1 to 128',
} as const;

/** A result file's name: the rule of blobs/results.ts. */
export const resultNameParam = {
  type: 'string',
  pattern: rule('^[A-Za-z0-9._-]{1,200}$', 'must be a result file name: 1 to 200 letters, digits or . _ - characters'),
  description: 'the file name: 1 to 200 letters, digits and . _ -',
} as const;

/** An admin's `tenant` on one job's routes (tenant-scope.ts checks who may name one). */
export const tenantParam = {
  type: 'string',
  minLength: 1,
  maxLength: 200,
  pattern: STORABLE,
  description: "admins only: another tenant's jobs (default: the caller's). A tenant key naming another tenant gets 403",
} as const;

/** An admin's `tenant` on listings: one tenant, or `*` for every tenant's. */
export const tenantOrAllParam = {
  ...tenantParam,
  description: "admins only: another tenant's jobs, or * for every tenant's (default: the caller's). A tenant key naming another tenant gets 403",
} as const;

/** A task type as a filter: the rule of task-api/define.ts. */
export const taskTypeParam = {
  type: 'string',
  pattern: NAME,
  description: 'a task type: 1 to 128 letters, digits and . _ : -, starting with a letter or digit',
} as const;

/** An error code as a filter. */
export const errorCodeParam = { type: 'string', minLength: 1, maxLength: 200, pattern: STORABLE, description: "the failed job's error code" } as const;

/** Job states, comma-separated (the route names any unknown one). */
export const stateListParam = {
  type: 'string',
  maxLength: 200,
  pattern: rule('^[a-z, ]*$', 'must be job states, comma-separated'),
} as const;

/**
 * A page size from 1 to `max` (a power of ten: the pattern says it), in decimal without a sign
 * or leading zero; `fallback` when absent.
 */
export function limitParam(max: number, fallback: number) {
  const digits = String(max).length;
  if (max !== 10 ** (digits - 1) || digits < 2) throw new Error(`limitParam: ${max} is not a power of ten`);
  return {
    type: 'string',
    pattern: rule(`^(?:[1-9][0-9]{0,${digits - 2}}|${max})$`, `must be an integer from 1 to ${max}`),
    description: `an integer from 1 to ${max}, default ${fallback}`,
  } as const;
}

/** A page of jobs or attempts: 1 to MAX_PAGE_LIMIT. */
export const pageLimitParam = (fallback: number) => limitParam(MAX_PAGE_LIMIT, fallback);

/** An opaque page cursor (base64url), the `nextCursor` of an earlier page; empty: the first page. */
export const cursorParam = {
  type: 'string',
  pattern: rule('^[A-Za-z0-9_-]{0,200}$', 'must be the nextCursor of an earlier page, unchanged'),
  description: 'the nextCursor of the previous page',
} as const;

/** The cursor of a job's attempts (a number, opaque to clients all the same); empty: the first page. */
export const attemptCursorParam = {
  type: 'string',
  pattern: rule('^[0-9]{0,10}$', 'must be the nextCursor of an earlier page, unchanged'),
  description: 'the nextCursor of the previous page',
} as const;

/**
 * A time: ms since the epoch (at most 15 digits, before the year 33658), or an ISO 8601 date or
 * date-time (the route refuses one that is not a real date).
 */
export const timeParam = {
  type: 'string',
  maxLength: 40,
  pattern: rule(
    '^(?:[0-9]{1,15}|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\\.[0-9]{1,9})?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?)$',
    'must be an ISO 8601 date-time (2024-05-01T12:00:00Z) or ms since the epoch (at most 15 digits)',
  ),
  description: 'ISO 8601 date-time, or ms since the epoch',
} as const;

/** Free text to search for. */
export function textParam(maxLength: number) {
  return { type: 'string', maxLength, pattern: STORABLE_OR_EMPTY } as const;
}

/** A stream token (`POST /v1/stream-tokens`), for EventSource and WebSocket clients that cannot send headers. */
export const streamTokenParam = {
  type: 'string',
  maxLength: 16_384,
  pattern: rule('^[A-Za-z0-9_.-]*$', 'must be a stream token as the server gave it'),
  description: 'a stream token (POST /v1/stream-tokens), instead of an API key',
} as const;

/** The parts of a signed URL (`exp`, `sig`): any wrong value is a 403 of the route, so only bounded here. */
export const signedUrlPartParam = { type: 'string', maxLength: 256 } as const;

/** The parameter, or empty (a filter left blank: no filter). */
export function orEmpty<P extends { pattern: string; description?: string }>(param: P): P {
  const inner = param.pattern.replace(/^\^/, '').replace(/\$$/, '');
  const message = patternMessage(param.pattern) ?? 'is invalid';
  return { ...param, pattern: rule(`^(?:${inner})?$`, `${message}, or empty`) };
}

/** A query string schema of these parameters. */
export function query<P extends Record<string, unknown>>(properties: P) {
  return { type: 'object', properties } as const;
}

/** A path parameters schema: every one is required. */
export function pathParams<P extends Record<string, unknown>>(properties: P) {
  return { type: 'object', required: Object.keys(properties), properties } as const;
}
