/**
 * Fail-fast in the store: when a parent waiting fail-fast is queued again because a child failed
 * (or was cancelled), its other open children are stopped in that same transaction
 * (WorkflowStore.resumeParents, resumeStrandedParents). Each store reads the siblings its own way
 * and writes them with its transitions; what each write is comes from core's builders, here, so
 * both stores stop a sibling alike.
 */
import type { JobState } from '../core/states.js';
import { cancelAsChild, requestCancelAsChild } from '../core/transitions.js';
import type { StoppedSibling } from './workflow-store.js';

/** The resume reason that stops siblings (a failFast wait woken by a failed child). */
export const CHILD_FAILED = 'child failed';

/** What a store reads of a parent's open child to stop it. */
export interface SiblingRow {
  id: string;
  tenant: string;
  type: string;
  parentId: string;
  state: JobState;
  lease: number;
  cancelRequested: boolean;
  childrenTotal: number;
}

/** Why a sibling was stopped, naming the child that failed (the log entry, its error, a running one's cancel reason). */
export function siblingFailedReason(failed: { id: string; state: string }): string {
  return `sibling failed (child ${failed.id} ${failed.state})`;
}

/** The write that stops `row`; null for a running child whose cancel is already requested. */
export function stopSibling(row: SiblingRow, at: number, reason: string): StoppedSibling | null {
  if (row.state === 'running' && row.cancelRequested) return null;
  const write = row.state === 'running' ? requestCancelAsChild(row, at, reason) : cancelAsChild(row, at, reason);
  return { job: { id: row.id, tenant: row.tenant, type: row.type, parentId: row.parentId }, write, childrenTotal: row.childrenTotal };
}
