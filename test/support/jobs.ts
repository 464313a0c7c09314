/** Reading a job's end and its log in tests that drive a Longhaul instance. */
import type { JobSnapshot } from '../../src/core/job.js';
import { isTerminal } from '../../src/core/states.js';
import type { Longhaul } from '../../src/longhaul.js';
import { waitFor } from '../fixtures/process-harness.js';

/** The job's snapshot once it is terminal; fails the test after `timeoutMs`. */
export async function settled(lh: Longhaul, id: string, timeoutMs: number): Promise<JobSnapshot> {
  return waitFor(
    async () => {
      const s = await lh.get(id);
      return s && isTerminal(s.status) ? s : undefined;
    },
    `job ${id} to finish`,
    timeoutMs,
  );
}

/** The job's transition log as `from>to:reason` lines. */
export async function logOf(lh: Longhaul, id: string): Promise<string[]> {
  return (await lh.transitions(id)).map((t) => `${t.from}>${t.to}:${t.reason}`);
}
