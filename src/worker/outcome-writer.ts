/**
 * What becomes of written outcomes: each applied one moves its counter and is announced
 * (`announce`: the store applied it within a larger call), each refused one (the lease moved
 * on) is counted and logged, and either way the attempt is forgotten. A batch the store refused
 * as a whole is written job by job (outcome-isolation.ts).
 */
import type { Logger } from 'pino';
import type { JobBus } from '../channel/bus.js';
import { endedRecord, type TransitionParams } from '../core/transitions.js';
import { isTransientStoreError } from '../core/store-errors.js';
import { jobLogFields } from '../core/log-fields.js';
import type { JobQueueStore } from '../store/store.js';
import { announce } from '../transitions/apply.js';
import type { Active, Attempts } from './attempt.js';
import { writeEachAlone } from './outcome-isolation.js';
import { type Outcome, refusedOutcome } from './outcome.js';
import type { WorkerStats } from './runtime.js';

/** The write of a settled attempt. */
export function writeOf(a: Active): TransitionParams {
  return (a.outcome as Outcome).write;
}

/**
 * The write without `deleteOnEnd`, for the paths that cannot tell which jobs a write deleted
 * (store.transition): the job keeps its row, for the eraser to delete soon after, so that those
 * following it read how it ended.
 */
function keepingRow(w: TransitionParams): TransitionParams {
  if (!w.deleteOnEnd) return w;
  const { deleteOnEnd: _, ...rest } = w;
  return rest;
}

export interface OutcomeWriterOptions {
  store: JobQueueStore;
  bus: JobBus;
  log: Logger;
  attempts: Attempts;
  stats: WorkerStats;
}

export class OutcomeWriter {
  constructor(private readonly o: OutcomeWriterOptions) {}

  /**
   * After a store call wrote `batch`: `applied[i]` says whether the i-th write applied, and
   * `deleted[i]` whether it deleted its job as it ended it (retention 0): then the record it
   * ended with is announced first (job:deleted), for those following the job.
   */
  written(batch: Active[], applied: boolean[], deleted?: boolean[]): void {
    const { stats, bus, log, attempts } = this.o;
    // Read once per batch: the ended record is built only for listeners (watchers, the server's
    // hub), and the debug line only when logged.
    const deletedWanted = bus.wants('job:deleted');
    const debug = log.isLevelEnabled('debug');
    for (let i = 0; i < batch.length; i++) {
      const a = batch[i] as Active;
      const outcome = a.outcome as Outcome;
      attempts.forget(a.job);
      if (applied[i]) {
        stats[outcome.stat]++;
        const gone = deleted?.[i] === true;
        if (gone && deletedWanted) bus.emit('job:deleted', { job: endedRecord(a.job, outcome.write) });
        announce(bus, a.job, outcome.write, gone);
        bus.emit('attempt:ended', { job: a.job, to: outcome.write.to, at: outcome.write.at });
        if (debug) log.debug({ ...jobLogFields(a.job), to: outcome.write.to, reason: outcome.write.reason }, 'attempt ended');
      } else {
        stats.refused++;
        log.warn({ ...jobLogFields(a.job), to: outcome.write.to }, 'completion refused: this worker no longer holds the lease');
      }
    }
  }

  /**
   * Writes each outcome in a store call of its own (see outcome-isolation.ts); returns those to
   * write again later (a passing store error).
   */
  async writeAlone(batch: Active[]): Promise<Active[]> {
    const writes = batch.map((a) => keepingRow(writeOf(a)));
    const results = await writeEachAlone(this.o.store, writes, this.o.log, batch.map((a) => a.job));
    const done: Active[] = [];
    const applied: boolean[] = [];
    const again: Active[] = [];
    results.forEach((r, i) => {
      const a = batch[i] as Active;
      if (r.kind === 'dropped') {
        this.o.attempts.forget(a.job);
        return;
      }
      if (r.params !== writes[i]) a.outcome = refusedOutcome(r.params);
      if (r.kind === 'again') again.push(a);
      else {
        done.push(a);
        applied.push(r.applied);
      }
    });
    this.written(done, applied);
    return again;
  }

  /** Writes a batch without a claim (shutdown); a refused batch is written job by job. */
  async flush(batch: Active[]): Promise<void> {
    let applied: boolean[];
    try {
      applied = await this.o.store.transition({ items: batch.map((a) => keepingRow(writeOf(a))) });
    } catch (err) {
      if (isTransientStoreError(err)) throw err;
      this.o.log.error({ err, outcomes: batch.length }, 'the store refused the last outcomes; writing each alone');
      const again = await this.writeAlone(batch);
      if (again.length > 0) throw new Error(`could not write the outcomes of ${again.length} job(s) at shutdown: the store is unreachable`);
      return;
    }
    this.written(batch, applied);
  }
}
