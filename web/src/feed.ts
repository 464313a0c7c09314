/**
 * The live feed: one `GET /v1/events` stream per page (the tenant's job changes), shared by
 * every view. It reconnects by itself with a growing delay; the feed has no replay, so views
 * re-read what they show after each reconnect (onReconnect). Frames of a job that arrive out
 * of order (a lower `id` than the last one seen) are dropped, as docs/api.md advises.
 */
import { authHeaders } from './api';
import { SseParser } from './sse';
import type { Job } from './types';

export type FeedStatus = 'connecting' | 'live' | 'offline';
type JobListener = (job: Job, event: string) => void;

class Feed {
  private readonly jobListeners = new Set<JobListener>();
  private readonly statusListeners = new Set<(s: FeedStatus) => void>();
  private readonly reconnectListeners = new Set<() => void>();
  private readonly lastSeq = new Map<string, number>();
  private controller: AbortController | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private failures = 0;
  private connectedOnce = false;
  status: FeedStatus = 'offline';

  start(): void {
    this.stop();
    this.connectedOnce = false;
    this.connect();
  }

  stop(): void {
    this.controller?.abort();
    this.controller = null;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.setStatus('offline');
  }

  onJob(l: JobListener): () => void {
    this.jobListeners.add(l);
    return () => this.jobListeners.delete(l);
  }

  onStatus(l: (s: FeedStatus) => void): () => void {
    this.statusListeners.add(l);
    return () => this.statusListeners.delete(l);
  }

  /** After a reconnect: whatever changed meanwhile was not sent, so read it again. */
  onReconnect(l: () => void): () => void {
    this.reconnectListeners.add(l);
    return () => this.reconnectListeners.delete(l);
  }

  private setStatus(s: FeedStatus): void {
    if (s === this.status) return;
    this.status = s;
    for (const l of this.statusListeners) l(s);
  }

  private connect(): void {
    const controller = new AbortController();
    this.controller = controller;
    this.setStatus('connecting');
    this.read(controller)
      .catch(() => undefined)
      .finally(() => {
        if (this.controller !== controller) return;
        this.setStatus('offline');
        const delay = Math.min(30_000, 1000 * 2 ** Math.min(this.failures, 5));
        this.failures++;
        this.retryTimer = setTimeout(() => this.connect(), delay);
      });
  }

  private async read(controller: AbortController): Promise<void> {
    const res = await fetch('/v1/events', { headers: { accept: 'text/event-stream', ...authHeaders() }, signal: controller.signal, cache: 'no-store' });
    // A 401 (no key yet, or a wrong one) is left to the pages' reads, which show the sign-in
    // form; signing in restarts the feed.
    if (!res.ok || !res.body) throw new Error(`feed answered ${res.status}`);
    this.failures = 0;
    this.setStatus('live');
    if (this.connectedOnce) for (const l of this.reconnectListeners) l();
    this.connectedOnce = true;
    const parser = new SseParser((e) => this.frame(e.id, e.event, e.data));
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.push(value);
    }
  }

  private frame(id: string | null, event: string, data: string): void {
    if (event !== 'status' && event !== 'progress') return;
    let job: Job;
    try {
      job = JSON.parse(data) as Job;
    } catch {
      return;
    }
    const seq = id === null ? 0 : Number(id);
    const last = this.lastSeq.get(job.id);
    if (last !== undefined && seq < last) return;
    this.lastSeq.set(job.id, seq);
    if (this.lastSeq.size > 20_000) this.lastSeq.delete(this.lastSeq.keys().next().value as string);
    for (const l of this.jobListeners) l(job, event);
  }
}

export const feed = new Feed();
