/**
 * The dashboard (docs/dashboard.md): the static files `npm run build` writes to dist/web (from
 * web/), served at `/` with a strict Content Security Policy. The page is a client of the public
 * API only: it holds no server-side state and gets no privileges the API does not give its key.
 *
 * Caching: Vite names every asset under /assets/ by the hash of its content, so those are
 * immutable for a year; index.html (which names them) is revalidated on every load.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { HttpProblem, sendProblem } from './problem.js';

/**
 * Where the built dashboard lives: dist/web of the package, from src/server (tsx) as from
 * dist/server (the built package) alike.
 */
export const DEFAULT_DASHBOARD_DIR = fileURLToPath(new URL('../../dist/web/', import.meta.url));

/**
 * No inline script or style, nothing from another origin, no framing. `connect-src 'self'`
 * covers the API and its SSE feed; `img-src data:` the chart library's canvas exports are not
 * used, but uPlot draws to canvas only, so images stay same-origin.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

function securityHeaders(reply: FastifyReply): void {
  reply.header('Content-Security-Policy', DASHBOARD_CSP);
  reply.header('X-Content-Type-Options', 'nosniff');
  reply.header('Referrer-Policy', 'no-referrer');
  reply.header('X-Frame-Options', 'DENY');
  reply.header('Cross-Origin-Opener-Policy', 'same-origin');
}

export interface DashboardOptions {
  /** The built files (index.html, assets/). Default: the package's dist/web. */
  dir?: string;
}

/**
 * Serves the dashboard at `/`. When the files were never built (a checkout without
 * `npm run build`), `/` answers a 404 problem that says so, and the API is unaffected.
 */
export async function registerDashboard(app: FastifyInstance, options: DashboardOptions = {}): Promise<void> {
  const dir = options.dir ?? DEFAULT_DASHBOARD_DIR;
  if (!existsSync(`${dir}/index.html`)) {
    app.get('/', { schema: { hide: true } }, (_request, reply) =>
      sendProblem(reply, new HttpProblem(404, 'DASHBOARD_NOT_BUILT', 'the dashboard is not built: run `npm run build`')),
    );
    return;
  }
  await app.register(fastifyStatic, {
    root: dir,
    prefix: '/',
    // Routes for the files present at start-up, not a catch-all: unknown paths (and every
    // /v1 path) still reach the API's not-found handler and its authentication.
    wildcard: false,
    index: ['index.html'],
    cacheControl: false,
    dotfiles: 'deny',
    schemaHide: true,
    setHeaders: (reply, path) => {
      securityHeaders(reply);
      const immutable = /[\\/]assets[\\/]/.test(path);
      reply.header('Cache-Control', immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
    },
  });
}
