/** Live streams: per-job SSE, the tenant-wide SSE feed, and the WebSocket protocol. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { JobNotFoundError } from '../../core/errors.js';
import type { JobSnapshot } from '../../core/job.js';
import { nextInOrder, snapshotKey } from '../../core/snapshot-order.js';
import { isTerminal } from '../../core/states.js';
import type { AppContext } from '../context.js';
import type { Caller } from '../auth.js';
import { FeedEventNames } from '../feed-events.js';
import { HttpProblem, toProblem } from '../problem.js';
import { routeSchemas } from '../schemas.js';
import { changeSeq, SSE_HEADERS, sseFrame, statusKey } from '../sse.js';
import { grantAllows } from '../stream-token.js';
import { tooManyStreams } from '../stream-limits.js';
import { parseJson } from '../../core/json-text.js';

function assertGrant(request: FastifyRequest, id: string | '*'): void {
  if (request.grant && !grantAllows(request.grant, id)) throw new HttpProblem(401, 'INVALID_TOKEN', 'this stream token does not grant that stream');
}

/**
 * Opens an SSE response and returns a writer plus a cleanup registration. A client that stops
 * reading is dropped once `ctx.streamBufferBytes` wait unsent (the kernel's socket buffers are
 * full by then): memory per connection stays bounded, and the client may reconnect with
 * `Last-Event-ID`. The stream takes one of its tenant's slots (stream-limits.ts), given back by
 * whichever close comes first; at the cap it is refused with a 429 problem before anything is sent.
 */
function openStream(request: FastifyRequest, reply: FastifyReply, ctx: AppContext) {
  const { keepaliveMs, streams, streamBufferBytes, log, limits } = ctx;
  const release = limits.acquire(request.tenant, 'sse');
  if (!release) throw new HttpProblem(429, 'TOO_MANY_STREAMS', tooManyStreams(limits.maxStreamsPerTenant));
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, SSE_HEADERS);
  raw.write('retry: 2000\n\n');
  const cleanups: (() => void)[] = [];
  let closed = false;
  const close = (overflow = false) => {
    if (closed) return;
    closed = true;
    streams.delete(close);
    release();
    for (const c of cleanups) c();
    if (overflow) raw.destroy();
    else if (!raw.writableEnded) raw.end();
  };
  const write = (chunk: string) => {
    if (closed) return;
    raw.write(chunk);
    if (raw.writableLength > streamBufferBytes) {
      log.warn({ url: request.url, tenant: request.tenant, buffered: raw.writableLength }, 'SSE client is not reading: connection dropped');
      close(true);
    }
  };
  const keepalive = setInterval(() => write(': keepalive\n\n'), keepaliveMs);
  cleanups.push(() => clearInterval(keepalive));
  streams.add(close);
  request.raw.on('close', () => close());
  // A reset connection: nothing to log, the client is gone.
  raw.on('error', () => close());
  // A client that left while the route was awaiting (the job lookup) had its 'close' emitted
  // before the listener above: without this the stream, its keepalive timer and the job's
  // subscription would stay until the job ends.
  if (request.raw.destroyed || raw.destroyed) close();
  return {
    write,
    onClose: (fn: () => void) => cleanups.push(fn),
    close: () => close(),
    get closed() {
      return closed;
    },
  };
}

