/**
 * Answers for requests Fastify never routes, as problem+json like every other error: what Node's
 * HTTP parser refuses (headers too large → 431, a request too slow → 408, bytes that are not
 * HTTP → 400), and requests arriving while the server shuts down (503).
 */
import type { Socket } from 'node:net';
import type { FastifyReply } from 'fastify';
import { MAX_IDEMPOTENCY_KEY } from '../core/limits.js';
import { HttpProblem, problemBody, sendProblem } from './problem.js';

/** The problem for an error of Node's HTTP parser (`clientError`); null when nobody is left to answer. */
export function clientErrorProblem(err: NodeJS.ErrnoException): HttpProblem | null {
  if (err.code === 'ECONNRESET') return null;
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    return new HttpProblem(
      431,
      'HEADERS_TOO_LARGE',
      `the request headers are larger than the server accepts (16 KiB in all by default); an Idempotency-Key, for one, is at most ${MAX_IDEMPOTENCY_KEY} characters`,
    );
  }
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return new HttpProblem(408, 'REQUEST_TIMEOUT', 'the request did not arrive in time');
  return new HttpProblem(400, 'BAD_REQUEST', 'the request is not valid HTTP/1.1');
}

/** Fastify's `clientErrorHandler`: writes the problem on the raw socket, then closes it. */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  const problem = clientErrorProblem(err);
  if (!problem || socket.destroyed) return;
  if (socket.writable) {
    const body = JSON.stringify(problemBody(problem));
    socket.write(
      `HTTP/1.1 ${problem.status} ${problemBody(problem).title}\r\nContent-Type: application/problem+json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}

/** The answer to a request that arrives after close() began (instead of Fastify's plain JSON 503). */
export function sendShuttingDown(reply: FastifyReply): FastifyReply {
  reply.header('Connection', 'close');
  return sendProblem(
    reply,
    new HttpProblem(503, 'SHUTTING_DOWN', 'the server is shutting down; retry on another instance or in a moment', { retryAfterSeconds: 1 }),
  );
}
