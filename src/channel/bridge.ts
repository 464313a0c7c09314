/**
 * Connects a process's JobBus to a Channel: events emitted on the bus here are published to
 * every other process, and events other processes published are emitted on this bus, with
 * the same payload types as local ones (job:submitted arrives as the slim
 * job:submitted-remote). A reconnected channel is announced as `channel:resync`.
 *
 * No loops: each bridge tags what it sends with its origin id and drops messages carrying it,
 * and payloads a bridge emitted are never published again. Progress is coalesced per job
 * (default at most one message per 100 ms, latest wins) and a held progress is sent before a
 * state change of the same job, so other processes never see progress after the change.
 * Job changes are grouped per event-loop turn: the same change of many jobs travels as one
 * `jobs:changed` message and arrives as one `job:changed` per job, in order. While the channel
 * knows that no other process listens (`Channel.hasPeers`), nothing is sent.
 */
import { randomUUID } from 'node:crypto';
import type { Progress } from '../core/progress.js';
import type { JobBus, JobEventName, JobEvents } from './bus.js';
import { type Channel, type ChannelLogger, type Envelope, MAX_CHANGED_IDS, type RelayEvents } from './channel.js';
import { Coalescer } from './coalescer.js';

export interface ConnectBusOptions {
  /** This bridge's id on the wire. Default: a random UUID (unique per bridge). */
  origin?: string;
  /** Minimum ms between two progress messages of one job. Default 100. */
  progressIntervalMs?: number;
  /**
   * Reads a job's latest progress when a message arrives without it (it was too large for the
   * transport). Used when the channel keeps no progress itself (PostgreSQL: read the store).
   * Without either, such a progress message is dropped; watchers catch up from the store.
   */
  getProgress?: (id: string) => Promise<Progress | null>;
  /** Longest wait for such a read before the progress is skipped (later events wait meanwhile). Default 2000 ms. */
  readTimeoutMs?: number;
  logger?: ChannelLogger;
}

export interface BusBridge {
  readonly origin: string;
  /** Publishes held progress, then stops relaying in both directions (the channel stays open). */
  close(): void;
}

/**
 * Payloads some bridge emitted on a bus. No bridge publishes them again, so two bridges on one
 * bus (say Redis and NOTIFY) cannot bounce each other's events around.
 */
const relayed = new WeakSet<object>();

/**
 * True when a bus event's payload came from another process through a bridge. Listeners with
 * side effects that must happen once per deployment (say, enqueueing a webhook delivery) act
 * on local events only: the process that made the change also emitted it.
 */
export function isRelayed(payload: object): boolean {
  return relayed.has(payload);
}

