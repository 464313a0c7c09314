/**
 * The HTTP API (DESIGN §4) on Fastify: builds the app around an open Longhaul instance.
 * Routes live in routes/; this file wires parsing, auth, errors and OpenAPI.
 */
import type { Socket } from 'node:net';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { Longhaul } from '../longhaul.js';
import { type ApiKey, bearerToken, type Caller, DEFAULT_CALLER } from './auth.js';
import { KeyCheck } from './key-check.js';
import type { ApiKeyCaller } from '../facade/api-keys.js';
import { AuthThrottle, type AuthThrottleOptions } from './auth-throttle.js';
import { BrowserGuard } from './browser-guard.js';
import { ConnectionLimits, type HttpLimits, type RefusalReason } from './http-limits.js';
import { clientErrorHandler, sendShuttingDown } from './client-errors.js';
import { type DashboardOptions, registerDashboard } from './dashboard.js';
import type { AppContext } from './context.js';
import { FeedHub, JobHub } from './hub.js';
import { HttpProblem, invalidRequest, problemHandler, sendProblem } from './problem.js';
import { registerJobRoutes } from './routes/jobs.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerOpsRoutes } from './routes/ops.js';
import { type ResultRouteOptions, registerResultRoutes } from './routes/results.js';
import { registerStreamRoutes, webSocketSession } from './routes/streams.js';
import { registerUploadRoutes, type UploadRouteOptions } from './routes/uploads.js';
import { registerScheduleRoutes } from './routes/schedules.js';
import { registerPurgeRoutes } from './routes/purge.js';
import { registerDeadLetterRoutes } from './routes/dead-letters.js';
import { registerWorkflowRoutes } from './routes/workflow.js';
import { problemSchema, snapshotSchema } from './schemas.js';
import { parseQueryString, refuseBadQueryEncoding } from './query-string.js';
import { type StreamGrant, StreamTokens } from './stream-token.js';
import { type TenantScopeConfig, tenantScopeHook } from './tenant-scope.js';
import { acceptWebSockets } from './websocket.js';
import { DEFAULT_MAX_STREAMS_PER_TENANT, DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET, StreamLimits } from './stream-limits.js';
import { parseJson } from '../core/json-text.js';
import { redactUrl } from '../core/log-fields.js';
import { resourceQuotaFor } from '../core/quotas.js';
import { uploadBytesByTenant } from '../blobs/upload-quota.js';
import { jsonDepth, MAX_JSON_DEPTH } from '../core/limits.js';

export interface ServerOptions {
  lh: Longhaul;
  apiKeys?: ApiKey[];
  /** Tenants whose API keys are admin keys (`DELETE /v1/jobs`); see routes/purge.ts. */
  adminTenants?: readonly string[];
  /**
   * Check the API keys kept in the database (`longhaul keys create`; facade/api-keys.ts) besides
   * `apiKeys`. Default: when the database holds any key (revoked ones too) as the server is
   * built; a server started keyless stays keyless until restarted.
   */
  databaseKeys?: boolean;
  /** Request body limit in bytes (413 beyond). Default 1 MiB. */
  maxBodyBytes?: number;
  /** HMAC secret for stream tokens; random per process when unset. */
  streamTokenSecret?: string;
  /** SSE keepalive comment interval. Default 15 000 ms. */
  keepaliveMs?: number;
  /**
   * Bytes a stream (SSE response or WebSocket) may hold unsent for a client that does not read;
   * past it the connection is dropped (the client may reconnect, with `Last-Event-ID` for SSE).
   * Default 256 KiB.
   */
  streamBufferBytes?: number;
  /**
   * Streams (SSE responses and WebSocket connections together) one tenant may hold open; past
   * it, SSE gets 429 `TOO_MANY_STREAMS` and a WebSocket is closed with 1008 (LONGHAUL_MAX_STREAMS_PER_TENANT).
   * Default 100; see server/stream-limits.ts.
   */
  maxStreamsPerTenant?: number;
  /** Job subscriptions one WebSocket may hold (LONGHAUL_MAX_SUBSCRIPTIONS_PER_SOCKET). Default 1000. */
  maxSubscriptionsPerSocket?: number;
  /** Request time limits, idle keep-alive, the connection cap, transfers' minimum rate (server/http-limits.ts). */
  httpLimits?: Partial<HttpLimits>;
  /** Host names accepted without API keys besides loopback names and IP addresses (LONGHAUL_ALLOWED_HOSTS; server/browser-guard.ts). */
  allowedHosts?: readonly string[];
  /** Origins besides the server's own that may open WebSockets and send state-changing requests (LONGHAUL_ALLOWED_ORIGINS). */
  allowedOrigins?: readonly string[];
  /** Throttling of failed authentication per client address (server/auth-throttle.ts); `false`: none. */
  authThrottle?: AuthThrottleOptions | false;
  logger?: Logger | false;
  /** A bearer token that may read `GET /metrics` (LONGHAUL_METRICS_TOKEN); see routes/metrics.ts. */
  metricsToken?: string;
  /**
   * Uploads and result files. Default `true`: the Longhaul instance's blob storage and URL
   * signer (`lh.files()`); `false`: no upload or result routes; or explicit route options.
   */
  files?: (UploadRouteOptions & ResultRouteOptions) | boolean;
  /** The dashboard at `/` (server/dashboard.ts). Default `true`: the package's built files; `false`: none. */
  dashboard?: DashboardOptions | boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    tenant: string;
    /** Set when the request authenticated with a stream token instead of an API key. */
    grant: StreamGrant | null;
    /** An admin key's request (LONGHAUL_ADMIN_TENANTS, a database key made with --admin), or any request of a keyless server. */
    admin: boolean;
  }
}

