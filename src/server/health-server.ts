/**
 * A worker process's own small HTTP listener (`longhaul worker --health-port`): `/healthz`,
 * `/readyz` and `/metrics`, so that a supervisor (Kubernetes probes, systemd, a load balancer's
 * checks) can restart a worker that reports itself unhealthy, and Prometheus can scrape its
 * counters. Nothing else is served: a worker exposes no API.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import type { Longhaul } from '../longhaul.js';
import { checkLive, checkReady } from './health.js';
import { HttpProblem, problemHandler, sendProblem } from './problem.js';
import { registerMetricsRoute } from './routes/metrics.js';

export interface HealthServerOptions {
  lh: Longhaul;
  /** When set, `/metrics` needs `Authorization: Bearer <token>` (LONGHAUL_METRICS_TOKEN). */
  metricsToken?: string;
}

export function buildHealthServer(options: HealthServerOptions): FastifyInstance {
  const { lh } = options;
  const app = Fastify({ bodyLimit: 1024 });
  app.setErrorHandler(problemHandler);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, new HttpProblem(404, 'NOT_FOUND', "a worker's health port serves /healthz, /readyz and /metrics only"), request.url.split('?')[0]),
  );
  app.get('/healthz', async (request) => checkLive(lh, request.log));
  app.get('/readyz', async (request) => checkReady(lh, request.log));
  registerMetricsRoute(app, { lh, authEnabled: false, adminTenants: new Set() }, { apiKeys: [], ...(options.metricsToken ? { metricsToken: options.metricsToken } : {}) });
  return app;
}
