/**
 * Deleting ended jobs with everything they own, in small batches: retention (a sweeper pass,
 * rules from core/retention.ts) and purge (an erasure request by tenant or filter). Per batch:
 * the files of the jobs that have result records are deleted from blob storage first, then the
 * rows in one short transaction (RetentionStore.deleteJobs), so a crash in between leaves rows
 * whose next deletion deletes their files again, never files nobody can find.
 */
import { type RetentionPolicy, retentionRules } from '../core/retention.js';
import type { JobState } from '../core/states.js';
import type { DeletedRows, EndedJobFilter, ResultFileStore, RetentionStore } from '../store/store.js';

/** What an erasure removed: rows per table, and blobs deleted from blob storage. */
export interface Erased extends DeletedRows {
  files: number;
}

export const NOTHING_ERASED: Erased = Object.freeze({ jobs: 0, progress: 0, resultFiles: 0, webhooks: 0, deliveries: 0, signals: 0, attempts: 0, files: 0 });

export interface EraserOptions {
  store: RetentionStore & Pick<ResultFileStore, 'listResults'>;
  /** Deletes every blob of a job's results; the number deleted. Absent: no blob storage (and no file records to act on). */
  deleteFiles?: (jobId: string) => Promise<number>;
  /** Jobs per batch (per statement and transaction). Default 500. */
  batchSize?: number;
  /** Pause between batches, so other writers get the database in between. Default 0 (a yield to the event loop). */
  pauseMs?: number;
}

function add(into: Erased, rows: DeletedRows, files: number): void {
  for (const k of Object.keys(rows) as (keyof DeletedRows)[]) into[k] += rows[k];
  into.files += files;
}

export class Eraser {
  private readonly batch: number;
  /** Per retention rule, the end time its last batch reached (see retain). */
  private readonly resumeAt = new Map<string, Map<string, number>>();
  private resumedSince = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: EraserOptions) {
    this.batch = options.batchSize ?? 500;
  }

  /**
   * Deletes the listed jobs that are ended (and in `states`, when given) and childless, files
   * then rows, as one batch: the caller keeps batches to `batchSize` ids (a dead-letter discard).
   */
  async eraseJobs(ids: string[], states?: readonly JobState[]): Promise<Erased> {
    const into: Erased = { ...NOTHING_ERASED };
    if (ids.length > 0) await this.deleteBatch(ids, into, states);
    return into;
  }

  /** Deletes one batch of ids (files, then rows). */
  private async deleteBatch(ids: string[], into: Erased, states?: readonly JobState[]): Promise<number> {
    const { store, deleteFiles } = this.options;
    let files = 0;
    const withFiles = await store.listResults({ ids });
    if (withFiles.size > 0) {
      if (!deleteFiles) throw new Error('jobs with result files cannot be deleted without blob storage');
      for (const id of withFiles.keys()) files += await deleteFiles(id);
    }
    const rows = await store.deleteJobs(states === undefined ? { ids } : { ids, states });
    add(into, rows, files);
    return rows.jobs;
  }

  private async pause(): Promise<void> {
    const ms = this.options.pauseMs ?? 0;
    await new Promise((resolve) => (ms > 0 ? setTimeout(resolve, ms) : setImmediate(resolve)));
  }

  /**
   * Deletes the jobs matching `filter` batch after batch until none is left or the time is past
   * `deadline` (performance.now()). A parent becomes deletable once its children are gone, so
   * it is found by a later batch. One state at a time: the (state, finished_at) index then gives
   * the order, where several states at once would have every match sorted at each batch.
   */
  async eraseMatching(
    filter: EndedJobFilter,
    deadline = Number.POSITIVE_INFINITY,
    into: Erased = { ...NOTHING_ERASED },
    resume?: Map<string, number>,
  ): Promise<Erased> {
    for (const state of filter.states) {
      // Each batch starts at the end time where the previous one ended (ties included: a job of
      // that instant the previous batch did not take is found again), not at the oldest end.
      let from: number | undefined = resume?.get(state);
      for (;;) {
        const one: EndedJobFilter = { ...filter, states: [state], ...(from === undefined ? {} : { finishedFrom: from }) };
        const found = await this.options.store.endedJobs({ filter: one, limit: this.batch });
        if (found.length === 0) break;
        const deleted = await this.deleteBatch(
          found.map((j) => j.id),
          into,
        );
        // Every id was skipped (taken by a concurrent writer): leave them for the next pass.
        if (deleted === 0) break;
        from = found[found.length - 1]?.finishedAt;
        if (resume && from !== undefined) resume.set(state, from);
        if (performance.now() >= deadline) return into;
        await this.pause();
      }
    }
    return into;
  }

  /**
   * One retention pass at `now`: each rule (per end state, per overriding task) deletes batch
   * after batch while the pass's time budget lasts, so a large backlog is worked off over
   * several passes without holding up the sweeper's other work for long, and a steady stream
   * of completions (`0`: delete on completion) is kept up with at any throughput the budget
   * allows (bench/RESULTS.md).
   */
  async retain(global: RetentionPolicy, perTask: ReadonlyMap<string, RetentionPolicy>, now: number, budgetMs = 500): Promise<Erased> {
    const into: Erased = { ...NOTHING_ERASED };
    const deadline = performance.now() + budgetMs;
    // Passes resume where the last one of the same rule ended, and start over from the oldest
    // end once a minute: a job skipped meanwhile (locked by another writer) is found then.
    if (now - this.resumedSince >= 60_000) {
      this.resumeAt.clear();
      this.resumedSince = now;
    }
    for (const rule of retentionRules(global, perTask, now)) {
      const filter: EndedJobFilter = { states: rule.states, finishedBefore: rule.finishedBefore };
      if (rule.types) filter.types = rule.types;
      if (rule.excludeTypes) filter.excludeTypes = rule.excludeTypes;
      const key = JSON.stringify([rule.states, rule.types, rule.excludeTypes]);
      let resume = this.resumeAt.get(key);
      if (!resume) {
        resume = new Map();
        this.resumeAt.set(key, resume);
      }
      await this.eraseMatching(filter, deadline, into, resume);
      if (performance.now() >= deadline) break;
    }
    return into;
  }
}
