/**
 * The live feed: one `GET /v1/events` stream per page (the tenant's job changes), shared by
 * every view. It reconnects by itself with a growing delay; the feed has no replay, so views
 * re-read what they show after each reconnect (onReconnect). Frames of a job that arrive out
 * of order (a lower `id` than the last one seen) are dropped, as docs/api.md advises.
 *
 * While an admin looks at another tenant's jobs (the Jobs and job pages with `tenant=`), the feed
 * follows that tenant (`GET /v1/events?tenant=`), so its rows update live too; views re-read
 * what they show when it switches, as after a reconnect.
 */
import { authHeaders } from './api';
import { type JobSnapshot as Job, SseParser } from 'longhaul/client';

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
  /** Another tenant whose changes to follow (an admin's view); null: the caller's own. */
  private tenant: string | null = null;
  status: FeedStatus = 'offline';

  /** Follows another tenant's changes (null: the caller's own); reconnects when it changes. */
  setTenant(tenant: string | null): void {
    if (tenant === this.tenant) return;
    this.tenant = tenant;
    this.lastSeq.clear();
    if (this.controller === null && this.retryTimer === null) return;
    this.controller?.abort();
    this.controller = null;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.failures = 0;
    this.connect();
  }

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
    const url = this.tenant === null ? '/v1/events' : `/v1/events?tenant=${encodeURIComponent(this.tenant)}`;
    const res = await fetch(url, { headers: { accept: 'text/event-stream', ...authHeaders() }, signal: controller.signal, cache: 'no-store' });
    // A 401 (no key yet, or a wrong one) is left to the pages' reads, which show the sign-in
    // form; signing in restarts the feed.
    if (!res.ok || !res.body) throw new Error(`feed answered ${res.status}`);
    this.failures = 0;
    this.setStatus('live');
    if (this.connectedOnce) for (const l of this.reconnectListeners) l();
    this.connectedOnce = true;
    // The client SDK's parser: bytes in, items out (comments and retry hints are not used here).
    const parser = new SseParser();
    const reader = res.body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      for (const item of parser.push(value)) if (item.kind === 'event') this.frame(item.id, item.event, item.data);
    }
  }

  /** One frame; `id` is '' when the stream never sent one. */
  private frame(id: string, event: string, data: string): void {
    if (event !== 'status' && event !== 'progress') return;
    let job: Job;
    try {
      job = JSON.parse(data) as Job;
    } catch {
      return;
    }
    const seq = id === '' ? 0 : Number(id);
    const last = this.lastSeq.get(job.id);
    if (last !== undefined && seq < last) return;
    this.lastSeq.set(job.id, seq);
    if (this.lastSeq.size > 20_000) this.lastSeq.delete(this.lastSeq.keys().next().value as string);
    for (const l of this.jobListeners) l(job, event);
  }
}

export const feed = new Feed();
