/** The dashboard's SSE parser (web/src/sse.ts): frames split anywhere, comments, CRLF, multi-line data. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type SseEvent, SseParser } from '../../web/src/sse.js';

function parse(chunks: string[]): SseEvent[] {
  const out: SseEvent[] = [];
  const p = new SseParser((e) => out.push(e));
  for (const c of chunks) p.push(c);
  return out;
}

describe('dashboard SSE parser', () => {
  it('reads frames with id, event and data, skipping comments and retry', () => {
    const text = 'retry: 2000\n\n: keepalive\n\nid: 5\nevent: status\ndata: {"a":1}\n\nid: 6\nevent: progress\ndata: {"a":2}\n\n';
    assert.deepEqual(parse([text]), [
      { id: '5', event: 'status', data: '{"a":1}' },
      { id: '6', event: 'progress', data: '{"a":2}' },
    ]);
  });

  it('gives the same frames however the stream is cut, with LF, CRLF or CR line ends', () => {
    for (const nl of ['\n', '\r\n', '\r']) {
      const text = `id: 1${nl}event: status${nl}data: x${nl}data: y${nl}${nl}data: z${nl}${nl}`;
      const whole = parse([text]);
      assert.deepEqual(whole, [
        { id: '1', event: 'status', data: 'x\ny' },
        { id: '1', event: 'message', data: 'z' },
      ]);
      for (let i = 1; i < text.length; i++) assert.deepEqual(parse([text.slice(0, i), text.slice(i)]), whole, `cut at ${i} (${JSON.stringify(nl)})`);
    }
  });

  it('holds back a frame until its blank line arrives', () => {
    assert.deepEqual(parse(['event: status\ndata: {}\n']), []);
  });
});
