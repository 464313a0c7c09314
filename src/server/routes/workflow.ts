/**
 * Workflow routes: signals to a job, and batches of jobs (`POST /v1/batches`, or `POST /v1/jobs`
 * with an array body; jobs.ts hands those over to `sendBatch`).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FieldIssue } from '../../core/errors.js';
import { MAX_BATCH_JOBS } from '../../core/limits.js';
import type { BatchItem } from '../../longhaul.js';
import type { AppContext } from '../context.js';
import { HttpProblem, invalidRequest, toProblem } from '../problem.js';
import { routeSchemas, submitBodySchema } from '../schemas.js';
import { idempotencyKeyOf, type SubmitBody, submitOptions, withSnapshotHeaders } from './jobs.js';

/** Field errors of one refused job, at most this many in all (a batch of 1,000 bad jobs is one problem, not 1,000). */
const MAX_FIELD_ERRORS = 50;

/** The batch's items checked against the submit body schema; a problem naming each refused job (`jobs[i]`). */
function checkItems(request: FastifyRequest, jobs: unknown[]): SubmitBody[] {
  if (jobs.length === 0) throw invalidRequest('a batch holds at least one job', [{ path: 'jobs', message: 'must not be empty' }]);
  if (jobs.length > MAX_BATCH_JOBS) {
    throw new HttpProblem(413, 'BATCH_TOO_LARGE', `a batch holds at most ${MAX_BATCH_JOBS} jobs (got ${jobs.length}); split it`);
  }
  const validate = request.compileValidationSchema(submitBodySchema, 'body');
  const errors: FieldIssue[] = [];
  const refused: number[] = [];
  jobs.forEach((job, i) => {
    if (validate(job)) return;
    refused.push(i);
    // The same words as a single submission's 400, each path under the job's index.
    const single = toProblem(Object.assign(new Error('invalid'), { validation: validate.errors ?? [], validationContext: 'body' }));
    for (const e of single.extra.errors ?? []) errors.push({ path: e.path ? `jobs[${i}].${e.path}` : `jobs[${i}]`, message: e.message });
  });
  if (refused.length === 0) return jobs as SubmitBody[];
  const shown = errors.slice(0, MAX_FIELD_ERRORS);
  const which = refused.length === 1 ? `jobs[${refused[0]}] is` : `${refused.length} jobs are (first: jobs[${refused[0]}])`;
  throw invalidRequest(`${which} invalid: ${shown.map((e) => `${e.path}: ${e.message}`).join('; ')}`, shown);
}

/** Creates a batch (all the jobs or none) and answers it: 202 `{ jobs }`, or 200 for a replay of the same batch and key. */
export async function sendBatch(lh: AppContext['lh'], request: FastifyRequest, reply: FastifyReply, jobs: unknown[]): Promise<FastifyReply> {
  const key = idempotencyKeyOf(request);
  const bodies = checkItems(request, jobs);
  const items: BatchItem[] = bodies.map((body) => ({ type: body.type, input: body.input, options: submitOptions(body, request.tenant) }));
  const { jobs: created, replayed } = await lh.enqueueMany(items, key === undefined ? {} : { idempotencyKey: key });
  const first = created[0];
  if (first) withSnapshotHeaders(reply, first);
  if (replayed) reply.header('Idempotent-Replayed', 'true');
  // Serialised here: an array sent to POST /v1/jobs answers under that route's single-snapshot response schema.
  return reply
    .code(replayed ? 200 : 202)
    .type('application/json; charset=utf-8')
    .send(JSON.stringify({ jobs: created }));
}

export function registerWorkflowRoutes(app: FastifyInstance, { lh }: AppContext): void {
  app.post<{ Body: { jobs: unknown[] } }>('/v1/batches', { schema: routeSchemas.batch }, (request, reply) => sendBatch(lh, request, reply, request.body.jobs));

  app.post<{ Params: { id: string; name: string }; Body: unknown }>('/v1/jobs/:id/signals/:name', { schema: routeSchemas.signal }, async (request, reply) => {
    // An empty body is a signal without a payload (null).
    const payload = request.body === undefined ? null : request.body;
    const outcome = await lh.signal(request.params.id, request.params.name, payload, { tenant: request.tenant });
    return reply.code(202).send(outcome);
  });
}