// Fastify tests parser RegExps against the normalized header, parameters included
// (`application/json; charset="utf-8"`), so parameters must be allowed after the media type.
const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json(?:\s*;.*)?$/i;

export const DEFAULT_STREAM_BUFFER_BYTES = 256 * 1024;

/** How deeply a request body may nest: a batch's object, its array, a job, and a field one level over the library's limit. */
const BODY_DEPTH = MAX_JSON_DEPTH + 4;

/**
 * Why a parsed JSON body nests too deeply, or null: a guard for the stack of every recursive
 * consumer (serializers, hashing), with room for the depth the library allows `input`,
 * `metadata` and signal payloads (it refuses deeper ones itself, naming them). Over the guard,
 * a field of the body's object that is too deep is named, as the library would name it.
 */
function tooDeep(value: unknown): HttpProblem | null {
  // A batch carries each job two levels further down (`{"jobs": [job]}`): its fields get the
  // depth a single job's get, plus one, so that a field just too deep reaches the library, which
  // refuses it by name (`jobs[0].input`).
  if (jsonDepth(value, BODY_DEPTH + 1) <= BODY_DEPTH) return null;
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [field, v] of Object.entries(value)) {
      if (jsonDepth(v) > MAX_JSON_DEPTH) {
        const detail = `${field} nests deeper than ${MAX_JSON_DEPTH} levels`;
        return invalidRequest(detail, [{ path: field, message: detail }]);
      }
    }
  }
  return invalidRequest(`request body nests deeper than ${BODY_DEPTH} levels`);
}

/** What a request line says about the request: never its headers, and its URL with secrets redacted. */
function requestLogFields(req: FastifyRequest): Record<string, unknown> {
  return { method: req.method, url: redactUrl(req.url), host: req.host, remoteAddress: req.ip };
}

/** A server option that must be a positive integer: its value, the default when unset, or a TypeError naming it. */
function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) throw new TypeError(`${name} must be a positive integer (got ${String(value)})`);
  return value;
}

