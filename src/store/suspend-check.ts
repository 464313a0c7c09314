/** What every store refuses before it writes anything of a suspend (WorkflowStore.suspend). */
import { assertTransition } from '../core/states.js';
import type { SuspendParams } from './store.js';

/** A suspend must be running → waiting under the lease, and its children must be the job's own. */
export function checkSuspend(params: SuspendParams): void {
  const { write } = params;
  assertTransition(write.from, write.to);
  if (write.from !== 'running' || write.to !== 'waiting' || write.lease === undefined) {
    throw new Error('suspend writes running → waiting under the lease (core/transitions.ts suspend)');
  }
  for (const child of params.children ?? []) {
    if (child.parentId !== write.id) throw new Error(`child ${child.id} of a suspend must have parentId ${write.id}`);
  }
}
