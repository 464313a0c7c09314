/**
 * The dead-letter requests of the client (docs/client.md): attempts, groups and pages of failed
 * jobs, bulk replay and discard, task types. How each builds its query or body; the client
 * sends them (client.ts).
 */
import type { DeadLetterSelection } from '../core/api-types.js';
import type { RequestOptions } from './options.js';

/**
 * Which failed jobs to act on or list; times may be Dates. `tenant` (admins): another tenant, or
 * '*' for all. `code: null`: the jobs that failed without an error code (their group's `code`).
 */
export interface DeadLetterFilter extends Omit<DeadLetterSelection, 'failedAfter' | 'failedBefore' | 'ids'> {
  /** Failed at or after this time. */
  failedAfter?: Date | string | number;
  /** Failed before this time. */
  failedBefore?: Date | string | number;
}

/** A bulk operation's selection: a filter, and/or `ids` (at most 1000). */
export interface DeadLetterRequest extends DeadLetterFilter, RequestOptions {
  ids?: string[];
}

export interface DeadLetterListOptions extends DeadLetterFilter, RequestOptions {
  limit?: number;
  cursor?: string | null;
}

export interface AttemptListOptions extends RequestOptions {
  limit?: number;
  cursor?: string | null;
}

function time(value: Date | string | number): string {
  return value instanceof Date ? value.toISOString() : String(value);
}

/** The query of a listing: the filter, `limit` and `cursor`. */
export function deadLetterQuery(options: DeadLetterListOptions): URLSearchParams {
  const query = new URLSearchParams();
  for (const key of ['tenant', 'type'] as const) {
    const v = options[key];
    if (v !== undefined) query.set(key, v);
  }
  // A query string has no null: the group without an error code is `noCode=true`.
  if (options.code === null) query.set('noCode', 'true');
  else if (options.code !== undefined) query.set('code', options.code);
  if (options.failedAfter !== undefined) query.set('failedAfter', time(options.failedAfter));
  if (options.failedBefore !== undefined) query.set('failedBefore', time(options.failedBefore));
  if (options.limit !== undefined) query.set('limit', String(options.limit));
  if (options.cursor) query.set('cursor', options.cursor);
  return query;
}

/** The JSON body of a bulk operation. */
export function deadLetterBody(request: DeadLetterRequest): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const key of ['tenant', 'type', 'code'] as const) {
    const v = request[key];
    if (v !== undefined) body[key] = v;
  }
  if (request.failedAfter !== undefined) body.failedAfter = time(request.failedAfter);
  if (request.failedBefore !== undefined) body.failedBefore = time(request.failedBefore);
  if (request.ids !== undefined) body.ids = request.ids;
  return body;
}

/** The query of an attempts page. */
export function attemptQuery(options: AttemptListOptions): URLSearchParams {
  const query = new URLSearchParams();
  if (options.limit !== undefined) query.set('limit', String(options.limit));
  if (options.cursor) query.set('cursor', options.cursor);
  return query;
}
