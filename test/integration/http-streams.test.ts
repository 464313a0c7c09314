/**
 * Live streams of the HTTP API (docs/api.md): per-job SSE with a real EventSource and with raw
 * requests (resume with Last-Event-ID, keepalives, 204), the tenant-wide feed, fan-out of many
 * clients over one subscription, and the WebSocket protocol.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { EventSource } from 'eventsource';
import WebSocket from 'ws';
import type { JobSnapshot } from '../../src/core/job.js';
import { snapshotKey } from '../../src/core/snapshot-order.js';
import type { Longhaul } from '../../src/longhaul.js';
import { JobHub } from '../../src/server/hub.js';
import { changeSeq, statusKey } from '../../src/server/sse.js';
import { call, type Harness, KEY_A, KEY_B, newGate, release, startHarness, submit, TERMINAL, until, untilJob } from '../support/http-harness.js';

// ---- a raw SSE reader ------------------------------------------------------------------------------

interface Frame {
  id: number;
  event: string;
  data: JobSnapshot;
}

class SseReader {
  readonly frames: Frame[] = [];
  readonly comments: string[] = [];
  retry: string | null = null;
  ended = false;
  private readonly ctl = new AbortController();
  private buffer = '';

  private constructor(readonly status: number) {}

  static async open(url: string, headers: Record<string, string> = {}): Promise<SseReader> {
    const reader0 = new AbortController();
    const res = await fetch(url, { headers, signal: reader0.signal });
    const sse = new SseReader(res.status);
    sse.ctl.signal.addEventListener('abort', () => reader0.abort());
    if (res.status !== 200 || !res.body) {
      await res.arrayBuffer().catch(() => undefined);
      sse.ended = true;
      return sse;
    }
    const decoder = new TextDecoder();
    const reader = res.body.getReader();
    void (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          sse.feed(decoder.decode(value, { stream: true }));
        }
      } catch {
        // aborted by close()
      }
      sse.ended = true;
    })();
    return sse;
  }

  private feed(chunk: string): void {
    this.buffer += chunk;
    for (let i = this.buffer.indexOf('\n\n'); i >= 0; i = this.buffer.indexOf('\n\n')) {
      const block = this.buffer.slice(0, i);
      this.buffer = this.buffer.slice(i + 2);
      const fields: Record<string, string> = {};
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) this.comments.push(line.slice(1).trim());
        else {
          const c = line.indexOf(':');
          fields[line.slice(0, c)] = line.slice(c + 1).replace(/^ /, '');
        }
      }
      if (fields.retry !== undefined) this.retry = fields.retry;
      if (fields.data !== undefined) {
        this.frames.push({ id: Number(fields.id), event: fields.event ?? 'message', data: JSON.parse(fields.data) as JobSnapshot });
      }
    }
  }

  waitFor(pred: (r: SseReader) => boolean, what: string, timeoutMs = 8_000): Promise<true> {
    return until(() => pred(this) || undefined, `${what} (frames: ${this.frames.map((f) => `${f.event}:${f.data.status}`).join(',')})`, timeoutMs);
  }

  waitEnd(what: string, timeoutMs?: number): Promise<true> {
    return this.waitFor((r) => r.ended, `${what}: the stream to end`, timeoutMs);
  }

  close(): void {
    this.ctl.abort();
  }
}

const auth = (key = KEY_A) => ({ authorization: `Bearer ${key}` });

/** The per-frame invariants of a job stream: ids increase strictly, equal the change sequence, and event names follow the status. */
function assertFrameInvariants(frames: Frame[], after = -1): void {
  let prev: Frame | null = null;
  for (const f of frames) {
    assert.ok(Number.isSafeInteger(f.id), `numeric id ${f.id}`);
    assert.ok(f.id > (prev?.id ?? after), `ids strictly increase: ${prev?.id ?? after} then ${f.id}`);
    assert.equal(f.id, changeSeq(f.data), 'id is the change sequence');
    assert.ok(f.event === 'status' || f.event === 'progress', f.event);
    if (prev === null) assert.equal(f.event, 'status', 'the first frame is a status frame');
    else assert.equal(f.event, statusKey(f.data) === statusKey(prev.data) ? 'progress' : 'status', `event name of ${f.data.status} after ${prev.data.status}`);
    prev = f;
  }
}

// ---- a small WebSocket client ----------------------------------------------------------------------

