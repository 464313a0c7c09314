/**
 * The query string parser of the app: Fastify's default keeps a percent-escape that does not
 * decode to UTF-8 (`%C3%28`, `%FF`) as its raw text, which a route would then take for the
 * value. This parser decodes strictly and marks the query it returns instead; the
 * `refuseBadQueryEncoding` hook answers such a request 400 INVALID_REQUEST naming the parameter,
 * after authentication and before the route's schema.
 */
import { parse } from 'node:querystring';
import type { FastifyRequest } from 'fastify';
import { invalidRequest } from './problem.js';

/** Set on a parsed query whose text held an escape that is not UTF-8: the first such key or value. */
const BAD_ENCODING = Symbol('longhaul.badQueryEncoding');

type ParsedQuery = Record<string, string | string[]> & { [BAD_ENCODING]?: string };

/** `routerOptions.querystringParser`: like Fastify's default (`+` is a space, repeated keys an array), but strict about UTF-8. */
export function parseQueryString(text: string): Record<string, unknown> {
  let bad: string | undefined;
  const decode = (s: string): string => {
    if (!s.includes('%')) return s;
    try {
      return decodeURIComponent(s);
    } catch {
      bad ??= s;
      return s;
    }
  };
  const query = parse(text, '&', '=', { decodeURIComponent: decode, maxKeys: 1000 }) as ParsedQuery;
  if (bad !== undefined) query[BAD_ENCODING] = bad;
  return query;
}

/** A global `preValidation` hook: refuses a query string marked by `parseQueryString`, naming the parameter. */
export function refuseBadQueryEncoding(request: FastifyRequest, _reply: unknown, done: (err?: Error) => void): void {
  const query = request.query as ParsedQuery | undefined;
  const bad = query?.[BAD_ENCODING];
  if (bad === undefined) {
    done();
    return;
  }
  // Undecodable text is kept as it came: the key that holds it, or is it.
  const key = Object.entries(query as ParsedQuery).find(([k, v]) => k === bad || v === bad || (Array.isArray(v) && v.includes(bad)))?.[0] ?? '';
  const message = 'is not valid UTF-8 once percent-decoded: encode text as UTF-8, then percent-encode its bytes';
  done(invalidRequest(`query parameter ${JSON.stringify(key.slice(0, 40))} ${message}`, [{ path: key.slice(0, 200), message }]));
}
