/**
 * The chaos driver's HTTP client: every request goes to one of the API servers that answer
 * now, round robin; `persist` tries again (on the next server) until an answer it accepts, the
 * way a careful client rides out a server kill or a database outage.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface Answer<T = unknown> {
  status: number;
  body: T;
}

export class ChaosApi {
  private next = 0;
  /** Requests that failed (no answer, or an answer `persist` was told to try again on). */
  retries = 0;
  /** How long requests waited with no API server running (a server killed and not back yet). */
  noServerMs = 0;
  private noServerSince: number | null = null;

  constructor(private readonly servers: () => string[]) {}

  private async base(deadline: number): Promise<string> {
    for (;;) {
      const urls = this.servers();
      if (urls.length > 0) {
        if (this.noServerSince !== null) {
          this.noServerMs += Date.now() - this.noServerSince;
          this.noServerSince = null;
        }
        return urls[this.next++ % urls.length] as string;
      }
      this.noServerSince ??= Date.now();
      if (Date.now() > deadline) throw new Error('no API server answers');
      await sleep(50);
    }
  }

  /** One request to one server (no retry). */
  async once<T>(method: string, path: string, options: { body?: unknown; headers?: Record<string, string>; timeoutMs?: number; base?: string } = {}): Promise<Answer<T>> {
    const base = options.base ?? (await this.base(Date.now() + 60_000));
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { ...(options.body === undefined ? {} : { 'content-type': 'application/json' }), ...options.headers },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 20_000),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : null) as T };
  }

  /**
   * Sends the request until `done(answer)` says it is final (true) or fails for good (throws);
   * anything else (no answer, 5xx, 429, or `done` returning false) is tried again on the next
   * server after a pause, until `deadlineMs`.
   */
  async persist<T>(
    method: string,
    path: string,
    done: (a: Answer<T>) => boolean,
    options: { body?: unknown; headers?: Record<string, string>; deadlineMs?: number } = {},
  ): Promise<{ answer: Answer<T>; tries: number }> {
    const deadline = Date.now() + (options.deadlineMs ?? 300_000);
    let last = '';
    for (let tries = 1; ; tries++) {
      try {
        const answer = await this.once<T>(method, path, { ...options, base: await this.base(deadline) });
        if (done(answer)) return { answer, tries };
        last = `${answer.status} ${JSON.stringify(answer.body).slice(0, 200)}`;
      } catch (err) {
        last = (err as Error).message;
      }
      this.retries++;
      if (Date.now() > deadline) throw new Error(`${method} ${path}: no final answer after ${tries} tries (last: ${last})`);
      await sleep(Math.min(1000, 50 * tries));
    }
  }

  /** Every job of the tenant, page by page (newest first). */
  async listAll<T>(query = ''): Promise<T[]> {
    const items: T[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `/v1/jobs?limit=1000${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const { answer } = await this.persist<{ items: T[]; nextCursor: string | null }>('GET', q, (a) => a.status === 200);
      items.push(...answer.body.items);
      cursor = answer.body.nextCursor;
    } while (cursor);
    return items;
  }
}