interface WsClient {
  ws: WebSocket;
  // biome-ignore lint/suspicious/noExplicitAny: messages are inspected loosely
  msgs: any[];
  send(msg: unknown): void;
  // biome-ignore lint/suspicious/noExplicitAny: messages are inspected loosely
  waitFor(pred: (m: any) => boolean, what: string): Promise<any>;
}

function openWs(url: string, headers: Record<string, string> = {}): Promise<WsClient> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    const client: WsClient = {
      ws,
      msgs: [],
      send: (msg) => ws.send(typeof msg === 'string' ? msg : JSON.stringify(msg)),
      waitFor: (pred, what) =>
        until(
          () => client.msgs.find(pred),
          `${what} (got ${JSON.stringify(client.msgs.map((m) => (m.type === 'snapshot' ? `${m.job.id.slice(-4)}:${m.job.status}` : m)))})`,
        ),
    };
    ws.on('message', (data) => client.msgs.push(JSON.parse(String(data))));
    ws.once('open', () => resolve(client));
    ws.once('unexpected-response', (req, res) => {
      req.destroy();
      reject(Object.assign(new Error(`upgrade refused: ${res.statusCode}`), { status: res.statusCode }));
    });
    ws.once('error', reject);
  });
}

describe('HTTP streams', () => {
  let h: Harness;
  const readers: SseReader[] = [];
  const sockets: WebSocket[] = [];
  const sse = async (path: string, headers: Record<string, string> = auth()) => {
    const r = await SseReader.open(`${h.base}${path}`, headers);
    readers.push(r);
    return r;
  };
  const ws = async (path = '/v1/ws', headers: Record<string, string> = auth()) => {
    const c = await openWs(`${h.base.replace(/^http/, 'ws')}${path}`, headers);
    sockets.push(c.ws);
    return c;
  };

  before(async () => {
    // The fan-out test opens 200 streams of one tenant: past the default cap of 100 (stream-limits.ts).
    h = await startHarness({ keepaliveMs: 100, server: { maxStreamsPerTenant: 1000 } });
  });
  after(async () => {
    for (const r of readers) r.close();
    for (const s of sockets) s.terminate();
    await h?.close();
  });

  // ---- per-job SSE ---------------------------------------------------------------------------------

  describe('GET /v1/jobs/{id}/events', () => {
    it('streams to a real EventSource: current snapshot first, status/progress frames with increasing ids, ends at the terminal frame and is not resumed (204)', async () => {
      const job = await submit(h.base, 't.steps', { steps: 6, stepMs: 40 });
      const { token } = (await call(h.base, '/v1/stream-tokens', { body: { jobs: [job.id] } })).json as { token: string };
      const es = new EventSource(`${h.base}/v1/jobs/${job.id}/events?token=${encodeURIComponent(token)}`);
      const frames: Frame[] = [];
      const errors: { code: number | undefined; readyState: number }[] = [];
      let opens = 0;
      const onFrame = (e: MessageEvent) => frames.push({ id: Number(e.lastEventId), event: e.type, data: JSON.parse(e.data) });
      es.addEventListener('status', onFrame);
      es.addEventListener('progress', onFrame);
      es.addEventListener('open', () => opens++);
      es.addEventListener('error', (e) => errors.push({ code: (e as Event & { code?: number }).code, readyState: es.readyState }));
      try {
        await until(() => errors.some((e) => e.code === 204), 'EventSource to be refused with 204 after the terminal frame', 8_000);
        await until(() => es.readyState === EventSource.CLOSED, 'EventSource CLOSED');
      } finally {
        es.close();
      }
      assert.equal(opens, 1, 'one stream; the reconnect got 204, not a second stream');
      assert.ok(frames.length >= 3, `frames: ${frames.map((f) => f.event).join(',')}`);
      assert.equal(frames[0]?.event, 'status');
      assert.equal(frames[0]?.data.id, job.id);
      assertFrameInvariants(frames);
      assert.ok(
        frames.some((f) => f.event === 'progress'),
        'progress frames',
      );
      const last = frames.at(-1) as Frame;
      assert.equal(last.event, 'status');
      assert.equal(last.data.status, 'succeeded');
      assert.equal(last.data.progress.percent, 100);
      assert.deepEqual(last.data.result, { steps: 6 });
      assert.equal(frames.filter((f) => TERMINAL.has(f.data.status)).length, 1, 'exactly one terminal frame');
      assert.equal(es.readyState, EventSource.CLOSED);
    });

    it('sends the retry hint and keepalive comments', async () => {
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g });
      const r = await sse(`/v1/jobs/${job.id}/events`);
      assert.equal(r.status, 200);
      await r.waitFor((x) => x.frames.length >= 1 && x.comments.includes('keepalive'), 'a frame and a keepalive');
      assert.equal(r.retry, '2000');
      r.close();
      release(g);
    });

    it('a terminal job: one status frame then the end; 204 when Last-Event-ID is already its last frame', async () => {
      const job = await submit(h.base, 't.quick');
      const done = await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
      const seq = changeSeq(done);
      const r = await sse(`/v1/jobs/${job.id}/events`);
      await r.waitEnd('terminal job');
      assert.equal(r.frames.length, 1);
      assert.equal(r.frames[0]?.event, 'status');
      assert.equal(r.frames[0]?.id, seq);
      assert.equal(r.frames[0]?.data.status, 'succeeded');

      const caughtUp = await fetch(`${h.base}/v1/jobs/${job.id}/events`, { headers: { ...auth(), 'last-event-id': String(seq) } });
      assert.equal(caughtUp.status, 204);
      assert.equal(await caughtUp.text(), '');
      const ahead = await fetch(`${h.base}/v1/jobs/${job.id}/events`, { headers: { ...auth(), 'last-event-id': String(seq + 1000) } });
      assert.equal(ahead.status, 204);
      await ahead.arrayBuffer();

      const behind = await sse(`/v1/jobs/${job.id}/events`, { ...auth(), 'last-event-id': String(seq - 1) });
      await behind.waitEnd('behind by one');
      assert.deepEqual(
        behind.frames.map((f) => [f.id, f.data.status]),
        [[seq, 'succeeded']],
      );
    });

    it('resumes after Last-Event-ID with only newer state', async () => {
      const job = await submit(h.base, 't.steps', { steps: 12, stepMs: 50 });
      const first = await sse(`/v1/jobs/${job.id}/events`);
      await first.waitFor((r) => r.frames.length >= 3, 'three frames');
      first.close();
      await first.waitEnd('the dropped connection');
      const seen = [...first.frames];
      const lastId = (seen.at(-1) as Frame).id;
      assertFrameInvariants(seen);
      // Let the job move on while nobody watches.
      await untilJob(h.lh, job.id, (s) => changeSeq(s) > lastId + 100, 'progress while disconnected');
      const resumed = await sse(`/v1/jobs/${job.id}/events`, { ...auth(), 'last-event-id': String(lastId) });
      assert.equal(resumed.status, 200);
      await resumed.waitEnd('resumed stream');
      assert.ok(resumed.frames.length >= 1);
      for (const f of resumed.frames) assert.ok(f.id > lastId, `frame ${f.id} is newer than ${lastId}`);
      assertFrameInvariants(resumed.frames, lastId);
      assert.equal(resumed.frames.at(-1)?.data.status, 'succeeded');
      assert.equal(resumed.frames.at(-1)?.data.progress.itemsDone, 12);
    });

    it('a resume with nothing newer sends nothing until the job changes', async () => {
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g });
      const running = await untilJob(h.lh, job.id, (s) => s.status === 'running' && s.progress.stage === 'blocked', 'running and blocked');
      const a = await sse(`/v1/jobs/${job.id}/events`);
      await a.waitFor((r) => r.frames.length >= 1, 'first frame');
      const lastId = (a.frames.at(-1) as Frame).id;
      assert.equal(lastId, changeSeq(running));
      a.close();
      const b = await sse(`/v1/jobs/${job.id}/events`, { ...auth(), 'last-event-id': String(lastId) });
      const keepalives = b.comments.length;
      await b.waitFor((r) => r.comments.length >= keepalives + 2, 'two keepalives');
      assert.equal(b.frames.length, 0, 'nothing newer than Last-Event-ID');
      release(g);
      await b.waitEnd('after release');
      assert.ok(b.frames.length >= 1);
      assertFrameInvariants(b.frames, lastId);
      assert.equal(b.frames.at(-1)?.data.status, 'succeeded');
    });

    it('a cancel request is a status frame, and so is the cancelled end', async () => {
      const job = await submit(h.base, 't.block', { gate: newGate() });
      await untilJob(h.lh, job.id, (s) => s.status === 'running' && s.progress.stage === 'blocked', 'running');
      const r = await sse(`/v1/jobs/${job.id}/events`);
      await r.waitFor((x) => x.frames.length >= 1, 'first frame');
      assert.equal((await call(h.base, `/v1/jobs/${job.id}/cancel`, { method: 'POST' })).status, 202);
      await r.waitEnd('cancelled stream');
      assertFrameInvariants(r.frames);
      const last = r.frames.at(-1) as Frame;
      assert.equal(last.event, 'status');
      assert.equal(last.data.status, 'cancelled');
      const requested = r.frames.find((f) => f.data.status === 'running' && f.data.cancelRequested);
      if (requested) assert.equal(requested.event, 'status', 'cancel requested is a status change');
    });

    it('404 for an unknown job, 401 without credentials', async () => {
      const res = await fetch(`${h.base}/v1/jobs/${randomUUID()}/events`, { headers: auth() });
      assert.equal(res.status, 404);
      assert.ok(res.headers.get('content-type')?.startsWith('application/problem+json'));
      assert.equal(((await res.json()) as { code: string }).code, 'NOT_FOUND');
      const job = await submit(h.base, 't.quick');
      const anon = await fetch(`${h.base}/v1/jobs/${job.id}/events`);
      assert.equal(anon.status, 401);
      await anon.arrayBuffer();
      const other = await fetch(`${h.base}/v1/jobs/${job.id}/events`, { headers: auth(KEY_B) });
      assert.equal(other.status, 404);
      await other.arrayBuffer();
    });

    it('EventSource with an Authorization header through its fetch option', async () => {
      const job = await submit(h.base, 't.steps', { steps: 2, stepMs: 20 });
      const es = new EventSource(`${h.base}/v1/jobs/${job.id}/events`, {
        fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), ...auth() } }),
      });
      const statuses: string[] = [];
      es.addEventListener('status', (e) => statuses.push(JSON.parse(e.data).status));
      try {
        await until(() => statuses.includes('succeeded') || undefined, 'terminal status via EventSource');
      } finally {
        es.close();
      }
      assert.equal(statuses.at(-1), 'succeeded');
    });
  });

  // ---- the tenant-wide feed -------------------------------------------------------------------------

  describe('GET /v1/events', () => {
    it('delivers changes to the tenant’s jobs only', async () => {
      const old = await submit(h.base, 't.quick');
      await untilJob(h.lh, old.id, (s) => TERMINAL.has(s.status), 'a job finished before the feed opens');
      const feedA = await sse('/v1/events', auth(KEY_A));
      const feedB = await sse('/v1/events', auth(KEY_B));
      assert.equal(feedA.status, 200);
      await feedA.waitFor((r) => r.retry === '2000', 'the retry hint');
      const bJob = await submit(h.base, 't.quick', { who: 'B' }, {}, KEY_B);
      await feedB.waitFor((r) => r.frames.some((f) => f.data.id === bJob.id && f.data.status === 'succeeded'), 'B sees its job finish');
      const aJob = await submit(h.base, 't.steps', { steps: 3, stepMs: 30 }, {}, KEY_A);
      await feedA.waitFor((r) => r.frames.some((f) => f.data.id === aJob.id && f.data.status === 'succeeded'), 'A sees its job finish');
      assert.ok(!feedA.frames.some((f) => f.data.id === bJob.id), 'A never sees B’s job');
      assert.ok(!feedA.frames.some((f) => f.data.id === old.id), 'no replay of the past');
      const aFrames = feedA.frames.filter((f) => f.data.id === aJob.id);
      assert.equal(aFrames[0]?.event, 'status');
      for (const f of aFrames) {
        assert.equal(f.id, changeSeq(f.data));
        assert.ok(f.event === 'status' || f.event === 'progress');
      }
      assert.equal(aFrames.at(-1)?.event, 'status');
      assert.ok(
        aFrames.some((f) => f.event === 'progress'),
        `progress frames in the feed: ${aFrames.map((f) => f.event)}`,
      );
      assert.ok(!feedB.frames.some((f) => f.data.id === aJob.id), 'B never sees A’s job');
      assert.equal(feedA.ended, false, 'the feed stays open');
      feedA.close();
      feedB.close();
    });

    it('requires credentials', async () => {
      const res = await fetch(`${h.base}/v1/events`);
      assert.equal(res.status, 401);
      await res.arrayBuffer();
    });
  });

  // ---- fan-out ---------------------------------------------------------------------------------------

  describe('fan-out', () => {
    it('200 SSE clients on one job share one subscription and all receive the terminal frame', async () => {
      await until(() => h.app.jobHub.watchedJobs === 0 || undefined, 'no watched jobs left by earlier tests');
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g });
      await untilJob(h.lh, job.id, (s) => s.status === 'running', 'running');
      const clients = await Promise.all(Array.from({ length: 200 }, () => sse(`/v1/jobs/${job.id}/events`)));
      assert.ok(clients.every((c) => c.status === 200));
      await until(() => clients.every((c) => c.frames.length >= 1) || undefined, 'every client’s first frame', 15_000);
      assert.equal(h.app.jobHub.watchedJobs, 1, 'one watch for 200 clients');
      release(g);
      await until(() => clients.every((c) => c.ended) || undefined, 'every stream to end', 15_000);
      for (const c of clients) {
        assert.equal(c.frames.at(-1)?.data.status, 'succeeded');
        assert.equal(c.frames.at(-1)?.event, 'status');
        assertFrameInvariants(c.frames);
      }
      await until(() => h.app.jobHub.watchedJobs === 0 || undefined, 'the watch to be released');
    });
  });

  // ---- WebSocket --------------------------------------------------------------------------------------

  describe('GET /v1/ws', () => {
    it('subscribe: a snapshot at once, then every change up to the terminal one', async () => {
      const c = await ws();
      const job = await submit(h.base, 't.steps', { steps: 4, stepMs: 40 });
      c.send({ op: 'subscribe', id: job.id });
      await c.waitFor((m) => m.type === 'snapshot' && m.job.status === 'succeeded', 'terminal snapshot');
      const snaps = c.msgs.filter((m) => m.type === 'snapshot');
      assert.ok(snaps.every((m) => m.job.id === job.id));
      assert.ok(snaps.length >= 3, `snapshots: ${snaps.length}`);
      assert.equal(snaps.filter((m) => TERMINAL.has(m.job.status)).length, 1);
      assert.equal(snaps.at(-1).job.status, 'succeeded');
      assert.equal(snaps.at(-1).job.progress.percent, 100);
      const seqs = snaps.map((m) => changeSeq(m.job));
      for (let i = 1; i < seqs.length; i++) assert.ok((seqs[i] as number) > (seqs[i - 1] as number), 'snapshots move forward');
      // Subscribing to a finished job answers its snapshot.
      c.send({ op: 'subscribe', id: job.id });
      await until(() => c.msgs.filter((m) => m.type === 'snapshot').length > snaps.length || undefined, 'snapshot of the finished job');
      assert.equal(c.msgs.at(-1).job.status, 'succeeded');
    });

    it('unsubscribe stops updates', async () => {
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g });
      await untilJob(h.lh, job.id, (s) => s.status === 'running' && s.progress.stage === 'blocked', 'running');
      const [quiet, control] = [await ws(), await ws()];
      for (const c of [quiet, control]) {
        c.send({ op: 'subscribe', id: job.id });
        await c.waitFor((m) => m.type === 'snapshot' && m.job.id === job.id, 'first snapshot');
      }
      quiet.send({ op: 'unsubscribe', id: job.id });
      const sentinel = await submit(h.base, 't.quick');
      await untilJob(h.lh, sentinel.id, (s) => TERMINAL.has(s.status), 'sentinel done');
      quiet.send({ op: 'subscribe', id: sentinel.id }); // processed after the unsubscribe
      await quiet.waitFor((m) => m.type === 'snapshot' && m.job.id === sentinel.id, 'sentinel snapshot');
      const before = quiet.msgs.filter((m) => m.job?.id === job.id).length;
      release(g);
      await control.waitFor((m) => m.type === 'snapshot' && m.job.id === job.id && m.job.status === 'succeeded', 'the control client sees the end');
      const sentinel2 = await submit(h.base, 't.quick');
      await untilJob(h.lh, sentinel2.id, (s) => TERMINAL.has(s.status), 'sentinel done');
      quiet.send({ op: 'subscribe', id: sentinel2.id });
      await quiet.waitFor((m) => m.type === 'snapshot' && m.job.id === sentinel2.id, 'second sentinel snapshot');
      assert.equal(quiet.msgs.filter((m) => m.job?.id === job.id).length, before, 'no updates after unsubscribe');
    });

    it('cancel: a snapshot with cancelRequested for a running job (then cancelled), cancelled for a pending one, an error for a finished one', async () => {
      const c = await ws();
      const job = await submit(h.base, 't.block', { gate: newGate() });
      await untilJob(h.lh, job.id, (s) => s.status === 'running', 'running');
      c.send({ op: 'subscribe', id: job.id });
      await c.waitFor((m) => m.type === 'snapshot' && m.job.id === job.id, 'first snapshot');
      c.send({ op: 'cancel', id: job.id });
      await c.waitFor((m) => m.type === 'snapshot' && m.job.id === job.id && (m.job.cancelRequested || m.job.status === 'cancelled'), 'cancel acknowledged');
      await c.waitFor((m) => m.type === 'snapshot' && m.job.id === job.id && m.job.status === 'cancelled', 'cancelled');

      const pending = await submit(h.base, 't.quick', undefined, { delayMs: 60_000 });
      c.send({ op: 'cancel', id: pending.id });
      await c.waitFor((m) => m.type === 'snapshot' && m.job.id === pending.id && m.job.status === 'cancelled', 'pending job cancelled');

      c.send({ op: 'cancel', id: pending.id });
      const err = await c.waitFor((m) => m.type === 'error' && m.id === pending.id, 'refused cancel');
      assert.equal(err.status, 409);
      assert.equal(err.code, 'STATE_CONFLICT');
      assert.equal(typeof err.message, 'string');
    });

    it('a cancel answered mid-progress never steps the socket back in time, and no snapshot comes twice (three tries)', async () => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const c = await ws();
        const job = await submit(h.base, 't.steps', { steps: 200, stepMs: 5 });
        c.send({ op: 'subscribe', id: job.id });
        await c.waitFor((m) => m.type === 'snapshot' && m.job.progress.itemsDone >= 20, 'progress under way');
        c.send({ op: 'cancel', id: job.id });
        await c.waitFor((m) => m.type === 'snapshot' && m.job.status === 'cancelled', 'cancelled');
        const snaps = c.msgs.filter((m) => m.type === 'snapshot').map((m) => m.job as JobSnapshot);
        const done = snaps.map((s) => s.progress.itemsDone ?? 0);
        for (let i = 1; i < snaps.length; i++) {
          assert.ok((done[i] as number) >= (done[i - 1] as number), `items done never go back: ${done.join(' ')}`);
          assert.notEqual(snapshotKey(snaps[i] as JobSnapshot), snapshotKey(snaps[i - 1] as JobSnapshot), `snapshot ${i} repeats the one before`);
        }
        assert.ok(snaps.some((s) => s.cancelRequested), 'the cancel answer was sent');
        c.ws.terminate();
      }
    });

    it('bad messages, unknown jobs and other tenants’ jobs are error messages; the socket stays open', async () => {
      const c = await ws();
      const bJob = await submit(h.base, 't.block', { gate: newGate() }, {}, KEY_B);
      const unknown = randomUUID();
      const sends: [unknown, (m: { status: number; code: string; id?: string }) => boolean][] = [
        ['{not json', (m) => m.status === 400 && m.code === 'MALFORMED_JSON'],
        ['null', (m) => m.status === 400],
        ['42', (m) => m.status === 400],
        ['[]', (m) => m.status === 400],
        [{ op: 'explode', id: 'x1' }, (m) => m.status === 400 && m.code === 'INVALID_MESSAGE' && m.id === 'x1'],
        [{ op: 'subscribe' }, (m) => m.status === 400 && m.code === 'INVALID_MESSAGE'],
        [{ op: 'subscribe', id: 7 }, (m) => m.status === 400],
        [{ op: 'subscribe', id: unknown }, (m) => m.status === 404 && m.code === 'NOT_FOUND' && m.id === unknown],
        [{ op: 'subscribe', id: bJob.id }, (m) => m.status === 404 && m.id === bJob.id],
        [{ op: 'cancel', id: bJob.id }, (m) => m.status === 404 && m.id === bJob.id],
      ];
      for (const [i, [msg, check]] of sends.entries()) {
        const n = c.msgs.length;
        c.send(msg);
        await until(() => c.msgs.length > n || undefined, `an answer to message #${i} ${JSON.stringify(msg)}`);
        const answer = c.msgs[n];
        assert.equal(answer.type, 'error', JSON.stringify(answer));
        assert.ok(check(answer), `message #${i} ${JSON.stringify(msg)} → ${JSON.stringify(answer)}`);
        assert.equal(c.ws.readyState, WebSocket.OPEN);
      }
      const n = c.msgs.length;
      c.ws.send(Buffer.from([0xff, 0x00, 0x01]), { binary: true });
      await until(() => c.msgs.length > n || undefined, 'an answer to a binary frame');
      assert.equal(c.msgs[n].type, 'error');
      assert.equal((await h.lh.get(bJob.id))?.cancelRequested, false, 'B’s job untouched');
      // Still usable.
      const job = await submit(h.base, 't.quick');
      c.send({ op: 'subscribe', id: job.id });
      await c.waitFor((m) => m.type === 'snapshot' && m.job.id === job.id, 'a snapshot after the errors');
      await h.lh.cancel(bJob.id, { tenant: 'tenantB' });
    });

    it('a repeated subscribe subscribes once; an unsubscribe right after a subscribe wins; closing releases everything', async () => {
      await until(() => h.app.jobHub.watchedJobs === 0 || undefined, 'no watched jobs left by earlier tests');
      const g = newGate();
      const job = await submit(h.base, 't.block', { gate: g });
      await untilJob(h.lh, job.id, (s) => s.status === 'running' && s.progress.stage === 'blocked', 'running');
      const twice = await ws();
      twice.send({ op: 'subscribe', id: job.id });
      twice.send({ op: 'subscribe', id: job.id });
      const flip = await ws();
      flip.send({ op: 'subscribe', id: job.id });
      flip.send({ op: 'unsubscribe', id: job.id });
      // Round trips on both sockets: everything sent before has been handled.
      const done = await submit(h.base, 't.quick');
      await untilJob(h.lh, done.id, (s) => TERMINAL.has(s.status), 'sentinel');
      for (const c of [twice, flip]) {
        c.send({ op: 'subscribe', id: done.id });
        await c.waitFor((m) => m.type === 'snapshot' && m.job.id === done.id, 'sentinel snapshot');
      }
      assert.equal(twice.msgs.filter((m) => m.job?.id === job.id).length, 1, 'one snapshot for two subscribes');
      assert.equal(h.app.jobHub.watchedJobs, 1);
      twice.ws.close();
      await until(() => h.app.jobHub.watchedJobs === 0 || undefined, 'closing the socket releases its subscriptions');
      const seen = flip.msgs.filter((m) => m.job?.id === job.id).length;
      assert.ok(seen <= 1, `at most the snapshot sent before the unsubscribe (got ${seen})`);
      release(g);
      await untilJob(h.lh, job.id, (s) => TERMINAL.has(s.status), 'terminal');
      const done2 = await submit(h.base, 't.quick');
      await untilJob(h.lh, done2.id, (s) => TERMINAL.has(s.status), 'sentinel');
      flip.send({ op: 'subscribe', id: done2.id });
      await flip.waitFor((m) => m.type === 'snapshot' && m.job.id === done2.id, 'second sentinel');
      assert.equal(flip.msgs.filter((m) => m.job?.id === job.id).length, seen, 'no updates after the unsubscribe');
    });

    it('authenticates with the Authorization header or ?token=', async () => {
      await assert.rejects(ws('/v1/ws', {}), (e: { status?: number }) => e.status === 401);
      await assert.rejects(ws('/v1/ws', { authorization: 'Bearer not-a-key' }), (e: { status?: number }) => e.status === 401);
      await assert.rejects(ws('/v1/ws?token=forged.token', {}), (e: { status?: number }) => e.status === 401);

      const g = newGate();
      const mine = await submit(h.base, 't.block', { gate: g });
      const other = await submit(h.base, 't.quick');
      const { token } = (await call(h.base, '/v1/stream-tokens', { body: { jobs: [mine.id] } })).json as { token: string };
      const c = await ws(`/v1/ws?token=${encodeURIComponent(token)}`, {});
      c.send({ op: 'subscribe', id: mine.id });
      await c.waitFor((m) => m.type === 'snapshot' && m.job.id === mine.id, 'the granted job');
      c.send({ op: 'subscribe', id: other.id });
      const denied = await c.waitFor((m) => m.type === 'error' && m.id === other.id, 'a job the token does not name');
      assert.equal(denied.status, 401);
      c.send({ op: 'cancel', id: mine.id });
      const noCancel = await c.waitFor((m) => m.type === 'error' && m.id === mine.id, 'cancel with a stream token');
      assert.equal(noCancel.status, 401);
      assert.equal((await h.lh.get(mine.id))?.cancelRequested, false);

      const all = (await call(h.base, '/v1/stream-tokens', { body: { all: true } })).json.token as string;
      const d = await ws(`/v1/ws?token=${encodeURIComponent(all)}`, {});
      d.send({ op: 'subscribe', id: other.id });
      await d.waitFor((m) => m.type === 'snapshot' && m.job.id === other.id, 'any job of the tenant with an all-token');
      const bJob = await submit(h.base, 't.quick', undefined, {}, KEY_B);
      d.send({ op: 'subscribe', id: bJob.id });
      assert.equal((await d.waitFor((m) => m.type === 'error' && m.id === bJob.id, 'another tenant’s job')).status, 404);
      release(g);
    });
  });

  describe('WebSocket upgrades elsewhere', () => {
    it('an upgrade of any other path is a 404 problem and its socket is closed; a plain GET /v1/ws is a 404', async () => {
      for (const path of ['/v1/jobs', '/v1/events', '/nowhere', '/v1/ws/extra']) {
        await assert.rejects(ws(path), (e: { status?: number }) => e.status === 404, path);
      }
      // The raw answer: a problem+json document, then the server closes the connection.
      const net = await import('node:net');
      const port = Number(new URL(h.base).port);
      const raw = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(port, '127.0.0.1', () => {
          socket.write('GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
        });
        let text = '';
        socket.on('data', (d) => {
          text += String(d);
        });
        socket.on('close', () => resolve(text));
        socket.on('error', reject);
        socket.setTimeout(5_000, () => reject(new Error('the server kept the socket open')));
      });
      assert.match(raw, /^HTTP\/1\.1 404 Not Found\r\n/);
      assert.match(raw, /content-type: application\/problem\+json/i);
      assert.equal(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)).code, 'NOT_FOUND');
      // The endpoint answers a percent-escaped path as the router would, and plain HTTP is a 404.
      const c = await ws('/v%31/ws');
      c.ws.close();
      const plain = await call(h.base, '/v1/ws');
      assert.equal(plain.status, 404);
    });
  });

  describe('shutdown', () => {
    it('app.close() ends open SSE streams and WebSockets instead of waiting for them', async () => {
      const x = await startHarness();
      let closed = false;
      try {
        const g = newGate();
        const job = await submit(x.base, 't.block', { gate: g });
        const perJob = await SseReader.open(`${x.base}/v1/jobs/${job.id}/events`, auth());
        const feed = await SseReader.open(`${x.base}/v1/events`, auth());
        const c = await openWs(`${x.base.replace(/^http/, 'ws')}/v1/ws`, auth());
        c.send({ op: 'subscribe', id: job.id });
        await c.waitFor((m) => m.type === 'snapshot', 'ws snapshot');
        await perJob.waitFor((r) => r.frames.length >= 1, 'sse frame');
        await feed.waitFor((r) => r.retry !== null, 'feed open');
        const wsClosed = new Promise<void>((resolve) => c.ws.once('close', () => resolve()));
        await x.close(); // fails after 5 s if a stream holds the server open
        closed = true;
        await perJob.waitEnd('per-job stream on shutdown');
        await feed.waitEnd('feed on shutdown');
        await wsClosed;
        release(g);
      } finally {
        if (!closed) await x.close().catch(() => undefined);
      }
    });
  });
});

