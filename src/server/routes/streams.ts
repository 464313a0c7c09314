/** Live streams: per-job SSE, the tenant-wide SSE feed, and the WebSocket protocol. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { JobNotFoundError } from '../../core/errors.js';
import type { JobSnapshot } from '../../core/job.js';
import { isTerminal } from '../../core/states.js';
import type { AppContext } from '../app.js';
import type { Caller } from '../auth.js';
import { HttpProblem, toProblem } from '../problem.js';
import { routeSchemas } from '../schemas.js';
import { changeSeq, SSE_HEADERS, sseFrame, statusKey } from '../sse.js';
import { grantAllows } from '../stream-token.js';

function assertGrant(request: FastifyRequest, id: string | '*'): void {
  if (request.grant && !grantAllows(request.grant, id)) throw new HttpProblem(401, 'INVALID_TOKEN', 'this stream token does not grant that stream');
}

/** Opens an SSE response and returns a writer plus a cleanup registration. */
function openStream(request: FastifyRequest, reply: FastifyReply, keepaliveMs: number, streams: Set<() => void>) {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, SSE_HEADERS);
  raw.write('retry: 2000\n\n');
  const cleanups: (() => void)[] = [];
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    streams.delete(close);
    for (const c of cleanups) c();
    if (!raw.writableEnded) raw.end();
  };
  const keepalive = setInterval(() => raw.write(': keepalive\n\n'), keepaliveMs);
  cleanups.push(() => clearInterval(keepalive));
  streams.add(close);
  request.raw.on('close', close);
  raw.on('error', close);
  return {
    write: (chunk: string) => {
      if (!closed) raw.write(chunk);
    },
    onClose: (fn: () => void) => cleanups.push(fn),
    close,
    get closed() {
      return closed;
    },
  };
}

export function registerStreamRoutes(app: FastifyInstance, ctx: AppContext): void {
  const { lh, hub, feed, keepaliveMs, streams } = ctx;

  app.get<{ Params: { id: string } }>('/v1/jobs/:id/events', { schema: routeSchemas.jobEvents, config: { streamRoute: true } }, async (request, reply) => {
    const { id } = request.params;
    assertGrant(request, id);
    const current = await lh.get(id, { tenant: request.tenant });
    if (!current) throw new JobNotFoundError(id);
    const header = request.headers['last-event-id'];
    const lastEventId = typeof header === 'string' && /^\d+$/.test(header) ? Number(header) : null;
    if (lastEventId !== null && isTerminal(current.status) && changeSeq(current) <= lastEventId) {
      // Nothing newer will ever come: 204 tells EventSource to stop reconnecting.
      return reply.code(204).send();
    }
    const stream = openStream(request, reply, keepaliveMs, streams);
    let lastKey: string | null = null;
    let lastStatus: string | null = null;
    let lastSeq = lastEventId ?? -1;
    const send = (snap: JobSnapshot) => {
      const seq = changeSeq(snap);
      const key = `${statusKey(snap)}|${snap.progress.updatedAt}|${snap.updatedAt}`;
      if (key === lastKey) return;
      // On resume, skip state the client already has; later frames always move forward.
      if (lastKey === null && seq <= lastSeq) {
        lastKey = key;
        lastStatus = statusKey(snap);
        return;
      }
      const event = lastStatus === null || statusKey(snap) !== lastStatus ? 'status' : 'progress';
      lastKey = key;
      lastStatus = statusKey(snap);
      lastSeq = Math.max(lastSeq, seq);
      stream.write(sseFrame(Math.max(seq, lastSeq), event, snap));
      if (isTerminal(snap.status)) stream.close();
    };
    const unsubscribe = hub.subscribe(id, {
      next: send,
      end: (err) => {
        if (err) stream.write(`event: error\ndata: ${JSON.stringify({ message: toProblem(err).message })}\n\n`);
        stream.close();
      },
    });
    stream.onClose(unsubscribe);
  });

  app.get('/v1/events', { schema: routeSchemas.feed, config: { streamRoute: true } }, async (request, reply) => {
    assertGrant(request, '*');
    const stream = openStream(request, reply, keepaliveMs, streams);
    const lastStatus = new Map<string, string>();
    const unsubscribe = feed.subscribe(request.tenant, (snap) => {
      const key = statusKey(snap);
      const event = lastStatus.get(snap.id) === key ? 'progress' : 'status';
      if (isTerminal(snap.status)) lastStatus.delete(snap.id);
      else lastStatus.set(snap.id, key);
      stream.write(sseFrame(changeSeq(snap), event, snap));
    });
    stream.onClose(unsubscribe);
  });
}

/**
 * One `/v1/ws` connection (see websocket.ts): `{"op": "subscribe" | "unsubscribe" | "cancel", "id"}`
 * messages in, `{"type": "snapshot", job}` and `{"type": "error", ...}` out.
 */
export function webSocketSession({ lh, hub }: AppContext): (socket: WebSocket, caller: Caller) => void {
  return (socket, caller) => {
    const { tenant, grant } = caller;
    const subs = new Map<string, () => void>();
    const send = (msg: unknown) => {
      if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(msg));
    };
    const fail = (id: string | undefined, err: unknown) => {
      const p = toProblem(err);
      send({ type: 'error', ...(id ? { id } : {}), status: p.status, code: p.code, message: p.message });
    };
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      void (async () => {
        let msg: { op?: unknown; id?: unknown };
        try {
          msg = JSON.parse(isBinary ? '' : data.toString('utf8'));
        } catch {
          return fail(undefined, new HttpProblem(400, 'MALFORMED_JSON', 'messages must be JSON objects'));
        }
        const id = typeof msg?.id === 'string' ? msg.id : undefined;
        if (msg === null || typeof msg !== 'object' || !['subscribe', 'unsubscribe', 'cancel'].includes(String(msg.op)) || !id) {
          return fail(id, new HttpProblem(400, 'INVALID_MESSAGE', 'expected {"op": "subscribe" | "unsubscribe" | "cancel", "id": "<job id>"}'));
        }
        try {
          if (grant && !grantAllows(grant, id)) throw new HttpProblem(401, 'INVALID_TOKEN', 'this stream token does not grant that job');
          if (msg.op === 'subscribe') {
            if (subs.has(id)) return;
            // Claim the slot before awaiting: a repeated subscribe must not subscribe twice (and
            // leak the first subscription), and an unsubscribe or close meanwhile must win.
            let dropped = false;
            const placeholder = () => {
              dropped = true;
            };
            subs.set(id, placeholder);
            let exists: boolean;
            try {
              exists = (await lh.get(id, { tenant })) !== null;
            } finally {
              if (subs.get(id) === placeholder) subs.delete(id);
            }
            if (!exists) throw new JobNotFoundError(id);
            if (dropped || socket.readyState !== socket.OPEN) return;
            const off = hub.subscribe(id, {
              next: (job) => send({ type: 'snapshot', job }),
              end: (err) => {
                subs.get(id)?.();
                subs.delete(id);
                if (err) fail(id, err);
              },
            });
            subs.set(id, off);
          } else if (msg.op === 'unsubscribe') {
            subs.get(id)?.();
            subs.delete(id);
          } else {
            if (grant) throw new HttpProblem(401, 'UNAUTHORIZED', 'stream tokens cannot cancel jobs; use an API key');
            send({ type: 'snapshot', job: await lh.cancel(id, { tenant }) });
          }
        } catch (err) {
          fail(id, err);
        }
      })();
    });
    socket.on('close', () => {
      for (const off of subs.values()) off();
      subs.clear();
    });
  };
}
