/**
 * The synthetic data behind `report.generate`: sales rows drawn from a seeded generator (same
 * seed, same rows), spooled to a temp file as JSON lines by the `query` stage and read back by
 * `render`, with totals computed on the way (the PDF's first page shows them before the table,
 * which is why the query result is spooled instead of streamed straight into the renderer).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { pipeline } from 'node:stream/promises';
import { withAbortReason } from '../../core/abort.js';
import { parseJson } from '../../core/json-text.js';
import { seededRandom } from '../../core/seeded-random.js';

export interface SalesRow {
  n: number;
  /** ISO date (YYYY-MM-DD). */
  date: string;
  region: string;
  product: string;
  quantity: number;
  unitPriceCents: number;
  totalCents: number;
}

export interface SalesTotals {
  rows: number;
  quantity: number;
  revenueCents: number;
  revenueByRegionCents: Record<string, number>;
}

export const REGIONS = ['North', 'South', 'East', 'West', 'Central'] as const;
const PRODUCTS = ['Anchor bolt', 'Bearing 6204', 'Cable tie 200 mm', 'Drill bit 8 mm', 'Edge clamp', 'Fuse 10 A', 'Gasket kit', 'Hex key set'] as const;
const PRICES_CENTS = [35, 420, 12, 689, 1_250, 95, 2_399, 1_575] as const;


const DAY_MS = 86_400_000;
const START = Date.UTC(2024, 0, 1);

export function nextSalesRow(random: () => number, n: number): SalesRow {
  const p = Math.floor(random() * PRODUCTS.length);
  const quantity = 1 + Math.floor(random() * 250);
  const unitPriceCents = PRICES_CENTS[p] ?? 100;
  return {
    n,
    date: new Date(START + Math.floor(random() * 366) * DAY_MS).toISOString().slice(0, 10),
    region: REGIONS[Math.floor(random() * REGIONS.length)] ?? 'North',
    product: PRODUCTS[p] ?? 'Anchor bolt',
    quantity,
    unitPriceCents,
    totalCents: quantity * unitPriceCents,
  };
}

export function emptyTotals(): SalesTotals {
  return { rows: 0, quantity: 0, revenueCents: 0, revenueByRegionCents: Object.fromEntries(REGIONS.map((r) => [r, 0])) };
}

export function addToTotals(totals: SalesTotals, row: SalesRow): void {
  totals.rows++;
  totals.quantity += row.quantity;
  totals.revenueCents += row.totalCents;
  totals.revenueByRegionCents[row.region] = (totals.revenueByRegionCents[row.region] ?? 0) + row.totalCents;
}

/**
 * The `query` stage: draws `rows` rows from `seed` into `path` (JSON lines), waiting for the
 * disk, calling `onRows` every `every` rows, stopping at once when `signal` fires.
 */
export async function spoolSales(
  path: string,
  options: { rows: number; seed: number; signal: AbortSignal; every?: number; onRows?: (done: number) => void },
): Promise<SalesTotals> {
  const { rows, seed, signal, every = 1_000, onRows } = options;
  const random = seededRandom(seed);
  const totals = emptyTotals();
  async function* lines(): AsyncGenerator<string> {
    let batch = '';
    for (let n = 1; n <= rows; n++) {
      const row = nextSalesRow(random, n);
      addToTotals(totals, row);
      batch += `${JSON.stringify(row)}\n`;
      if (n % every === 0 || n === rows) {
        signal.throwIfAborted();
        yield batch;
        batch = '';
        onRows?.(n);
      }
    }
  }
  // pipeline: backpressure, write errors and the abort all end the stage (and close the file).
  await withAbortReason(signal, pipeline(lines, createWriteStream(path), { signal }));
  return totals;
}

/** Reads the spool back, row by row. */
export async function* readSpool(path: string): AsyncGenerator<SalesRow> {
  const input = createReadStream(path);
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  try {
    for await (const line of lines) if (line !== '') yield parseJson(line) as SalesRow;
  } finally {
    lines.close();
    input.destroy();
  }
}

export function formatCents(cents: number): string {
  const sign = cents < 0 ? '-' : '';
  const abs = Math.abs(cents);
  return `${sign}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, '0')}`;
}
