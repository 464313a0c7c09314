/**
 * `/v1/ws` against peers that break the protocol, on a real `longhaul dev` process: an error
 * on one socket is that socket's end (closed with the code `ws` chose), never the process's.
 * After each bad frame `/healthz` answers, and a well-behaved client subscribed to a running
 * job receives its progress to the end, in order.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import type { JobSnapshot } from '../../src/core/job.js';
import { type Dev, startDev } from '../support/dev-process.js';
import { type Frame, RawWebSocket, seeded } from '../support/ws-raw.js';

const OP = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa } as const;

describe('/v1/ws with peers that break the protocol', { timeout: 180_000 }, () => {
  let dir: string;
  let dev: Dev;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lh-ws-'));
    dev = await startDev(join(dir, 'lh.db'));
  });
  after(() => {
    dev?.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  async function assertAlive(): Promise<void> {
    assert.equal(dev.child.exitCode, null, 'the server process exited');
    const res = await fetch(`${dev.base}/healthz`);
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }

  /** A client of the protocol's own subscribed to a running job: resolves with every snapshot it got, up to the terminal one. */
  async function watchRunningJob(steps: number, stepMs: number): Promise<Promise<JobSnapshot[]>> {
    const res = await fetch(`${dev.base}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'demo.sleep', input: { steps, stepMs } }),
    });
    const job = (await res.json()) as JobSnapshot;
    const ws = new WebSocket(`${dev.base.replace('http', 'ws')}/v1/ws`);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    const seen: JobSnapshot[] = [];
    const done = new Promise<JobSnapshot[]>((resolve, reject) => {
      ws.on('message', (data: Buffer) => {
        const msg = JSON.parse(data.toString()) as { type: string; job?: JobSnapshot };
        if (msg.type !== 'snapshot' || !msg.job) return reject(new Error(`unexpected message ${data}`));
        seen.push(msg.job);
        if (['succeeded', 'failed', 'cancelled'].includes(msg.job.status)) {
          ws.close();
          resolve(seen);
        }
      });
      ws.once('close', () => reject(new Error(`the watcher's socket closed before the job ended (${seen.length} snapshots)`)));
    });
    ws.send(JSON.stringify({ op: 'subscribe', id: job.id }));
    return done;
  }

  function assertToTheEnd(seen: JobSnapshot[]): void {
    const last = seen.at(-1) as JobSnapshot;
    assert.equal(last.status, 'succeeded');
    assert.equal(last.progress.percent, 100);
    const percents = seen.map((s) => s.progress.percent ?? 0);
    assert.ok(percents.length >= 5, `progress arrived (${percents.join(', ')})`);
    for (let i = 1; i < percents.length; i++) assert.ok((percents[i] as number) >= (percents[i - 1] as number), `progress never steps back: ${percents.join(', ')}`);
  }

  async function closedWith(frame: Frame): Promise<number | null> {
    const raw = await RawWebSocket.open(dev.base);
    raw.send(frame);
    await raw.ended;
    return raw.closeCode;
  }

  it('a binary frame over 64 KiB is closed with 1009', async () => {
    const watched = await watchRunningJob(20, 50);
    assert.equal(await closedWith({ opcode: OP.binary, payload: Buffer.alloc(300 * 1024, 7) }), 1009);
    await assertAlive();
    assertToTheEnd(await watched);
  });

  it('a text frame with invalid UTF-8 is closed with 1007', async () => {
    const watched = await watchRunningJob(20, 50);
    assert.equal(await closedWith({ opcode: OP.text, payload: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]) }), 1007);
    await assertAlive();
    assertToTheEnd(await watched);
  });

  it('an unmasked client frame is closed with 1002', async () => {
    const watched = await watchRunningJob(20, 50);
    assert.equal(await closedWith({ opcode: OP.text, payload: Buffer.from('{"op":"subscribe","id":"x"}'), mask: false }), 1002);
    await assertAlive();
    assertToTheEnd(await watched);
  });

  it('1,000 random frames (seeded): the server answers after each, and a subscriber gets its job to the end', async () => {
    const rnd = seeded(14);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(rnd() * items.length)] as T;
    const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(rnd() * 256)));
    const payload = (): Buffer => {
      const kind = rnd();
      if (kind < 0.3) return Buffer.from(JSON.stringify({ op: pick(['subscribe', 'unsubscribe', 'cancel', 'other']), id: pick(['nope', '', '0192-x', 'a'.repeat(300)]) }));
      if (kind < 0.45) return Buffer.from(pick(['{', 'null', '[]', '"text"', '{"op":1}', '\u0000', '{"op":"subscribe"}']));
      if (kind < 0.6) return Buffer.concat([Buffer.from('{"op":"'), Buffer.from([pick([0xc3, 0xe2, 0xf0, 0xff, 0x80, 0xed])]), Buffer.from('"}')]);
      if (kind < 0.65) return bytes(64 * 1024 + 1 + Math.floor(rnd() * 64 * 1024));
      return bytes(Math.floor(rnd() * 300));
    };
    const watched = await watchRunningJob(60, 100);
    const codes = new Map<number | null, number>();
    let raw: RawWebSocket | null = null;
    for (let i = 0; i < 1000; i++) {
      if (!raw?.open) {
        if (raw) {
          await raw.ended;
          codes.set(raw.closeCode, (codes.get(raw.closeCode) ?? 0) + 1);
        }
        raw = await RawWebSocket.open(dev.base);
      }
      const body = payload();
      const lie = rnd() < 0.05;
      raw.send({
        opcode: rnd() < 0.85 ? pick([OP.text, OP.text, OP.binary, OP.continuation, OP.close, OP.ping, OP.pong]) : pick([3, 4, 5, 6, 7, 11, 12, 13, 14, 15]),
        fin: rnd() < 0.9,
        rsv: rnd() < 0.9 ? 0 : 1 + Math.floor(rnd() * 7),
        mask: rnd() < 0.9,
        payload: body,
        ...(lie ? { declaredLength: body.length + 1 + Math.floor(rnd() * 10) } : {}),
      });
      await assertAlive();
      // A frame that declares more than it sends leaves the server waiting: hang up instead.
      if (lie) raw.destroy();
    }
    raw?.destroy();
    await assertAlive();
    assertToTheEnd(await watched);
    // The draw reached the protocol errors it is meant to: each of these close codes was seen.
    for (const code of [1002, 1007, 1009]) assert.ok((codes.get(code) ?? 0) > 0, `close code ${code} seen (${[...codes].join(' ')})`);
  });
});
