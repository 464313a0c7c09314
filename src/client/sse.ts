/**
 * A streaming Server-Sent Events parser (the WHATWG "event stream interpretation"), free of
 * I/O and of Node-only APIs so that it runs in browsers too.
 *
 * Feed it bytes (or text) in chunks of any size: frames, lines and multibyte UTF-8 characters
 * may be split anywhere. It recognises LF, CRLF and CR line endings (also a CRLF split across
 * two chunks), strips a leading BOM, reports `: comments` and `retry:` hints, and dispatches an
 * event on each blank line. As the standard says, an event's `id` persists until another `id:`
 * line changes it, a frame without `data:` dispatches nothing, and an unterminated frame at the
 * end of the stream is discarded.
 */

/** One dispatched event. */
export interface SseEvent {
  kind: 'event';
  /** The event type: the `event:` field, `message` when there was none. */
  event: string;
  /** The `data:` lines joined with `\n`. */
  data: string;
  /** The last event id at dispatch time (persists across frames; `''` when none was ever set). */
  id: string;
}

/** A `retry:` field: the reconnection delay the server asks for, in ms. */
export interface SseRetry {
  kind: 'retry';
  ms: number;
}

/** A comment line (`: keepalive`), without the colon and one leading space. */
export interface SseComment {
  kind: 'comment';
  text: string;
}

export type SseItem = SseEvent | SseRetry | SseComment;

const LINE_END = /\r\n|\r|\n/g;

export class SseParser {
  private readonly decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  /** The current line, not yet terminated. */
  private line = '';
  /** The previous chunk ended with CR: a LF starting the next chunk belongs to it. */
  private skipLf = false;
  private bomChecked = false;
  private data: string[] = [];
  private hasData = false;
  private eventType = '';
  private lastId: string;
  private retry: number | null = null;

  /** @param lastEventId the id to start from (a reconnecting client keeps the previous one). */
  constructor(lastEventId = '') {
    this.lastId = lastEventId;
  }

  /** The id of the last `id:` field seen (the value to send as `Last-Event-ID`). */
  get lastEventId(): string {
    return this.lastId;
  }

  /** The last valid `retry:` value, in ms, or null if the stream sent none. */
  get retryMs(): number | null {
    return this.retry;
  }

  /** Parses the next chunk; returns the items it completed, in order. */
  push(chunk: Uint8Array | string): SseItem[] {
    const text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    return this.feed(text);
  }

  /**
   * Ends the stream: flushes the decoder and discards an unterminated line or frame, as the
   * standard says. Returns whatever the flush completed (nothing, in practice: completing an
   * item needs a line ending).
   */
  end(): SseItem[] {
    const out = this.feed(this.decoder.decode());
    this.line = '';
    this.resetFrame();
    return out;
  }

  private feed(text: string): SseItem[] {
    const out: SseItem[] = [];
    if (text.length === 0) return out;
    if (!this.bomChecked) {
      // Only the very first character of the stream may be a BOM.
      this.bomChecked = true;
      if (text.charCodeAt(0) === 0xfeff) {
        text = text.slice(1);
        if (text.length === 0) return out;
      }
    }
    if (this.skipLf) {
      this.skipLf = false;
      if (text.charCodeAt(0) === 0x0a) text = text.slice(1);
    }
    let start = 0;
    LINE_END.lastIndex = 0;
    for (let m = LINE_END.exec(text); m !== null; m = LINE_END.exec(text)) {
      const line = this.line + text.slice(start, m.index);
      this.line = '';
      start = m.index + m[0].length;
      this.processLine(line, out);
    }
    this.line += text.slice(start);
    // A CR at the very end may be the first half of a CRLF split across chunks.
    if (text.charCodeAt(text.length - 1) === 0x0d) this.skipLf = true;
    return out;
  }

  private processLine(line: string, out: SseItem[]): void {
    if (line.length === 0) {
      this.dispatch(out);
      return;
    }
    const colon = line.indexOf(':');
    if (colon === 0) {
      const text = line.slice(1);
      out.push({ kind: 'comment', text: text.startsWith(' ') ? text.slice(1) : text });
      return;
    }
    let field: string;
    let value: string;
    if (colon < 0) {
      field = line;
      value = '';
    } else {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
    }
    switch (field) {
      case 'data':
        this.data.push(value);
        this.hasData = true;
        break;
      case 'event':
        this.eventType = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) {
          this.retry = Number(value);
          out.push({ kind: 'retry', ms: this.retry });
        }
        break;
      default:
        // Unknown fields are ignored.
        break;
    }
  }

  private dispatch(out: SseItem[]): void {
    if (this.hasData) out.push({ kind: 'event', event: this.eventType || 'message', data: this.data.join('\n'), id: this.lastId });
    this.resetFrame();
  }

  private resetFrame(): void {
    this.data = [];
    this.hasData = false;
    this.eventType = '';
  }
}

/** Parses a complete event stream held in memory (convenient for tests and fixtures). */
export function parseSse(text: string | Uint8Array): SseItem[] {
  const parser = new SseParser();
  return [...parser.push(text), ...parser.end()];
}

/**
 * Reads an HTTP body as SSE items. The reader is cancelled when the consumer stops early, so
 * breaking out of a `for await` closes the connection. Read errors (a dropped connection)
 * propagate to the consumer.
 */
export async function* readSse(body: ReadableStream<Uint8Array>, parser: SseParser = new SseParser()): AsyncGenerator<SseItem, void, undefined> {
  const reader = body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      for (const item of parser.push(value)) yield item;
    }
    finished = true;
    for (const item of parser.end()) yield item;
  } finally {
    if (!finished) reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
