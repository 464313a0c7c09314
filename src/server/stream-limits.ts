/**
 * What one tenant may hold open (issue 36): its streams (SSE responses, per-job or the feed,
 * and WebSocket connections, counted together) up to `maxStreamsPerTenant`, and on each
 * WebSocket up to `maxSubscriptionsPerSocket` job subscriptions. A stream past the cap is refused
 * (SSE: 429 problem+json `TOO_MANY_STREAMS`; WebSocket: close 1008 with a reason); a
 * subscription past the cap gets an error message (429 `TOO_MANY_SUBSCRIPTIONS`) and the socket
 * stays open, with the subscriptions it has.
 *
 * A slot is taken synchronously when the stream opens and given back by a release that runs at
 * most once, from whichever close path comes first (client gone, server close, write error,
 * slow client dropped): the count is exact, as nothing else runs between the check and the take.
 */

/** Streams (SSE and WebSocket together) one tenant may hold open on one server process. */
export const DEFAULT_MAX_STREAMS_PER_TENANT = 100;
/** Job subscriptions one WebSocket may hold. */
export const DEFAULT_MAX_SUBSCRIPTIONS_PER_SOCKET = 1000;

export type StreamKind = 'sse' | 'websocket';

export interface StreamLimitsOptions {
  maxStreamsPerTenant: number;
  /** A refusal, counted in /metrics. */
  onRefused?: (kind: StreamKind | 'subscription') => void;
  /** Streams opened (+1) and closed (-1), counted in /metrics. */
  onOpenChange?: (kind: StreamKind, delta: number) => void;
}

export class StreamLimits {
  private readonly open = new Map<string, number>();

  constructor(private readonly options: StreamLimitsOptions) {}

  get maxStreamsPerTenant(): number {
    return this.options.maxStreamsPerTenant;
  }

  /** Streams the tenant holds open. */
  openStreams(tenant: string): number {
    return this.open.get(tenant) ?? 0;
  }

  /** A slot for one more of the tenant's streams and its release (idempotent), or null at the cap. */
  acquire(tenant: string, kind: StreamKind): (() => void) | null {
    const n = this.open.get(tenant) ?? 0;
    if (n >= this.options.maxStreamsPerTenant) {
      this.options.onRefused?.(kind);
      return null;
    }
    this.open.set(tenant, n + 1);
    this.options.onOpenChange?.(kind, 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.open.get(tenant) ?? 1) - 1;
      if (left <= 0) this.open.delete(tenant);
      else this.open.set(tenant, left);
      this.options.onOpenChange?.(kind, -1);
    };
  }

  /** Counts a subscription refused at a socket's cap. */
  refusedSubscription(): void {
    this.options.onRefused?.('subscription');
  }
}

/** The refusal's message (the SSE problem's detail, the WebSocket close reason: at most 123 bytes). */
export function tooManyStreams(max: number): string {
  return `too many open streams for this tenant (at most ${max}); close one first`;
}
