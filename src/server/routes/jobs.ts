/** Job routes: submit, get, list, cancel, retry, transitions, stream tokens. */
import { withRemoteParent } from '../../telemetry/trace.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { JobNotFoundError } from '../../core/errors.js';
import type { JobSnapshot } from '../../core/job.js';
import { idempotencyKeyProblem } from '../../core/limits.js';
import { isJobState, isTerminal, JOB_STATES, type JobState } from '../../core/states.js';
import type { SubmitOptions } from '../../longhaul.js';
import type { AppContext } from '../context.js';
import { HttpProblem, invalidRequest } from '../problem.js';
import { routeSchemas } from '../schemas.js';
import { sendBatch } from './workflow.js';

/** Seconds a poller should wait: 1 s for queued/running work, the time until runAt for delayed work. */
export function retryAfterSeconds(status: JobState, runAt: number, now = Date.now()): number | null {
  if (isTerminal(status)) return null;
  if (status === 'pending' || status === 'retrying') return Math.min(60, Math.max(1, Math.ceil((runAt - now) / 1000)));
  return 1;
}

function withPollingHeaders(reply: FastifyReply, status: JobState, runAt: number): FastifyReply {
  reply.header('Cache-Control', 'no-store');
  const ra = retryAfterSeconds(status, runAt);
  if (ra !== null) reply.header('Retry-After', String(ra));
  return reply;
}

/** Polling headers for a snapshot (its runAt is an ISO string). */
export function withSnapshotHeaders(reply: FastifyReply, job: JobSnapshot): FastifyReply {
  return withPollingHeaders(reply, job.status, Date.parse(job.runAt));
}

export interface SubmitBody {
  type: string;
  input?: unknown;
  priority?: SubmitOptions['priority'];
  runAt?: string;
  delayMs?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  metadata?: Record<string, unknown>;
  webhook?: { url: string; secret?: string };
}

/** The request's `Idempotency-Key` (one header, checked), or undefined. */
export function idempotencyKeyOf(request: FastifyRequest): string | undefined {
  const key = request.headers['idempotency-key'];
  if (Array.isArray(key)) throw new HttpProblem(400, 'INVALID_IDEMPOTENCY_KEY', 'send one Idempotency-Key header');
  const keyProblem = key === undefined ? null : idempotencyKeyProblem(key);
  if (keyProblem) throw new HttpProblem(400, 'INVALID_IDEMPOTENCY_KEY', `Idempotency-Key ${keyProblem}`);
  return key;
}

/** The submit options a (schema-checked) submit body gives, for the caller's tenant. */
export function submitOptions(body: SubmitBody, tenant: string): SubmitOptions {
  const options: SubmitOptions = { tenant };
  if (body.priority !== undefined) options.priority = body.priority;
  if (body.runAt !== undefined) options.runAt = body.runAt;
  if (body.delayMs !== undefined) options.delayMs = body.delayMs;
  if (body.maxAttempts !== undefined) options.maxAttempts = body.maxAttempts;
  if (body.timeoutMs !== undefined) options.timeoutMs = body.timeoutMs;
  if (body.metadata !== undefined) options.metadata = body.metadata;
  if (body.webhook !== undefined) options.webhook = body.webhook;
  return options;
}

