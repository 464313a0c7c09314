/**
 * Server-Sent Events for the client (the WHATWG "event stream interpretation"), over the
 * `eventsource-parser` package, which is free of I/O and of Node-only APIs so that it runs in
 * browsers too (the dashboard reads its feed with it).
 *
 * Feed it bytes (or text) in chunks of any size: frames, lines and multibyte UTF-8 characters
 * may be split anywhere. It recognises LF, CRLF and CR line endings (also a CRLF split across
 * two chunks), strips a leading BOM, reports `: comments` and `retry:` hints, and dispatches an
 * event on each blank line. As the standard says, an event's `id` persists until another `id:`
 * line changes it (also one in a frame without data), a frame without `data:` dispatches
 * nothing, and an unterminated frame at the end of the stream is discarded. The last id is what
 * a reconnecting client sends as `Last-Event-ID` (client.ts), and where a new parser starts.
 */
import { createParser, type EventSourceParser } from 'eventsource-parser';
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

export class SseParser {
  // The BOM is left in the text for the parser, which strips exactly one (a second one is text).
  private readonly decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  private readonly parser: EventSourceParser;
  /** The items completed by the chunk being parsed. */
  private out: SseItem[] = [];
  private lastId: string;
  private retry: number | null = null;

  /** @param lastEventId the id to start from (a reconnecting client keeps the previous one). */
  constructor(lastEventId = '') {
    this.lastId = lastEventId;
    this.parser = createParser({
      // Called at each frame's end with the frame's last valid id, before its event: the id persists across frames.
      onId: (id) => {
        this.lastId = id;
      },
      onEvent: (e) => {
        this.out.push({ kind: 'event', event: e.event ?? 'message', data: e.data, id: this.lastId });
      },
      onRetry: (ms) => {
        this.retry = ms;
        this.out.push({ kind: 'retry', ms });
      },
      onComment: (text) => {
        this.out.push({ kind: 'comment', text });
      },
      // Invalid retry values and unknown fields are ignored, as the standard says.
    });
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
    return this.feed(typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true }));
  }

  /**
   * Ends the stream: flushes the decoder and discards an unterminated line or frame, as the
   * standard says. Returns whatever the flush completed (nothing, in practice: completing an
   * item needs a line ending).
   */
  end(): SseItem[] {
    const out = this.feed(this.decoder.decode());
    this.parser.reset();
    return out;
  }

  private feed(text: string): SseItem[] {
    this.out = [];
    this.parser.feed(text);
    const out = this.out;
    this.out = [];
    return out;
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