/** A route option's hooks as a list (Fastify takes one function or an array). */
function hookList<T>(hooks: T | T[] | undefined): T[] {
  return hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks];
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const keys = options.apiKeys ?? [];
  // LONGHAUL_API_KEYS, then the keys kept in the database once it holds any (key-check.ts).
  const databaseKeys = (options.databaseKeys ?? (await options.lh.apiKeys.inUse())) ? options.lh.apiKeys : null;
  const keyCheck = new KeyCheck(keys, new Set(options.adminTenants ?? []), databaseKeys);
  const app = Fastify({
    // Request lines name the URL without the query values that authorise it (signed URLs' sig, stream tokens).
    loggerInstance: (options.logger ? options.logger.child({}, { serializers: { req: requestLogFields } }) : undefined) as FastifyBaseLogger | undefined,
    bodyLimit: options.maxBodyBytes ?? 1024 * 1024,
    // Path parameters past this are a 414: room for a signal name (128 characters), none for junk.
    routerOptions: { maxParamLength: 160, querystringParser: parseQueryString },
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: true } },
    // Requests arriving while the server closes get a problem (the onRequest hook below), not
    // Fastify's plain JSON 503.
    return503OnClosing: false,
    // Malformed URLs (bad percent-encoding, over-long params) are problems like everything else.
    frameworkErrors: (err, request, reply) => problemHandler(err, request, reply),
    // So are requests Node's parser refuses before Fastify sees them (431, 408, 400).
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => {
      if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') refused('request_timeout');
      clientErrorHandler(err, socket);
    },
  });
  const metrics = options.lh.metrics;
  const refused = (reason: RefusalReason) => metrics.countHttpRefusal(reason);
  const limits = new ConnectionLimits(options.httpLimits ?? {}, refused, app.log);
  limits.attach(app.server);
  const guard = new BrowserGuard({
    checkHost: !keyCheck.enabled,
    ...(options.allowedHosts ? { allowedHosts: options.allowedHosts } : {}),
    ...(options.allowedOrigins ? { allowedOrigins: options.allowedOrigins } : {}),
  });
  const throttle = options.authThrottle === false ? null : new AuthThrottle(options.authThrottle ?? {}, app.log, () => refused('auth_throttled'));
  const maxStreamsPerTenant = positiveInteger('maxStreamsPerTenant', options.maxStreamsPerTenant, DEFAULT_MAX_STREAMS_PER_TENANT);
  const maxSubscriptionsPerSocket = positiveInteger('maxSubscriptionsPerSocket', options.maxSubscriptionsPerSocket, DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET);
  const ctx: AppContext = {
    lh: options.lh,
    hub: new JobHub(options.lh),
    feed: new FeedHub(options.lh),
    tokens: new StreamTokens(options.streamTokenSecret),
    keepaliveMs: options.keepaliveMs ?? 15_000,
    streamBufferBytes: options.streamBufferBytes ?? DEFAULT_STREAM_BUFFER_BYTES,
    authEnabled: keyCheck.enabled,
    adminTenants: new Set(options.adminTenants ?? []),
    keyTenants: [...new Set(keys.map((k) => k.tenant))].sort(),
    log: app.log,
    streams: new Set(),
    limits: new StreamLimits({
      maxStreamsPerTenant,
      onRefused: (kind) => metrics.streamRefused(kind),
      onOpenChange: (kind, delta) => metrics.streamOpenChange(kind, delta),
    }),
    maxSubscriptionsPerSocket,
    closing: false,
  };
  app.addHook('onRequest', (request, reply, done) => {
    if (ctx.closing) return sendShuttingDown(reply);
    // Connections past the cap serve health checks only (http-limits.ts); Host and Origin (browser-guard.ts).
    const limited = limits.admit(request.raw.socket, request.url.split('?')[0] as string, () => reply.header('Connection', 'close'));
    if (limited) return done(limited);
    const foreign = guard.check(request.method, request.headers.host, request.headers.origin);
    if (foreign) {
      refused(foreign.code === 'HOST_NOT_ALLOWED' ? 'host_not_allowed' : 'origin_not_allowed');
      return done(foreign);
    }
    done();
  });
  // A query string that is not UTF-8 once decoded (query-string.ts): after authentication, before the schema.
  app.addHook('preValidation', refuseBadQueryEncoding);

  app.removeAllContentTypeParsers();
  app.addContentTypeParser(JSON_TYPE, { parseAs: 'string' }, (_req, body, done) => {
    const text = body as string;
    if (text.trim() === '') return done(null, undefined);
    let value: unknown;
    try {
      value = parseJson(text);
    } catch (err) {
      return done(new HttpProblem(400, 'MALFORMED_JSON', `request body is not valid JSON: ${(err as Error).message}`), undefined);
    }
    // Absurdly deep values overflow the stack of every recursive consumer (serializers, hashing).
    // Each level of nesting takes at least two characters: short bodies need no walk.
    if (text.length > 2 * (MAX_JSON_DEPTH + 1)) {
      const problem = tooDeep(value);
      if (problem) return done(problem, undefined);
    }
    done(null, value);
  });
  // Any other media type is refused with 415 (raw uploads get their own parser later).
  app.addContentTypeParser('*', (_req, _payload, done) => {
    done(new HttpProblem(415, 'UNSUPPORTED_MEDIA_TYPE', 'request bodies must be JSON (Content-Type: application/json)'), undefined);
  });

  // Observability (and tests): how many jobs this process is watching for stream clients.
  app.decorate('jobHub', ctx.hub);

  app.setErrorHandler(problemHandler);
  // Unknown paths under /v1/ answer 401 before 404 to clients without a key, as routes do.
  app.setNotFoundHandler(
    {
      preHandler: (request, reply, done) => {
        if (ctx.authEnabled && request.url.startsWith('/v1/')) return authenticateApi(request, reply, done);
        done();
      },
    },
    (request, reply) => sendProblem(reply, new HttpProblem(404, 'NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}`)),
  );

  app.decorateRequest('tenant', 'default');
  app.decorateRequest('grant', null);
  app.decorateRequest('admin', false);
  // Who a request is: a stream token authenticates only the streams it names (checked by those
  // routes) and is refused anywhere else; otherwise the API key's tenant, or `default` when no
  // keys are configured. Shared by the hooks below and the WebSocket upgrade. A promise when a
  // database key must be read (key-check.ts).
  const keyCaller = (found: ApiKeyCaller | null): Caller | HttpProblem =>
    found ? { tenant: found.tenant, grant: null, admin: found.admin } : new HttpProblem(401, 'UNAUTHORIZED', 'API key is not valid');
  const authorize = (authorization: string | undefined, token: unknown, streamRoute: boolean): Caller | HttpProblem | Promise<Caller | HttpProblem> => {
    if (typeof token === 'string' && token !== '') {
      const grant = ctx.tokens.verify(token);
      if (!grant) return new HttpProblem(401, 'INVALID_TOKEN', 'stream token is invalid or expired');
      if (!streamRoute) return new HttpProblem(401, 'UNAUTHORIZED', 'stream tokens only open event streams; use an API key');
      return { tenant: grant.tenant, grant, admin: false };
    }
    if (!ctx.authEnabled) return DEFAULT_CALLER;
    const presented = bearerToken(authorization);
    if (!presented) return new HttpProblem(401, 'UNAUTHORIZED', 'missing Authorization: Bearer <api key>');
    const found = keyCheck.resolve(presented);
    return found instanceof Promise ? found.then(keyCaller) : keyCaller(found);
  };
  // Callback-style hooks: on every request, async hooks cost a promise round each.
  const authenticate = (streamRoute: boolean) => (request: FastifyRequest, _reply: unknown, done: (err?: Error) => void) => {
    // An address past its failed attempts is refused before its key is looked at (auth-throttle.ts).
    const throttled = throttle?.check(request.ip);
    if (throttled) return done(throttled);
    const settle = (caller: Caller | HttpProblem) => {
      if (caller instanceof HttpProblem) {
        if (caller.status === 401) throttle?.fail(request.ip, caller.code);
        return done(caller);
      }
      if (caller !== DEFAULT_CALLER) {
        request.tenant = caller.tenant;
        request.grant = caller.grant;
        request.admin = caller.admin;
      } else request.admin = true;
      done();
    };
    const caller = authorize(request.headers.authorization, (request.query as { token?: unknown } | undefined)?.token, streamRoute);
    // A database key read: its failure (the database not answering) is the request's error (503).
    if (caller instanceof Promise) return void caller.then(settle, done);
    settle(caller);
  };
  const authenticateStream = authenticate(true);
  const authenticateApi = authenticate(false);
  // Which routes authenticate is decided once, when each is registered, by the route's path
  // (the router decodes percent-escapes, so `/%761/jobs` reaches the /v1/jobs route and its
  // hook): per request, `request.routeOptions` builds a new object on every read.
  app.addHook('onRoute', (route) => {
    // HTTP metrics by route pattern (never the raw URL: ids would make unbounded series). A hook
    // per route knows its pattern without reading request.routeOptions on every request.
    const pattern = route.url ?? 'unknown';
    const observe = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      metrics.observeRequest(request.method, pattern, reply.statusCode, reply.elapsedTime / 1000);
      done();
    };
    route.onResponse = [...hookList(route.onResponse), observe];
    // Uploads and result downloads move bytes at a minimum rate instead of the request deadline.
    const direction = transferDirection(route.method, pattern);
    if (direction) {
      const transfer = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
        limits.transfer(request.raw, reply.raw, direction);
        done();
      };
      route.onRequest = [transfer, ...hookList(route.onRequest)];
    }
    if (!route.url?.startsWith('/v1/')) return;
    // Signed result URLs carry their own authorisation (checked by the route).
    if (route.config?.signedUrl) return;
    // An admin's `tenant` parameter (tenant-scope.ts), checked once the caller is known.
    const scoped = route.config?.tenantScope ? [tenantScopeHook(ctx, route.config.tenantScope)] : [];
    // Without API keys every request is the default tenant's: only streams read a token (it
    // may name the streams it opens); elsewhere there is nothing to check.
    if (!ctx.authEnabled && !route.config?.streamRoute) {
      if (scoped.length > 0) route.onRequest = [...scoped, ...hookList(route.onRequest)];
      return;
    }
    route.onRequest = [route.config?.streamRoute ? authenticateStream : authenticateApi, ...scoped, ...hookList(route.onRequest)];
  });

  app.addSchema(snapshotSchema);
  app.addSchema(problemSchema);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Longhaul API', version: 'v1', description: 'Long-running jobs: 202 Accepted, progress, results.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  registerOpsRoutes(app, ctx);
  registerMetricsRoute(app, ctx, { apiKeys: keys, ...(databaseKeys ? { databaseKeys } : {}), ...(options.metricsToken ? { metricsToken: options.metricsToken } : {}) });
  registerJobRoutes(app, ctx);
  registerWorkflowRoutes(app, ctx);
  registerScheduleRoutes(app, ctx);
  registerPurgeRoutes(app, ctx);
  registerDeadLetterRoutes(app, ctx);
  registerStreamRoutes(app, ctx);
  const files = options.files === undefined || options.files === true ? await filesOf(options.lh) : options.files;
  if (files) {
    await registerUploadRoutes(app, files);
    // longhaul_upload_bytes{tenant}: read from the ledger in the blob storage this server uploads to.
    metrics.reportUploadBytes(() => uploadBytesByTenant(files.blobs));
    registerResultRoutes(app, files);
  }
  if (options.dashboard !== false) await registerDashboard(app, options.dashboard === true || options.dashboard === undefined ? {} : options.dashboard);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  // WebSockets are served from the server's upgrade event, outside Fastify's request cycle.
  acceptWebSockets(app, {
    log: app.log,
    authorize: (request, token) => {
      const limited = limits.upgradeRefused(request.socket as Socket);
      if (limited) return limited;
      const foreign = guard.check('GET', request.headers.host, request.headers.origin, true);
      if (foreign) {
        refused(foreign.code === 'HOST_NOT_ALLOWED' ? 'host_not_allowed' : 'origin_not_allowed');
        return foreign;
      }
      const address = request.socket.remoteAddress;
      const throttled = throttle?.check(address);
      if (throttled) return throttled;
      const settle = (caller: Caller | HttpProblem) => {
        if (caller instanceof HttpProblem && caller.status === 401) throttle?.fail(address, caller.code);
        return caller;
      };
      const caller = authorize(request.headers.authorization, token, true);
      return caller instanceof Promise ? caller.then(settle) : settle(caller);
    },
    session: webSocketSession(ctx),
  });

  // Hijacked SSE responses keep their connections busy; end them before the server closes.
  app.addHook('preClose', (done) => {
    ctx.closing = true;
    for (const close of [...ctx.streams]) close();
    done();
  });
  app.addHook('onClose', async () => {
    ctx.hub.close();
    ctx.feed.close();
  });
  return app;
}

