/**
 * Erasure requests (data protection): delete a tenant's or a filter's ended jobs with all their
 * rows and files. Jobs that have not ended (pending, queued, running, retrying, waiting) are
 * never deleted under a worker's feet: they are counted as `skipped`, for the caller to cancel
 * them and purge again. An unfiltered purge is refused: it would erase every tenant at once.
 */
import { InvalidOptionsError } from '../core/errors.js';
import { MAX_TIME_MS } from '../core/limits.js';
import { hasUnstorable } from '../core/storable.js';
import { isJobState, type JobState } from '../core/states.js';
import type { Eraser, Erased } from './erase.js';
import type { RetentionStore } from '../store/store.js';

/** What to erase; at least one of tenant, type and before. */
export interface PurgeFilter {
  tenant?: string;
  /** Ended states to erase (succeeded, expired, failed, cancelled). Default: all four. */
  states?: JobState[];
  type?: string;
  /** Only jobs that ended before this time (ms since the epoch). */
  before?: number;
}

export interface PurgeOutcome {
  deleted: Erased;
  /** Matching jobs that have not ended (cancel them, then purge again). */
  skipped: number;
}

const ENDED: readonly JobState[] = ['succeeded', 'expired', 'failed', 'cancelled'];

export async function purgeJobs(ctx: { store: RetentionStore; eraser: Eraser }, filter: PurgeFilter): Promise<PurgeOutcome> {
  if (filter.tenant === undefined && filter.type === undefined && filter.before === undefined) {
    throw new InvalidOptionsError('a purge needs a filter: tenant, type or before (an unfiltered purge would erase every tenant)', 'tenant');
  }
  if (filter.before !== undefined && (!Number.isFinite(filter.before) || Math.abs(filter.before) > MAX_TIME_MS)) throw new InvalidOptionsError('before must be a time', 'before');
  // No job holds such a text (and PostgreSQL would refuse it in a query): nothing could match.
  for (const field of ['tenant', 'type'] as const) {
    const v = filter[field];
    if (v !== undefined && (typeof v !== 'string' || v === '' || hasUnstorable(v))) {
      throw new InvalidOptionsError(`${field} must be a non-empty string without U+0000 or lone surrogates`, field);
    }
  }
  for (const s of filter.states ?? []) {
    if (!isJobState(s) || !ENDED.includes(s)) throw new InvalidOptionsError(`state must be one of ${ENDED.join(', ')} (got "${String(s)}"): only ended jobs are purged`, 'state');
  }
  const states = filter.states === undefined || filter.states.length === 0 ? ENDED : filter.states;
  const deleted = await ctx.eraser.eraseMatching({
    states,
    ...(filter.tenant === undefined ? {} : { tenant: filter.tenant }),
    ...(filter.type === undefined ? {} : { types: [filter.type] }),
    ...(filter.before === undefined ? {} : { finishedBefore: filter.before }),
  });
  // Open jobs are reported only when the purge is not limited to an end time or some end states (those never match open jobs).
  const skipped =
    filter.before === undefined && filter.states === undefined
      ? await ctx.store.countOpenJobs({ ...(filter.tenant === undefined ? {} : { tenant: filter.tenant }), ...(filter.type === undefined ? {} : { type: filter.type }) })
      : 0;
  return { deleted, skipped };
}
