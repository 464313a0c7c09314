/**
 * A WebSocket client on a bare TCP socket, for sending frames no well-behaved client library
 * would: over-long, unmasked, bad opcodes, reserved bits, invalid UTF-8, declared lengths that
 * lie. It reads back only the server's close frame (its code), if one comes.
 */
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';

export interface Frame {
  fin?: boolean;
  /** The three reserved bits, 0-7. */
  rsv?: number;
  opcode: number;
  payload: Buffer;
  /** Clients must mask every frame (RFC 6455 §5.1); false sends it unmasked. */
  mask?: boolean;
  /** The length the header declares, when it should differ from the payload's. */
  declaredLength?: number;
}

export function encodeFrame(f: Frame): Buffer {
  const masked = f.mask ?? true;
  const len = f.declaredLength ?? f.payload.length;
  const head: number[] = [((f.fin ?? true) ? 0x80 : 0) | (((f.rsv ?? 0) & 7) << 4) | (f.opcode & 0x0f)];
  const m = masked ? 0x80 : 0;
  let ext = Buffer.alloc(0);
  if (len < 126) head.push(m | len);
  else if (len < 65_536) {
    head.push(m | 126);
    ext = Buffer.alloc(2);
    ext.writeUInt16BE(len);
  } else {
    head.push(m | 127);
    ext = Buffer.alloc(8);
    ext.writeBigUInt64BE(BigInt(len));
  }
  if (!masked) return Buffer.concat([Buffer.from(head), ext, f.payload]);
  const key = randomBytes(4);
  const body = Buffer.from(f.payload);
  for (let i = 0; i < body.length; i++) body[i] = (body[i] as number) ^ (key[i & 3] as number);
  return Buffer.concat([Buffer.from(head), ext, key, body]);
}

export class RawWebSocket {
  /** The close code the server sent, once its close frame arrived. */
  closeCode: number | null = null;
  /** Resolves when the TCP connection has ended, whoever ended it. */
  readonly ended: Promise<void>;
  private buffer = Buffer.alloc(0);

  private constructor(readonly socket: Socket) {
    socket.on('error', () => undefined); // resets are expected: the server drops bad peers
    this.ended = new Promise((resolve) => socket.once('close', () => resolve()));
    socket.on('data', (d: Buffer) => this.read(d));
  }

  /** Connects and completes the opening handshake on `base`'s `/v1/ws`. */
  static open(base: string, path = '/v1/ws'): Promise<RawWebSocket> {
    const url = new URL(base);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname);
      let head = '';
      const onData = (d: Buffer) => {
        head += d.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        socket.off('data', onData);
        socket.off('error', reject);
        if (!head.startsWith('HTTP/1.1 101')) {
          socket.destroy();
          return reject(new Error(`handshake refused: ${head.split('\r\n')[0]}`));
        }
        const ws = new RawWebSocket(socket);
        const rest = Buffer.from(head.slice(end + 4), 'latin1');
        if (rest.length > 0) ws.read(rest);
        resolve(ws);
      };
      socket.on('data', onData);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.write(
          `GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
            `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\n\r\n`,
        );
      });
    });
  }

  get open(): boolean {
    return !this.socket.destroyed && this.closeCode === null;
  }

  send(frame: Frame): void {
    if (!this.socket.destroyed) this.socket.write(encodeFrame(frame));
  }

  destroy(): void {
    this.socket.destroy();
  }

  /** Scans the server's frames for its close frame (servers never mask). */
  private read(d: Buffer): void {
    this.buffer = Buffer.concat([this.buffer, d]);
    for (;;) {
      if (this.buffer.length < 2) return;
      const opcode = (this.buffer[0] as number) & 0x0f;
      let len = (this.buffer[1] as number) & 0x7f;
      let offset = 2;
      if (len === 126) {
        if (this.buffer.length < 4) return;
        len = this.buffer.readUInt16BE(2);
        offset = 4;
      } else if (len === 127) {
        if (this.buffer.length < 10) return;
        len = Number(this.buffer.readBigUInt64BE(2));
        offset = 10;
      }
      if (this.buffer.length < offset + len) return;
      if (opcode === 0x8) this.closeCode = len >= 2 ? this.buffer.readUInt16BE(offset) : 1005;
      this.buffer = this.buffer.subarray(offset + len);
    }
  }
}

/** A small seeded generator (mulberry32): the same seed draws the same frames. */
export { seededRandom as seeded } from '../../src/core/seeded-random.js';