/** Whether a route is a transfer (http-limits.ts): an upload's body comes in, a result file goes out. */
function transferDirection(method: string | string[], url: string): 'in' | 'out' | null {
  const methods = Array.isArray(method) ? method : [method];
  if (url === '/v1/uploads' && methods.includes('POST')) return 'in';
  if (url === '/v1/jobs/:id/results/:name' && methods.includes('GET')) return 'out';
  return null;
}

/** The upload and result routes over the instance's blob storage; downloads are counted on the job. */
async function filesOf(lh: Longhaul): Promise<UploadRouteOptions & ResultRouteOptions> {
  const jf = await lh.files();
  return {
    blobs: jf.blobs,
    signer: await jf.signer(),
    maxUploadBytes: jf.limits.maxUploadBytes,
    uploadTtlMs: jf.limits.uploadTtlMs,
    uploadQuota: (tenant) => resourceQuotaFor(lh.config.tenantQuotas, tenant),
    onQuotaRefused: (quota) => lh.metrics.quotaRefused(quota),
    getResultFiles: (id, tenant) => lh.resultFiles(id, tenant),
    onDownload: (jobId, name) => lh.countDownload(jobId, name),
  };
}

declare module 'fastify' {
  interface FastifyContextConfig {
    streamRoute?: boolean;
    /** Takes an admin's `tenant` query parameter (tenant-scope.ts). */
    tenantScope?: TenantScopeConfig;
  }
  interface FastifyInstance {
    /** The per-job subscription hub shared by SSE and WebSocket clients. */
    jobHub: JobHub;
  }
}
