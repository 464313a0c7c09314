/** The CSV form of the sales report: a header line, then one line per row. Streamed to `path`. */
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { stringify } from 'csv-stringify/sync';
import { withAbortReason } from '../../core/abort.js';
import { formatCents, type SalesRow } from './sales-data.js';

export const CSV_HEADER = ['n', 'date', 'region', 'product', 'quantity', 'unit_price', 'total'] as const;

export async function renderCsv(
  rows: AsyncIterable<SalesRow>,
  path: string,
  options: { signal: AbortSignal; every?: number; onRows?: (done: number) => void },
): Promise<void> {
  const { signal, every = 1_000, onRows } = options;
  async function* text(): AsyncGenerator<string> {
    yield stringify([CSV_HEADER as unknown as string[]]);
    let batch: unknown[][] = [];
    let done = 0;
    for await (const r of rows) {
      batch.push([r.n, r.date, r.region, r.product, r.quantity, formatCents(r.unitPriceCents), formatCents(r.totalCents)]);
      done++;
      if (batch.length === every) {
        signal.throwIfAborted();
        yield stringify(batch);
        batch = [];
        onRows?.(done);
      }
    }
    if (batch.length > 0) yield stringify(batch);
    onRows?.(done);
  }
  await withAbortReason(signal, pipeline(text, createWriteStream(path), { signal }));
}
