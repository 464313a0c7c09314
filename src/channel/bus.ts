/**
 * The in-process event bus: one typed event map that every output (watchers, the worker's
 * wake-up, later SSE/WebSocket/webhooks/metrics) consumes. Events describe writes this
 * process made; other processes' writes reach a process through its store (polling on
 * SQLite, LISTEN/NOTIFY on PostgreSQL). When a channel is connected (bridge.ts), the events
 * other processes made are emitted here too, except job:submitted, which arrives as the slim
 * job:submitted-remote. A listener whose work must happen once per deployment (not once per
 * process) skips relayed payloads: see isRelayed() in bridge.ts.
 */
import { EventEmitter } from 'node:events';
import type { JobRecord } from '../core/job.js';
import type { Progress } from '../core/progress.js';
import type { JobState } from '../core/states.js';

export interface JobEvents {
  /** A job was accepted (state pending or queued). */
  'job:submitted': { job: JobRecord };
  /** A job changed state, or a flag on it (cancel requested, stalled) changed. */
  'job:changed': {
    id: string;
    tenant: string;
    type: string;
    from: JobState;
    to: JobState;
    reason: string;
    parentId?: string;
    /** The write that ended the job deleted it (retention 0): no row is left to read (see job:deleted). */
    deleted?: boolean;
  };
  /**
   * A job was deleted by the write that ended it (retention 0), in this process; `job` is the
   * record it ended with, so that those following it (watchers) still see how it ended. Emitted
   * just before its job:changed. Not relayed to other processes.
   */
  'job:deleted': { job: JobRecord };
  /** A running job reported progress (coalesced: a few per second at most). */
  'job:progress': { id: string; tenant: string; progress: Progress; parentId?: string };
  /** Jobs became claimable in bulk: the sweeper promoted due pending, retrying and waiting jobs, or a handler spawned children. Idle workers wake. */
  'jobs:promoted': { count: number };
  /** Cancellation of a running job was requested; its worker should abort now. */
  'job:cancel-requested': { id: string; reason: string };
  /**
   * A job was accepted by ANOTHER process (relayed by a channel, see bridge.ts). Only its
   * identity travels; the record is in the store for whoever needs more.
   */
  'job:submitted-remote': { id: string; tenant: string; type: string; state: JobState };
  /**
   * The channel to other processes was down and is back: events sent meanwhile are lost, so
   * anything kept up to date by relayed events should be re-read from the store.
   */
  'channel:resync': { transport: string };
  /** This process's worker claimed a job: an attempt starts (`job` as claimed: startedAt, runAt). Never relayed. */
  'attempt:started': { job: JobRecord };
  /** The outcome of an attempt of this process's worker was written: the job went `to` at `at`. Never relayed. */
  'attempt:ended': { job: JobRecord; to: JobState; at: number };
  /**
   * A handler of this process's worker ignored its signal past the drain period after its job
   * ended (cancel, timeout, lost lease): its attempt was ended without it (worker/stuck-handlers.ts). Never relayed.
   */
  'attempt:abandoned': { job: JobRecord };
  /** An abandoned handler (above) returned at last. Never relayed. */
  'attempt:abandoned-returned': { job: JobRecord };
  /** A pass of this process's sweeper acted on jobs (only the elected sweeper's passes do). Never relayed. */
  'sweeper:pass': { reaped: number; timedOut: number; forced: number; stalled: number; expired: number; deleted: number };
  /** A webhook delivery attempt of this process ended. Never relayed. */
  'webhook:attempt': { outcome: 'delivered' | 'failed' | 'gone' | 'refused' };
}

export type JobEventName = keyof JobEvents;

export class JobBus {
  private readonly emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  on<K extends JobEventName>(event: K, listener: (payload: JobEvents[K]) => void): () => void {
    this.emitter.on(event, listener);
    return () => this.emitter.off(event, listener);
  }
  /** Whether anything listens to `event`: an emitter may skip building a payload nobody reads. */
  wants(event: JobEventName): boolean {
    return this.emitter.listenerCount(event) > 0;
  }
  emit<K extends JobEventName>(event: K, payload: JobEvents[K]): void {
    this.emitter.emit(event, payload);
  }
}
