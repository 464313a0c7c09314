/**
 * A Server-Sent Events parser (the WHATWG event-stream format) for a stream read with fetch:
 * fetch can send the Authorization header, which EventSource cannot, so the API key never goes
 * into a URL (where proxies and access logs would keep it).
 */

export interface SseEvent {
  id: string | null;
  event: string;
  data: string;
}

export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event = '';
  private id: string | null = null;
  /** The last chunk ended with \r: a \n starting the next one belongs to it (CRLF cut in two). */
  private skipLf = false;

  constructor(private readonly emit: (e: SseEvent) => void) {}

  push(chunk: string): void {
    if (this.skipLf && chunk.startsWith('\n')) chunk = chunk.slice(1);
    this.skipLf = false;
    this.buffer += chunk;
    for (;;) {
      const nl = this.buffer.search(/\r\n|\r|\n/);
      if (nl < 0) return;
      const line = this.buffer.slice(0, nl);
      const crlf = this.buffer.startsWith('\r\n', nl);
      if (!crlf && this.buffer[nl] === '\r' && nl === this.buffer.length - 1) this.skipLf = true;
      this.buffer = this.buffer.slice(nl + (crlf ? 2 : 1));
      this.line(line);
    }
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length > 0) this.emit({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
  }
}
