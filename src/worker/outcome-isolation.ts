/**
 * One job's refused write must not stop the others. A worker writes the outcomes of the jobs
 * that finished together, in one transaction (with its next claim); when the store refuses that
 * transaction for anything but a passing outage, the cause may be one job's data. Then each
 * outcome is written alone: the ones the store takes are done, and a job whose own outcome is
 * refused is failed instead, with an error that says why and holds none of its data. Only if
 * even that is refused is the job left to the sweeper (requeued when its lease times out).
 */
import type { Logger } from 'pino';
import { jobLogFields } from '../core/log-fields.js';
import type { JobError } from '../core/errors.js';
import { escapeUnstorable } from '../core/storable.js';
import { isTransientStoreError } from '../core/store-errors.js';
import { failRefused, type TransitionParams } from '../core/transitions.js';
import type { JobQueueStore } from '../store/store.js';

type JobLogSubject = Parameters<typeof jobLogFields>[0];

export const OUTCOME_REFUSED = 'OUTCOME_REFUSED';

export type AloneResult =
  /** Written (or lost its compare-and-swap: `applied` false); `params` is what was written (the fallback, if any). */
  | { kind: 'written'; applied: boolean; params: TransitionParams }
  /** A passing store error: write `params` again later. */
  | { kind: 'again'; params: TransitionParams }
  /** Refused, and so was failing the job: nothing was written (logged). */
  | { kind: 'dropped' };

/** The driver's words, short and storable. */
function reasonOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown })?.code;
  const text = `${message}${typeof code === 'string' ? ` (${code})` : ''}`;
  return escapeUnstorable(text.length > 300 ? `${text.slice(0, 300)}…` : text);
}

/** Fails the job in place of an outcome the store refused (no result, no handler text). */
export function refusedOutcomeFallback(p: TransitionParams, err: unknown): TransitionParams {
  const error: JobError = {
    message: `the store refused to record this attempt's outcome (${p.to}): ${reasonOf(err)}`,
    code: OUTCOME_REFUSED,
    retryable: false,
  };
  return failRefused(p, error);
}

/** Writes each transition in its own store call; never throws. */
export async function writeEachAlone(
  store: JobQueueStore,
  items: readonly TransitionParams[],
  log: Logger,
  /** The jobs the items are for, in order: their log fields (id, type, attempt, tenant). */
  jobs: readonly JobLogSubject[] = [],
): Promise<AloneResult[]> {
  const out: AloneResult[] = [];
  for (const [i, p] of items.entries()) {
    const job = jobs[i];
    const fields = job ? jobLogFields(job) : { jobId: p.id };
    let params = p;
    for (;;) {
      try {
        const [applied] = await store.transition({ items: [params] });
        out.push({ kind: 'written', applied: applied === true, params });
        break;
      } catch (err) {
        if (isTransientStoreError(err)) {
          out.push({ kind: 'again', params });
          break;
        }
        if (params !== p) {
          log.error({ err, ...fields }, 'the store refused to fail the job too; it is requeued when its lease times out');
          out.push({ kind: 'dropped' });
          break;
        }
        log.error({ err, ...fields, to: p.to }, "the store refused this job's outcome; failing the job instead");
        params = refusedOutcomeFallback(p, err);
      }
    }
  }
  return out;
}
