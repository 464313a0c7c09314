/**
 * What one HTTP client can hold of the server (docs/security.md, "HTTP connections and
 * requests"):
 *
 * - A request must arrive whole within `requestTimeoutMs`: its headers (Node's `headersTimeout`,
 *   answered `408 REQUEST_TIMEOUT` by client-errors.ts; it also closes a connection that never
 *   sends a byte) and its body (a deadline per request, below). A body still incomplete at the
 *   deadline is answered 408 when the route is still reading it, and its connection closed;
 *   when the answer already went out (a 401 before the body), the connection is closed.
 * - Transfers (`POST /v1/uploads`, result file downloads) are legitimately long: instead of the
 *   deadline they must move at least `transferMinBytes` in every `transferWindowMs`, or their
 *   connection is closed (no answer can be sent in the middle of a body).
 * - An idle keep-alive connection is closed after `keepAliveTimeoutMs`.
 * - At most `maxConnections` connections at once. Past it, up to `healthConnections` more are
 *   accepted for the load balancer only: their one request is served when it is `/healthz` or
 *   `/readyz` and refused `503 TOO_MANY_CONNECTIONS` otherwise, they must send it within
 *   `HEALTH_SOCKET_MS`, and they are closed after it. Past both, a new connection is closed at
 *   once (before any byte is read).
 *
 * Node's own `requestTimeout` is not used: it would apply to uploads too. Nor is
 * `server.maxConnections`: it closes every connection past the cap, health checks included.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import { HttpProblem } from './problem.js';

export interface HttpLimits {
  /** Headers and body of a request must arrive within this (ms). Default 30 000. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this (ms). Default 72 000 (past common load balancers' 60 s). */
  keepAliveTimeoutMs: number;
  /** Connections held at once. Default 10 000. */
  maxConnections: number;
  /** Connections past `maxConnections` kept for `/healthz` and `/readyz` only. Default 16. */
  healthConnections: number;
  /** Uploads and downloads must move at least this many bytes... Default 16 384. */
  transferMinBytes: number;
  /** ...in every window of this many ms. Default 30 000. */
  transferWindowMs: number;
}

export const DEFAULT_HTTP_LIMITS: HttpLimits = Object.freeze({
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 72_000,
  maxConnections: 10_000,
  healthConnections: 16,
  transferMinBytes: 16 * 1024,
  transferWindowMs: 30_000,
});

/** How long a connection past the cap may take to send its health request. */
export const HEALTH_SOCKET_MS = 2_000;
const HEALTH_PATHS = new Set(['/healthz', '/readyz']);

/** Why a connection or request was refused (the `reason` label of `longhaul_http_refusals_total`). */
export type RefusalReason = 'connection_limit' | 'request_timeout' | 'transfer_too_slow' | 'host_not_allowed' | 'origin_not_allowed' | 'auth_throttled';

export class ConnectionLimits {
  readonly limits: HttpLimits;
  private open = 0;
  private overflow = 0;
  /** Connections past the cap, kept for one health request. */
  private readonly healthOnly = new WeakSet<Socket>();
  private readonly deadlines = new WeakMap<IncomingMessage, NodeJS.Timeout>();

  constructor(
    limits: Partial<HttpLimits>,
    private readonly refuse: (reason: RefusalReason) => void,
    private readonly log: FastifyBaseLogger,
  ) {
    this.limits = { ...DEFAULT_HTTP_LIMITS, ...limits };
    for (const [name, value] of Object.entries(this.limits)) {
      const min = name === 'healthConnections' || name === 'transferMinBytes' ? 0 : 1;
      if (!Number.isSafeInteger(value) || value < min) throw new TypeError(`httpLimits.${name} must be an integer ≥ ${min} (got ${String(value)})`);
    }
  }

  /** Sets the server's timeouts and starts counting its connections and timing its requests (before listen). */
  attach(server: Server): void {
    const { requestTimeoutMs, keepAliveTimeoutMs } = this.limits;
    server.headersTimeout = requestTimeoutMs;
    server.requestTimeout = 0;
    server.keepAliveTimeout = keepAliveTimeoutMs;
    // How often Node looks for requests past headersTimeout (read when the server starts listening).
    (server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval = Math.max(50, Math.min(1_000, Math.floor(requestTimeoutMs / 4)));
    server.on('connection', (socket: Socket) => this.onConnection(socket));
    // Before Fastify's own listener: its routes' hooks (transfer()) run within it.
    server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => this.startDeadline(req, res));
  }

