/**
 * The transport contract between processes: what travels (`RelayEvents`, slim forms of the
 * bus events), how it is tagged (`Envelope`), and what a transport does (`Channel`).
 * Implementations: postgres-notify.ts (LISTEN/NOTIFY), redis.ts (pub/sub). bridge.ts connects a
 * channel to a process's JobBus.
 *
 * A channel is a fast path, never the source of truth: a message may be lost (publish failure,
 * connection drop), so consumers that cache state re-read the store on `resync`.
 */
import type { JobEvents } from './bus.js';
import type { Progress } from '../core/progress.js';
import type { JobState } from '../core/states.js';

/** What crosses process boundaries, keyed by the bus event it came from. */
export interface RelayEvents {
  /** Identity only: a JobRecord (input, metadata) can be far larger than a notification. */
  'job:submitted': { id: string; tenant: string; type: string; state: JobState };
  'job:changed': JobEvents['job:changed'];
  /**
   * The same change of several jobs (one tenant, type, from, to and reason), in the order they
   * changed: a worker's cycle ends and starts dozens of jobs at once. Receivers emit one
   * `job:changed` per id. A lone change still travels as `job:changed`.
   */
  'jobs:changed': { ids: string[]; tenant: string; type: string; from: JobState; to: JobState; reason: string };
  /** `progress` is null when it was too large to send; receivers read it (channel or store). */
  'job:progress': { id: string; tenant: string; progress: Progress | null };
  'jobs:promoted': JobEvents['jobs:promoted'];
  'job:cancel-requested': JobEvents['job:cancel-requested'];
}

export type RelayEventName = keyof RelayEvents;

export const RELAY_EVENT_NAMES: readonly RelayEventName[] = ['job:submitted', 'job:changed', 'jobs:changed', 'job:progress', 'jobs:promoted', 'job:cancel-requested'];

/** Most ids in one `jobs:changed` message (about 4 KB of them: well inside NOTIFY's 8,000 bytes). */
export const MAX_CHANGED_IDS = 100;

/** One relayed event and the bridge that sent it (so a bridge can drop its own). */
export type Envelope = { [K in RelayEventName]: { origin: string; event: K; data: RelayEvents[K] } }[RelayEventName];

export interface ChannelHandlers {
  /** An event from some bridge (possibly the receiver's own: the bridge filters by origin). */
  event(envelope: Envelope): void;
  /**
   * The subscriber's own origin: a transport may drop the messages it sent before decoding
   * them (every process receives its own events back; decoding them all is wasted work).
   */
  origin?: string;
  /** The channel was down (or never up) and now delivers again; whatever was sent meanwhile is lost. */
  resync(): void;
}

export interface ChannelLogger {
  warn(obj: object, msg?: string): void;
}

export interface Channel {
  /** 'postgres' or 'redis': for logs and the `channel:resync` event. */
  readonly transport: string;
  /**
   * Sends an event to every subscriber of every process. Never throws and never blocks the
   * caller: failures are logged and the event is dropped (the store stays the truth).
   */
  publish(envelope: Envelope): void;
  /**
   * False while the transport knows that no other process receives what this one publishes (a
   * lone process): the bridge then publishes nothing, and publish() drops what it is given.
   * Absent, or true (also when the transport cannot tell): every event is published.
   */
  hasPeers?(): boolean;
  /** Delivers received events to `handlers` (connecting first if not yet done). Returns an unsubscribe. */
  subscribe(handlers: ChannelHandlers): () => void;
  /** Resolves once the channel receives (first connection up). Does not time out by itself. */
  ready(): Promise<void>;
  /** The latest progress the channel holds for a job, when it keeps one (Redis); null when none. */
  getProgress?(id: string): Promise<Progress | null>;
  /** Sends what is queued, then closes every connection the channel opened. */
  close(): Promise<void>;
}