describe('JobHub', () => {
  it('never hands a joining listener an older snapshot after a newer one, whatever the microtask timing', async () => {
    const snap = (n: number) => ({ id: 'j', status: 'running', n }) as unknown as JobSnapshot;
    for (let hops = 0; hops < 30; hops++) {
      let go!: () => void;
      const gate = new Promise<void>((resolve) => {
        go = resolve;
      });
      const fake = {
        async *watch() {
          yield snap(1);
          await gate;
          yield snap(2);
          await new Promise(() => undefined);
        },
      } as unknown as Longhaul;
      const hub = new JobHub(fake);
      const first: number[] = [];
      const joiner: number[] = [];
      const seq = (s: JobSnapshot) => (s as unknown as { n: number }).n;
      hub.subscribe('j', { next: (s) => first.push(seq(s)), end: () => undefined });
      await until(() => first.length === 1 || undefined, 'the first snapshot');
      go();
      let p = Promise.resolve();
      for (let i = 0; i < hops; i++) p = p.then(() => undefined);
      await p;
      hub.subscribe('j', { next: (s) => joiner.push(seq(s)), end: () => undefined });
      await until(() => joiner.includes(2) || undefined, `the joiner to see snapshot 2 (hops ${hops})`);
      await new Promise((resolve) => setImmediate(resolve));
      assert.ok(['2', '1,2'].includes(joiner.join()), `hops ${hops}: joiner saw ${joiner.join()}`);
      assert.equal(hub.watchedJobs, 1);
      hub.close();
      assert.equal(hub.watchedJobs, 0);
    }
  });
});