  /** Connections open now (within the cap, and past it for health checks). */
  get connections(): { open: number; healthOnly: number } {
    return { open: this.open, healthOnly: this.overflow };
  }

  /**
   * The refusal of a request on a connection past the cap that is not a health check, or null.
   * Every request on such a connection is its last (`Connection: close`).
   */
  admit(socket: Socket, path: string, setClose: () => void): HttpProblem | null {
    if (!this.healthOnly.has(socket)) return null;
    setClose();
    if (HEALTH_PATHS.has(path)) return null;
    this.refuse('connection_limit');
    return tooManyConnections();
  }

  /** Whether an upgrade on this socket must be refused (a connection past the cap). */
  upgradeRefused(socket: Socket): HttpProblem | null {
    if (!this.healthOnly.has(socket)) return null;
    this.refuse('connection_limit');
    return tooManyConnections();
  }

  /**
   * A transfer route's request (upload: `in`, download: `out`): the request deadline gives way
   * to the minimum rate.
   */
  transfer(req: IncomingMessage, res: ServerResponse, direction: 'in' | 'out'): void {
    this.clearDeadline(req);
    const { transferMinBytes, transferWindowMs } = this.limits;
    if (transferMinBytes === 0) return;
    const socket = req.socket;
    const moved = () => (direction === 'in' ? socket.bytesRead : socket.bytesWritten);
    const done = () => (direction === 'in' ? req.complete : res.writableFinished);
    let last = moved();
    const timer = setInterval(() => {
      if (done() || socket.destroyed) return clearInterval(timer);
      const now = moved();
      if (now - last < transferMinBytes) {
        clearInterval(timer);
        this.refuse('transfer_too_slow');
        this.log.info(
          { remoteAddress: socket.remoteAddress, url: req.url?.split('?')[0], direction, bytes: now - last, windowMs: transferWindowMs },
          'transfer slower than the minimum rate: connection closed',
        );
        socket.destroy();
        return;
      }
      last = now;
    }, transferWindowMs);
    timer.unref();
    socket.once('close', () => clearInterval(timer));
  }

  private onConnection(socket: Socket): void {
    if (this.open < this.limits.maxConnections) {
      this.open++;
      socket.once('close', () => this.open--);
      return;
    }
    if (this.overflow < this.limits.healthConnections) {
      this.overflow++;
      this.healthOnly.add(socket);
      // Node set the server's idle timeout on it; a health check sends its request at once.
      socket.setTimeout(HEALTH_SOCKET_MS);
      socket.once('close', () => this.overflow--);
      return;
    }
    this.refuse('connection_limit');
    socket.destroy();
  }

  private startDeadline(req: IncomingMessage, res: ServerResponse): void {
    const timer = setTimeout(() => this.onDeadline(req, res), this.limits.requestTimeoutMs);
    timer.unref();
    this.deadlines.set(req, timer);
    // Answered, with the whole request read: nothing left to time (an answer given before the
    // body arrived, a 401 say, keeps the deadline for the rest of the body).
    res.once('close', () => {
      if (req.complete) this.clearDeadline(req);
    });
  }

  private clearDeadline(req: IncomingMessage): void {
    const timer = this.deadlines.get(req);
    if (timer === undefined) return;
    clearTimeout(timer);
    this.deadlines.delete(req);
  }

  private onDeadline(req: IncomingMessage, res: ServerResponse): void {
    this.deadlines.delete(req);
    const socket = req.socket;
    if (req.complete || socket.destroyed) return;
    this.refuse('request_timeout');
    this.log.info({ remoteAddress: socket.remoteAddress, url: req.url?.split('?')[0], timeoutMs: this.limits.requestTimeoutMs }, 'request body not received in time');
    // A body parser still reading (Fastify's listens for 'error' on the request): it fails with
    // the 408, which the error handler answers; the connection closes after it.
    if (!res.headersSent && req.listenerCount('error') > 0) {
      res.setHeader('Connection', 'close');
      req.emit('error', requestTimeout(this.limits.requestTimeoutMs));
      // Whatever happens to that answer, the connection does not outlive it by much.
      setTimeout(() => socket.destroy(), 1_000).unref();
      return;
    }
    socket.destroy();
  }
}

function tooManyConnections(): HttpProblem {
  return new HttpProblem(503, 'TOO_MANY_CONNECTIONS', 'the server holds as many connections as it accepts; try again in a moment', { retryAfterSeconds: 1 });
}

function requestTimeout(ms: number): HttpProblem {
  return new HttpProblem(408, 'REQUEST_TIMEOUT', `the request did not arrive whole within ${ms} ms`);
}