export function connectBus(bus: JobBus, channel: Channel, options: ConnectBusOptions = {}): BusBridge {
  const origin = options.origin ?? randomUUID();
  let closed = false;

  // Job changes wait for the end of the event-loop turn and go out grouped: the same change of
  // many jobs (a worker's cycle) is one `jobs:changed` message. Every other message first sends
  // what waits, so receivers see each job's events in the order they happened.
  const changes = new Map<string, RelayEvents['jobs:changed']>();
  const changedIds = new Set<string>();
  let changesScheduled = false;
  // The group the last change joined: a worker's cycle announces the same change of many jobs
  // in a row, which then skip building and hashing the group's key.
  let lastGroup: RelayEvents['jobs:changed'] | undefined;
  const flushChanges = () => {
    if (changes.size === 0) return;
    const groups = [...changes.values()];
    changes.clear();
    changedIds.clear();
    lastGroup = undefined;
    for (const g of groups) {
      if (g.ids.length === 1) {
        send('job:changed', { id: g.ids[0] as string, tenant: g.tenant, type: g.type, from: g.from, to: g.to, reason: g.reason });
        continue;
      }
      for (let i = 0; i < g.ids.length; i += MAX_CHANGED_IDS) send('jobs:changed', { ...g, ids: g.ids.slice(i, i + MAX_CHANGED_IDS) });
    }
  };
  const queueChange = (e: JobEvents['job:changed']) => {
    // A second change of a job already waiting: what waits goes first, in order.
    if (changedIds.has(e.id)) flushChanges();
    const g = lastGroup;
    if (g !== undefined && g.to === e.to && g.from === e.from && g.reason === e.reason && g.type === e.type && g.tenant === e.tenant) {
      g.ids.push(e.id);
    } else {
      const key = `${e.tenant}\u0000${e.type}\u0000${e.from}\u0000${e.to}\u0000${e.reason}`;
      let group = changes.get(key);
      if (group) group.ids.push(e.id);
      else {
        group = { ids: [e.id], tenant: e.tenant, type: e.type, from: e.from, to: e.to, reason: e.reason };
        changes.set(key, group);
      }
      lastGroup = group;
    }
    changedIds.add(e.id);
    if (!changesScheduled) {
      changesScheduled = true;
      setImmediate(() => {
        changesScheduled = false;
        if (!closed) flushChanges();
      });
    }
  };
  const send = <K extends keyof RelayEvents>(event: K, data: RelayEvents[K]) => {
    channel.publish({ origin, event, data } as Envelope);
  };
  const publish = <K extends keyof RelayEvents>(event: K, data: RelayEvents[K]) => {
    flushChanges();
    send(event, data);
  };
  const progress = new Coalescer<JobEvents['job:progress']>(options.progressIntervalMs ?? 100, (p) =>
    publish('job:progress', { id: p.id, tenant: p.tenant, progress: p.progress }),
  );

  // A channel that knows nobody else listens (a lone process) is given nothing: the events are
  // not even grouped.
  const peers = channel.hasPeers?.bind(channel) ?? (() => true);
  const local = <K extends JobEventName>(event: K, fn: (payload: JobEvents[K]) => void) =>
    bus.on(event, (payload) => {
      if (!closed && !relayed.has(payload) && peers()) fn(payload);
    });
  const offs = [
    local('job:submitted', ({ job }) => publish('job:submitted', { id: job.id, tenant: job.tenant, type: job.type, state: job.state })),
    local('job:changed', (e) => {
      progress.flush(e.id);
      queueChange(e);
    }),
    local('job:progress', (e) => progress.offer(e.id, e)),
    local('jobs:promoted', (e) => publish('jobs:promoted', { count: e.count })),
    local('job:cancel-requested', (e) => {
      progress.flush(e.id);
      publish('job:cancel-requested', { id: e.id, reason: e.reason });
    }),
  ];

  const emit = <K extends JobEventName>(event: K, payload: JobEvents[K]) => {
    relayed.add(payload);
    bus.emit(event, payload);
  };

  const readProgress = channel.getProgress?.bind(channel) ?? options.getProgress;
  const readTimeoutMs = options.readTimeoutMs ?? 2000;
  /** Reads a progress that arrived without its value; resolves to null on failure or timeout. */
  const fetchProgress = async (id: string): Promise<Progress | null> => {
    if (!readProgress) return null;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), readTimeoutMs);
    });
    try {
      return await Promise.race([readProgress(id), timeout]);
    } catch (err) {
      options.logger?.warn({ err, jobId: id }, 'could not read relayed progress; watchers will catch up from the store');
      return null;
    } finally {
      clearTimeout(timer);
    }
  };

  /**
   * Remote events in arrival order, each emitted as a fresh object (one message may reach
   * several bridges). Only a progress without its value needs a read; while it
   * runs, later events wait behind it, so nobody sees progress after the job's next change.
   */
  let waiting: Envelope[] | null = null;
  const deliver = (envelope: Envelope): Promise<void> | undefined => {
    switch (envelope.event) {
      case 'job:submitted':
        emit('job:submitted-remote', { ...envelope.data });
        return;
      case 'job:progress': {
        const { id, tenant, progress: value } = envelope.data;
        if (value !== null) {
          emit('job:progress', { id, tenant, progress: value });
          return;
        }
        return fetchProgress(id).then((p) => {
          if (p && !closed) emit('job:progress', { id, tenant, progress: p });
        });
      }
      case 'job:changed':
        emit('job:changed', { ...envelope.data });
        return;
      case 'jobs:changed': {
        const { ids, tenant, type, from, to, reason } = envelope.data;
        for (const id of ids) emit('job:changed', { id, tenant, type, from, to, reason });
        return;
      }
      case 'jobs:promoted':
        emit('jobs:promoted', { ...envelope.data });
        return;
      case 'job:cancel-requested':
        emit('job:cancel-requested', { ...envelope.data });
        return;
    }
  };
  const drain = async (queue: Envelope[]) => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      if (closed) break;
      try {
        await deliver(next);
      } catch (err) {
        options.logger?.warn({ err, event: next.event }, 'a listener of a relayed event threw');
      }
    }
    waiting = null;
  };

  const unsubscribe = channel.subscribe({
    origin,
    event(envelope) {
      if (closed || envelope.origin === origin) return;
      if (waiting) {
        waiting.push(envelope);
        return;
      }
      const pending = deliver(envelope);
      if (pending) {
        const queue: Envelope[] = [];
        waiting = queue;
        void pending
          .catch((err: unknown) => options.logger?.warn({ err, event: envelope.event }, 'a listener of a relayed event threw'))
          .then(() => drain(queue));
      }
    },
    resync() {
      if (!closed) emit('channel:resync', { transport: channel.transport });
    },
  });

  return {
    origin,
    close() {
      if (closed) return;
      progress.flushAll();
      flushChanges();
      closed = true;
      for (const off of offs) off();
      unsubscribe();
    },
  };
}
