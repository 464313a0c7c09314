/** A local webhook receiver for tests: records every request; each test decides the answers. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export function receiver(answer: (req: Received, res: http.ServerResponse) => void) {
  const received: Received[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => {
      body += c;
    });
    req.on('end', () => {
      const r = { path: req.url ?? '', headers: req.headers, body };
      received.push(r);
      answer(r, res);
    });
  });
  return {
    received,
    async start(): Promise<string> {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A receiver answering the statuses in turn (the last one again once they run out). */
export async function scriptedReceiver(statuses: number[]) {
  const answered: number[] = [];
  const rx = receiver((_req, res) => {
    const status = statuses[Math.min(answered.length, statuses.length - 1)] as number;
    answered.push(status);
    res.writeHead(status, { 'content-type': 'text/plain' }).end(`answer ${status}`);
  });
  const url = `${await rx.start()}/hooks`;
  return { url, received: rx.received, answered, close: rx.close };
}