export function registerStreamRoutes(app: FastifyInstance, ctx: AppContext): void {
  const { lh, hub, feed } = ctx;

  app.get<{ Params: { id: string } }>('/v1/jobs/:id/events', { schema: routeSchemas.jobEvents, config: { streamRoute: true, tenantScope: true } }, async (request, reply) => {
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
    const stream = openStream(request, reply, ctx);
    if (stream.closed) return;
    let lastKey: string | null = null;
    let lastStatus: string | null = null;
    let lastSeq = lastEventId ?? -1;
    const send = (snap: JobSnapshot) => {
      const seq = changeSeq(snap);
      const key = snapshotKey(snap);
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

  app.get('/v1/events', { schema: routeSchemas.feed, config: { streamRoute: true, tenantScope: true } }, async (request, reply) => {
    assertGrant(request, '*');
    const stream = openStream(request, reply, ctx);
    const names = new FeedEventNames();
    const unsubscribe = feed.subscribe(request.tenant, (snap) => {
      stream.write(sseFrame(changeSeq(snap), names.next(snap), snap));
    });
    stream.onClose(unsubscribe);
  });
}

/**
 * One `/v1/ws` connection (see websocket.ts): `{"op": "subscribe" | "unsubscribe" | "cancel", "id"}`
 * messages in, `{"type": "snapshot", job}` and `{"type": "error", ...}` out. A job's snapshots
 * go out in order, whatever their route (the hub, the answer to a cancel), and each only once
 * (core/snapshot-order.ts); a client that stops reading is dropped like a slow SSE client.
 */
export function webSocketSession({ lh, hub, streamBufferBytes, log, limits, maxSubscriptionsPerSocket }: AppContext): (socket: WebSocket, caller: Caller) => void {
  return (socket, caller) => {
    const { tenant, grant } = caller;
    // One of the tenant's stream slots, given back when the socket closes, however it closes
    // ('close' is emitted after a close handshake, a terminate, a protocol error or a reset).
    const slot = limits.acquire(tenant, 'websocket');
    if (!slot) {
      socket.close(1008, tooManyStreams(limits.maxStreamsPerTenant));
      return;
    }
    socket.on('close', slot);
    const subs = new Map<string, () => void>();
    /** The last snapshot sent of each subscribed job. */
    const sent = new Map<string, JobSnapshot>();
    const send = (msg: unknown) => {
      if (socket.readyState !== socket.OPEN) return;
      socket.send(JSON.stringify(msg));
      if (socket.bufferedAmount > streamBufferBytes) {
        log.warn({ tenant, buffered: socket.bufferedAmount }, 'WebSocket client is not reading: connection dropped');
        socket.terminate();
      }
    };
    const sendSnapshot = (job: JobSnapshot) => {
      const next = nextInOrder(sent.get(job.id), job);
      if (!next) return;
      if (subs.has(job.id)) sent.set(job.id, next);
      send({ type: 'snapshot', job: next });
    };
    const release = (id: string) => {
      subs.get(id)?.();
      subs.delete(id);
      sent.delete(id);
    };
    const fail = (id: string | undefined, err: unknown) => {
      const p = toProblem(err);
      send({ type: 'error', ...(id ? { id } : {}), status: p.status, code: p.code, message: p.message });
    };
    const handle = async (data: Buffer, isBinary: boolean) => {
      let msg: { op?: unknown; id?: unknown };
      try {
        msg = parseJson(isBinary ? '' : data.toString('utf8')) as { op?: unknown; id?: unknown };
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
          if (subs.size >= maxSubscriptionsPerSocket) {
            limits.refusedSubscription();
            throw new HttpProblem(429, 'TOO_MANY_SUBSCRIPTIONS', `this socket holds ${maxSubscriptionsPerSocket} subscriptions, the most it may; unsubscribe from one first`);
          }
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
            next: sendSnapshot,
            end: (err) => {
              release(id);
              if (err) fail(id, err);
            },
          });
          subs.set(id, off);
        } else if (msg.op === 'unsubscribe') {
          release(id);
        } else {
          if (grant) throw new HttpProblem(401, 'UNAUTHORIZED', 'stream tokens cannot cancel jobs; use an API key');
          sendSnapshot(await lh.cancel(id, { tenant }));
        }
      } catch (err) {
        fail(id, err);
      }
    };
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      handle(data, isBinary).catch((err) => log.error({ err, tenant }, 'WebSocket message handling failed'));
    });
    socket.on('close', () => {
      for (const off of subs.values()) off();
      subs.clear();
      sent.clear();
    });
  };
}
