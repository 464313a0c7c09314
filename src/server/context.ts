/**
 * What the routes share: the Longhaul facade, the stream hubs, stream tokens and the server's
 * stream settings. Its own module so that app.ts (which builds it) and the routes (which take
 * it) each import it, not each other.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Longhaul } from '../longhaul.js';
import type { FeedHub, JobHub } from './hub.js';
import type { StreamLimits } from './stream-limits.js';
import type { StreamTokens } from './stream-token.js';

export interface AppContext {
  lh: Longhaul;
  hub: JobHub;
  feed: FeedHub;
  tokens: StreamTokens;
  keepaliveMs: number;
  streamBufferBytes: number;
  authEnabled: boolean;
  /** Tenants whose API keys may act on every tenant (purge, dead letters): LONGHAUL_ADMIN_TENANTS. */
  adminTenants: ReadonlySet<string>;
  /** The tenants of the configured API keys, sorted (what `GET /v1/whoami` suggests to an admin). */
  keyTenants: readonly string[];
  log: FastifyBaseLogger;
  /** Closers of the open SSE responses: ended on shutdown, or app.close() would wait for them forever. */
  streams: Set<() => void>;
  /** Open streams per tenant, and their cap (server/stream-limits.ts). */
  limits: StreamLimits;
  /** Job subscriptions one WebSocket may hold. */
  maxSubscriptionsPerSocket: number;
  /** Set when close() begins: later requests (on kept-alive connections) get a 503 problem. */
  closing: boolean;
}
