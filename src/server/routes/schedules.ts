/**
 * Schedule routes (`/v1/schedules`): create, list, get, update, pause, resume, delete and
 * trigger now, each scoped to the caller's tenant (someone else's schedule is a 404). A schedule
 * is addressed by its name. Shapes are checked by the route schemas (400); a cron expression,
 * timezone or task the library refuses is a 422 (facade/schedules.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { SchedulePatch } from '../../facade/schedules.js';
import type { AppContext } from '../context.js';
import { routeSchemas, type ScheduleBody } from '../schemas.js';
import { withSnapshotHeaders } from './jobs.js';

type Named = { Params: { name: string } };

function location(name: string): string {
  return `/v1/schedules/${encodeURIComponent(name)}`;
}

export function registerScheduleRoutes(app: FastifyInstance, { lh }: AppContext): void {
  app.post<{ Body: ScheduleBody }>('/v1/schedules', { schema: routeSchemas.scheduleCreate }, async (request, reply) => {
    const view = await lh.schedules.create(request.body, { tenant: request.tenant });
    return reply.code(201).header('Location', location(view.name)).send(view);
  });

  app.get('/v1/schedules', { schema: routeSchemas.scheduleList }, async (request) => ({ items: await lh.schedules.list({ tenant: request.tenant }) }));

  app.get<Named>('/v1/schedules/:name', { schema: routeSchemas.scheduleGet }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    return lh.schedules.get(request.params.name, { tenant: request.tenant });
  });

  app.patch<Named & { Body: SchedulePatch }>('/v1/schedules/:name', { schema: routeSchemas.scheduleUpdate }, async (request) =>
    lh.schedules.update(request.params.name, request.body, { tenant: request.tenant }),
  );

  app.post<Named>('/v1/schedules/:name/pause', { schema: routeSchemas.schedulePause }, async (request) => lh.schedules.pause(request.params.name, { tenant: request.tenant }));

  app.post<Named>('/v1/schedules/:name/resume', { schema: routeSchemas.scheduleResume }, async (request) => lh.schedules.resume(request.params.name, { tenant: request.tenant }));

  app.delete<Named>('/v1/schedules/:name', { schema: routeSchemas.scheduleDelete }, async (request, reply) => {
    await lh.schedules.delete(request.params.name, { tenant: request.tenant });
    return reply.code(204).send();
  });

  // A run now, outside the cron times: answered like a submission (202, the job's Location).
  app.post<Named>('/v1/schedules/:name/trigger', { schema: routeSchemas.scheduleTrigger }, async (request, reply) => {
    const job = await lh.schedules.trigger(request.params.name, { tenant: request.tenant });
    withSnapshotHeaders(reply, job).header('Location', `/v1/jobs/${job.id}`);
    return reply.code(202).send(job);
  });
}
