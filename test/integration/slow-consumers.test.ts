/**
 * Clients that stop reading: 1,000 connections (half on the SSE feed `/v1/events`, half
 * WebSockets subscribed to running jobs) that never read a byte while the jobs send large
 * snapshots. The server must drop each once its unsent buffer passes the limit, so that its
 * memory stays bounded (about the limit per connection), and carry on serving.
 * The figures it prints are quoted in docs/operations.md.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { JobSnapshot } from '../../src/core/job.js';
import { type Dev, startDev } from '../support/dev-process.js';
import { encodeFrame } from '../support/ws-raw.js';

const CLIENTS = 1000;
const LIMIT = 64 * 1024;
const PAD = 'x'.repeat(32 * 1024); // every snapshot of these jobs carries 32 KiB of metadata

function rssMiB(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return kb / 1024;
}

/** A client that sends its request and never reads; `closed` resolves once the server hung up. */
async function stalledClient(base: string, request: Buffer): Promise<{ socket: Socket; closed: Promise<void> }> {
  const url = new URL(base);
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.pause();
  socket.write(request);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, closed };
}

describe('clients that stop reading', { timeout: 240_000 }, () => {
  let dir: string;
  let dev: Dev;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lh-slow-'));
    // Its 1,000 clients are one tenant's (keyless dev): past the default stream cap of 100.
    dev = await startDev(join(dir, 'lh.db'), { LONGHAUL_STREAM_BUFFER_BYTES: String(LIMIT), LONGHAUL_MAX_STREAMS_PER_TENANT: String(CLIENTS * 2) });
  });
  after(() => {
    dev?.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  async function submit(steps: number): Promise<JobSnapshot> {
    const res = await fetch(`${dev.base}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'demo.sleep', input: { steps, stepMs: 40 }, metadata: { pad: PAD } }),
    });
    assert.equal(res.status, 202);
    return (await res.json()) as JobSnapshot;
  }

  it(`${CLIENTS} of them are dropped past the buffer limit; memory stays bounded and the server serves on`, async () => {
    const pid = dev.child.pid as number;
    const host = new URL(dev.base).host;
    const rssBefore = rssMiB(pid);
    const clients: { socket: Socket; closed: Promise<void> }[] = [];
    const handshake = `GET /v1/ws HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;
    for (let i = 0; i < CLIENTS; i++) {
      const request = i % 2 === 0 ? `GET /v1/events HTTP/1.1\r\nHost: ${host}\r\n\r\n` : handshake;
      clients.push(await stalledClient(dev.base, Buffer.from(request)));
    }
    // Traffic: jobs with large snapshots and their progress, each followed by every WebSocket.
    const jobs = await Promise.all(Array.from({ length: 40 }, () => submit(30)));
    const subscribe = Buffer.concat(jobs.map((j) => encodeFrame({ opcode: 1, payload: Buffer.from(JSON.stringify({ op: 'subscribe', id: j.id })) })));
    for (const [i, c] of clients.entries()) if (i % 2 === 1) c.socket.write(subscribe);
    let peak = rssMiB(pid);
    const deadline = Date.now() + 60_000;
    let open = CLIENTS;
    // Hung-up sockets are only noticed by reading: resume each now and then to count them.
    let dropped = 0;
    const droppedKind = [0, 0];
    for (const [i, c] of clients.entries()) void c.closed.then(() => { dropped++; droppedKind[i % 2] = (droppedKind[i % 2] as number) + 1; });
    while (Date.now() < deadline) {
      peak = Math.max(peak, rssMiB(pid));
      const states = await Promise.all(jobs.map(async (j) => ((await (await fetch(`${dev.base}/v1/jobs/${j.id}`)).json()) as JobSnapshot).status));
      if (states.every((s) => s === 'succeeded')) break;
      await sleep(250);
    }
    const rssAfterTraffic = rssMiB(pid);
    for (const c of clients) c.socket.resume();
    const until = Date.now() + 30_000;
    while (dropped < CLIENTS && Date.now() < until) await sleep(100);
    open = CLIENTS - dropped;
    for (const c of clients) c.socket.destroy();
    const growth = peak - rssBefore;
    process.stdout.write(
      `# slow consumers: ${CLIENTS} clients, limit ${LIMIT / 1024} KiB, 40 jobs × 32 KiB snapshots: RSS ${rssBefore.toFixed(0)} MiB before, peak ${peak.toFixed(0)} MiB (+${growth.toFixed(0)}), ${rssAfterTraffic.toFixed(0)} MiB after; ${dropped} dropped (${droppedKind.join(' SSE, ')} WebSocket)\n`,
    );
    assert.equal(open, 0, `${open} of ${CLIENTS} stalled connections were still open`);
    // Each dropped client may have held up to the limit plus one frame, and the buffers of the
    // dropped ones are freed only when V8 next collects (lazily on Node 24+: 154 MiB alone, up
    // to 370 MiB beside the rest of the suite). Without the limit every connection would hold
    // its jobs' every frame: about 10 MiB each, 10 GiB in all.
    assert.ok(growth < (CLIENTS * 8 * LIMIT) / 2 ** 20 + 150, `RSS grew by ${growth.toFixed(0)} MiB`);
    const health = await fetch(`${dev.base}/healthz`);
    assert.equal(health.status, 200);
  });
});