export function registerJobRoutes(app: FastifyInstance, { lh, tokens }: AppContext): void {
  // An array body is a batch (see routes/workflow.ts): answered before the single-job schema is applied.
  const batchBody = async (request: FastifyRequest, reply: FastifyReply) => {
    if (Array.isArray(request.body)) return sendBatch(lh, request, reply, request.body);
  };
  app.post<{ Body: SubmitBody }>('/v1/jobs', { schema: routeSchemas.submit, preValidation: batchBody }, (request, reply) => {
    const body = request.body;
    const key = idempotencyKeyOf(request);
    const options = submitOptions(body, request.tenant);
    if (key !== undefined) options.idempotencyKey = key;
    // A caller's W3C traceparent header is the parent of the submit's span (telemetry/trace.ts).
    return withRemoteParent(request.headers.traceparent, () => lh.enqueue(body.type, body.input, options)).then(({ job, replayed }) => {
      reply.header('Location', job.links.self);
      withSnapshotHeaders(reply, job);
      if (replayed) reply.header('Idempotent-Replayed', 'true');
      return reply.code(replayed ? 200 : 202).send(job);
    });
  });

  // The status poll: the snapshot arrives as JSON text (see Longhaul.snapshotJson) and is sent as is.
  // Routes that take an admin's `tenant` parameter (../tenant-scope.ts): request.tenant is then that tenant.
  const scoped = { tenantScope: true } as const;

  app.get<{ Params: { id: string } }>('/v1/jobs/:id', { schema: routeSchemas.get, config: scoped }, (request, reply) =>
    lh.snapshotJson(request.params.id, { tenant: request.tenant }).then((job) => {
      if (!job) throw new JobNotFoundError(request.params.id);
      if (job.state === 'expired') {
        const at = job.expiresAt === null ? 'an earlier time' : new Date(job.expiresAt).toISOString();
        throw new HttpProblem(410, 'EXPIRED', `job ${request.params.id} expired at ${at}; its result was deleted`);
      }
      return withPollingHeaders(reply, job.state, job.runAt).type('application/json; charset=utf-8').send(job.json);
    }),
  );

  app.get<{ Querystring: { status?: string; type?: string; parentId?: string; q?: string; limit?: string; cursor?: string; tenant?: string } }>(
    '/v1/jobs',
    // `tenant=*` (admins, checked by the hook): every tenant's jobs.
    { schema: routeSchemas.list, config: { tenantScope: 'all' } },
    async (request) => {
      const q = request.query;
      let status: JobState[] | undefined;
      if (q.status !== undefined && q.status !== '') {
        const parts = q.status.split(',').map((s) => s.trim());
        for (const s of parts) {
          if (!isJobState(s)) throw invalidRequest(`unknown status "${s}"`, [{ path: 'status', message: `must be one or more of ${JOB_STATES.join(', ')}` }]);
        }
        status = parts as JobState[];
      }
      // limit and q are bounded by the route's schema (../params.ts).
      const limit = q.limit === undefined ? 50 : Number(q.limit);
      return lh.list({
        ...(q.tenant === '*' ? {} : { tenant: request.tenant }),
        limit,
        ...(status ? { status } : {}),
        ...(q.type ? { type: q.type } : {}),
        ...(q.parentId ? { parentId: q.parentId } : {}),
        ...(q.q ? { text: q.q } : {}),
        ...(q.cursor ? { cursor: q.cursor } : {}),
      });
    },
  );

  const cancel = async (request: { params: { id: string }; tenant: string }, reply: FastifyReply) => {
    const job = await lh.cancel(request.params.id, { tenant: request.tenant });
    return reply.code(202).send(job);
  };
  app.post<{ Params: { id: string } }>('/v1/jobs/:id/cancel', { schema: routeSchemas.cancel, config: scoped }, cancel);
  app.delete<{ Params: { id: string } }>('/v1/jobs/:id', { schema: { ...routeSchemas.cancel, summary: 'Cancel a job (same as POST /cancel)' }, config: scoped }, cancel);

  app.post<{ Params: { id: string } }>('/v1/jobs/:id/retry', { schema: routeSchemas.retry, config: scoped }, async (request, reply) => {
    const job = await lh.retry(request.params.id, { tenant: request.tenant });
    return withSnapshotHeaders(reply, job).code(202).send(job);
  });

  app.get<{ Params: { id: string } }>('/v1/jobs/:id/transitions', { schema: routeSchemas.transitions, config: scoped }, async (request) => ({
    items: await lh.transitions(request.params.id, { tenant: request.tenant }),
  }));

  app.get<{ Params: { id: string } }>('/v1/jobs/:id/checkpoint', { schema: routeSchemas.checkpoint, config: scoped }, async (request, reply) => {
    const checkpoint = await lh.checkpoint(request.params.id, { tenant: request.tenant });
    return reply.header('Cache-Control', 'no-store').send({ checkpoint });
  });

  app.get<{ Params: { id: string } }>('/v1/jobs/:id/webhooks', { schema: routeSchemas.webhooks, config: scoped }, async (request) => ({
    items: await lh.webhookDeliveries(request.params.id, { tenant: request.tenant }),
  }));

  app.post<{ Body: { jobs?: string[]; all?: boolean; ttlSeconds?: number } | undefined }>(
    '/v1/stream-tokens',
    { schema: routeSchemas.streamToken },
    async (request, reply) => {
      const body = request.body ?? {};
      if (!body.all && !body.jobs) throw new HttpProblem(400, 'INVALID_REQUEST', 'name the streams: {"jobs": [ids]} or {"all": true}');
      if (body.jobs) {
        for (const id of body.jobs) if (!(await lh.get(id, { tenant: request.tenant }))) throw new JobNotFoundError(id);
      }
      const exp = Date.now() + (body.ttlSeconds ?? 300) * 1000;
      const token = tokens.mint({ tenant: request.tenant, jobs: body.all ? '*' : (body.jobs ?? []), exp });
      return reply.code(201).send({ token, expiresAt: new Date(exp).toISOString() });
    },
  );
}
