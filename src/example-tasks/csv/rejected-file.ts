/**
 * `rejected.csv`, the rows `csv.import` refused: `line,row,reason` (the 1-based line where the
 * row starts, its original text, the reasons joined by "; "). While the import runs, rejected
 * lines accumulate in the checkpoint and are flushed now and then as numbered part files
 * (`rejected.part-000001.csv`, ...); at the end the parts are concatenated in order.
 */

import { stringify } from 'csv-stringify/sync';
import type { ResultsHandle } from '../../blobs/handles.js';

export const REJECTED_FILE = 'rejected.csv';
export const REJECTED_HEADER = 'line,row,reason\n';

const PART = /^rejected\.part-\d{6,}\.csv$/;

export function partName(n: number): string {
  return `rejected.part-${String(n).padStart(6, '0')}.csv`;
}

export function isPartName(name: string): boolean {
  return PART.test(name);
}

/** A rejected row: the line it starts on, its original text, why. */
export type RejectedRow = [line: number, row: string, reason: string];

/** rejected.csv lines for `rows`, quoted as needed, each ending in `\n` (one call per batch: csv-stringify's per-call setup is costly). */
export function rejectedLines(rows: readonly RejectedRow[]): string {
  return rows.length === 0 ? '' : stringify(rows as RejectedRow[]);
}

/** The header, then parts 1..`parts` in order, streamed (never a whole part in memory). */
export async function* assembleRejected(results: ResultsHandle, parts: number, signal: AbortSignal): AsyncGenerator<Uint8Array> {
  yield Buffer.from(REJECTED_HEADER);
  for (let n = 1; n <= parts; n++) {
    signal.throwIfAborted();
    const part = await results.open(partName(n));
    try {
      for await (const chunk of part) yield typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Uint8Array);
    } finally {
      part.destroy();
    }
  }
}
