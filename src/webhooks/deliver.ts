/**
 * One webhook delivery attempt: checks the URL again (the SSRF guard, as DNS may have changed
 * since submission), POSTs the signed JSON body to exactly the addresses it checked (a custom
 * `lookup` pins the connection, while the Host header and TLS server name stay the URL's host),
 * never follows redirects, and gives up after `timeoutMs` for the whole exchange.
 */
import type { LookupFunction } from 'node:net';
import http from 'node:http';
import https from 'node:https';
import { performance } from 'node:perf_hooks';
import { webhookHeaders } from './signing.js';
import { type Allowlist, checkWebhookUrl, type ResolvedAddress, type Resolver } from './ssrf.js';

export interface DeliverParams {
  url: string;
  /** `whsec_<base64>`; never logged or returned. */
  secret: string;
  /** Sent as JSON (a string is sent as is). */
  payload: unknown;
  /** The `webhook-id`: the same for every attempt of one event. */
  id: string;
  timeoutMs?: number;
  allowlist?: Allowlist;
  /** DNS resolution (tests inject one). */
  resolve?: Resolver;
  /** Unix seconds for `webhook-timestamp`; default now. */
  timestamp?: number;
  userAgent?: string;
}

export interface DeliveryResult {
  /** A 2xx answer. */
  ok: boolean;
  /** HTTP status, null when no response arrived. */
  status: number | null;
  /** The receiver answered 410 Gone: stop sending to it. */
  gone: boolean;
  /** The SSRF guard refused the URL at delivery time (no request was sent). */
  refused: boolean;
  /** What went wrong (non-2xx, network error, timeout, refusal), or null. */
  error: string | null;
  durationMs: number;
  /** The start of the response body (at most 1 KiB), for the delivery log. */
  responseSnippet: string | null;
}

export const DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000;
const SNIPPET_BYTES = 1024;
const MAX_READ_BYTES = 64 * 1024;

export async function deliverWebhook(params: DeliverParams): Promise<DeliveryResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const check = await checkWebhookUrl(params.url, {
    ...(params.allowlist ? { allowlist: params.allowlist } : {}),
    ...(params.resolve ? { resolve: params.resolve } : {}),
  });
  if (!check.ok) {
    return { ok: false, status: null, gone: false, refused: true, error: `refused: ${check.reason}`, durationMs: elapsed(), responseSnippet: null };
  }
  const body = typeof params.payload === 'string' ? params.payload : JSON.stringify(params.payload);
  const timestamp = params.timestamp ?? Math.floor(Date.now() / 1000);
  const headers = {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    'user-agent': params.userAgent ?? 'Longhaul-Webhooks/1',
    ...webhookHeaders({ id: params.id, timestamp, body, secret: params.secret }),
  };
  try {
    const { status, snippet, location } = await post(check.url, check.hostname, check.addresses, headers, body, params.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS);
    const ok = status >= 200 && status < 300;
    let error: string | null = null;
    if (!ok)
      error =
        status >= 300 && status < 400 ? `redirect (${status}${location ? ` to ${location.slice(0, 200)}` : ''}) not followed` : `receiver answered ${status}`;
    return { ok, status, gone: status === 410, refused: false, error, durationMs: elapsed(), responseSnippet: snippet };
  } catch (err) {
    return { ok: false, status: null, gone: false, refused: false, error: (err as Error).message, durationMs: elapsed(), responseSnippet: null };
  }
}

/** A `lookup` that answers only with the addresses the guard checked. */
function pinnedLookup(addresses: readonly ResolvedAddress[]): LookupFunction {
  return ((_hostname: string, options: { all?: boolean; family?: number | string }, callback: (...args: unknown[]) => void) => {
    const family = options?.family === 4 || options?.family === 'IPv4' ? 4 : options?.family === 6 || options?.family === 'IPv6' ? 6 : 0;
    const usable = family === 0 ? addresses : addresses.filter((a) => a.family === family);
    if (usable.length === 0) {
      const err = Object.assign(new Error(`no checked IPv${family} address`), { code: 'ENOTFOUND' });
      return process.nextTick(callback, err);
    }
    if (options?.all)
      return process.nextTick(
        callback,
        null,
        usable.map((a) => ({ address: a.address, family: a.family })),
      );
    const first = usable[0] as ResolvedAddress;
    process.nextTick(callback, null, first.address, first.family);
  }) as LookupFunction;
}

function post(
  url: URL,
  hostname: string,
  addresses: readonly ResolvedAddress[],
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
): Promise<{ status: number; snippet: string; location: string | null }> {
  return new Promise((resolve, reject) => {
    const secure = url.protocol === 'https:';
    const options: https.RequestOptions = {
      method: 'POST',
      hostname,
      port: url.port === '' ? (secure ? 443 : 80) : Number(url.port),
      path: `${url.pathname}${url.search}`,
      headers,
      lookup: pinnedLookup(addresses),
      // A fresh connection each time: a pooled socket could have been opened to another address.
      // (TLS verifies the certificate against the URL's host, which Node also sends as SNI.)
      agent: false,
      ...(url.username !== '' ? { auth: `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}` } : {}),
    };
    let settled = false;
    const finish = (err: Error | null, value?: { status: number; snippet: string; location: string | null }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(value as { status: number; snippet: string; location: string | null });
    };
    const req = (secure ? https : http).request(options, (res) => {
      const chunks: Buffer[] = [];
      let read = 0;
      res.on('data', (chunk: Buffer) => {
        read += chunk.length;
        if (chunks.reduce((n, c) => n + c.length, 0) < SNIPPET_BYTES) chunks.push(chunk);
        // Enough for the log; the rest of a huge answer is not worth waiting for.
        if (read > MAX_READ_BYTES) done();
      });
      const done = () => {
        const snippet = Buffer.concat(chunks).subarray(0, SNIPPET_BYTES).toString('utf8');
        const location = typeof res.headers.location === 'string' ? res.headers.location : null;
        finish(null, { status: res.statusCode ?? 0, snippet, location });
        res.destroy();
      };
      res.on('end', done);
      res.on('error', (err) => finish(err));
    });
    const timer = setTimeout(() => {
      const err = new Error(`timed out after ${timeoutMs} ms`);
      finish(err);
      req.destroy(err);
    }, timeoutMs);
    req.on('error', (err) => finish(err));
    req.end(body);
  });
}
