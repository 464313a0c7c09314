/**
 * What a `longhaul dev` or `server` process (or a `worker` with a health port) serves while it
 * waits for its database at start (facade/database-wait.ts): `/healthz` answers 200 (the
 * process is alive and doing what it should, so a liveness probe does not restart it: a restart
 * would only wait again), `/readyz` answers 503 `NOT_READY` (no traffic yet), and every other
 * request 503 `DATABASE_UNAVAILABLE` with `Retry-After`. Once the database answers it is closed
 * and the real server listens on the same address. Plain node:http: nothing of the API is
 * loaded or reachable before the schema is known to be right.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpProblem, problemBody } from './problem.js';

export interface WaitingServer {
  /** The port it listens on (the one asked for, or the one the system gave for 0). */
  readonly port: number;
  /** `http://host:port` */
  readonly url: string;
  /** Stops listening and drops its connections (the real server takes the port over). */
  close(): Promise<void>;
}

const RETRY_AFTER_SECONDS = 5;

/** `firstError` is the database's first refusal: the caller logs it; probes get only a reason code. */
export async function listenWhileWaiting(host: string, port: number, _firstError: unknown): Promise<WaitingServer> {
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0] as string;
    if (path === '/healthz') return send(res, 200, 'application/json', { status: 'ok', waiting: 'database' });
    const problem =
      path === '/readyz'
        ? // The error stays in the log (it can name hosts and users): the probe gets its reason code.
          new HttpProblem(503, 'NOT_READY', 'the database is not answering yet (DATABASE_UNAVAILABLE; details in the server log)', { members: { reason: 'DATABASE_UNAVAILABLE' } })
        : new HttpProblem(503, 'DATABASE_UNAVAILABLE', 'the database is not answering yet; try again', { retryAfterSeconds: RETRY_AFTER_SECONDS });
    res.setHeader('Retry-After', String(RETRY_AFTER_SECONDS));
    return send(res, 503, 'application/problem+json', problemBody(problem, path));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    port: bound,
    url: `http://${shown}:${bound}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function send(res: ServerResponse, status: number, type: string, body: unknown): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}
