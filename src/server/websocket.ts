/**
 * `/v1/ws`, served from the HTTP server's `upgrade` event with the `ws` package. Upgrades never
 * enter Fastify's request cycle, so nothing WebSocket-related runs for the other requests (a
 * Fastify plugin doing this through the router added two hooks and a handler wrapper to every
 * request: about 1.2 µs of CPU each). An upgrade anywhere else, or one refused by
 * authentication, gets its problem+json answer and the socket is closed.
 */
import { type IncomingMessage, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Caller } from './auth.js';
import { HttpProblem, problemBody, toProblem } from './problem.js';

const WS_PATH = '/v1/ws';
const MAX_PAYLOAD = 64 * 1024;

export interface WebSocketOptions {
  log: FastifyBaseLogger;
  /**
   * The caller of an upgrade, or the problem that refuses it (`token`: the `?token=` value); a
   * promise when a database API key must be read (a rejection refuses the upgrade with its problem).
   */
  authorize(request: IncomingMessage, token: string | null): Caller | HttpProblem | Promise<Caller | HttpProblem>;
  /** Serves one accepted socket. */
  session(socket: WebSocket, caller: Caller): void;
}

export function acceptWebSockets(app: FastifyInstance, options: WebSocketOptions): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PAYLOAD });
  const onUpgrade = (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    let url: URL;
    try {
      url = new URL(request.url ?? '/', 'http://localhost');
    } catch {
      return refuse(socket, new HttpProblem(400, 'INVALID_REQUEST', 'malformed request target'));
    }
    if (decodedPath(url.pathname) !== WS_PATH) return refuse(socket, new HttpProblem(404, 'NOT_FOUND', `no WebSocket endpoint at ${url.pathname}`));
    const authorized = options.authorize(request, url.searchParams.get('token'));
    if (authorized instanceof Promise) {
      authorized.then(
        (caller) => accept(request, socket, head, caller),
        (err: unknown) => refuse(socket, toProblem(err)),
      );
      return;
    }
    accept(request, socket, head, authorized);
  };
  const accept = (request: IncomingMessage, socket: Duplex, head: Buffer, caller: Caller | HttpProblem) => {
    if (caller instanceof HttpProblem) return refuse(socket, caller);
    wss.handleUpgrade(request, socket, head, (ws) => {
      // A protocol error (a frame over MAX_PAYLOAD: 1009, invalid UTF-8: 1007, a bad opcode or
      // an unmasked frame: 1002) is emitted here after `ws` has already started the close with
      // that code; without a listener it would be thrown and stop the process. The 'close'
      // event that follows releases the session's subscriptions.
      ws.on('error', (err: Error & { code?: string }) => {
        options.log.warn(
          { err: { message: err.message, code: err.code }, remote: request.socket.remoteAddress, tenant: caller.tenant },
          'WebSocket closed on a protocol error',
        );
      });
      options.session(ws, caller);
    });
  };
  app.server.on('upgrade', onUpgrade);
  // Open sockets would keep app.close() waiting: they are closed (1001, going away) first.
  app.addHook('preClose', (done) => {
    app.server.off('upgrade', onUpgrade);
    for (const client of wss.clients) client.close(1001, 'server shutting down');
    wss.close(() => done());
  });
}

/** The path with its percent-escapes decoded (as the router matches `/v%31/ws`), or itself when they do not decode. */
function decodedPath(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

function refuse(socket: Duplex, problem: HttpProblem): void {
  const body = JSON.stringify(problemBody(problem));
  socket.end(
    `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status] ?? 'Error'}\r\n` +
      'Content-Type: application/problem+json\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      'Connection: close\r\n\r\n' +
      body,
    () => socket.destroy(),
  );
}
