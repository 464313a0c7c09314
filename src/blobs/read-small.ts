/** Reads a stream known to be small (a JSON sidecar) into a string, refusing anything larger than `max`. */
import type { Readable } from 'node:stream';

export async function readSmall(stream: Readable, max = 64 * 1024): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    size += buf.length;
    if (size > max) {
      stream.destroy();
      throw new Error(`expected at most ${max} bytes`);
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks).toString('utf8');
}
