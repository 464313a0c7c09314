/**
 * `report.generate {rows, format: "csv" | "pdf", seed?}`: a report job in three stages with
 * weighted progress — `query` (20%: draw the synthetic sales rows and their totals, spooled to
 * a temp file), `render` (60%: the CSV, or a paginated PDF table with pdfkit, to a temp file),
 * `upload` (20%: stream the file to the job's results as `report.csv` / `report.pdf`). Every
 * step streams; cancellation stops each stage within a few hundred rows.
 *
 * pdfkit is an optional package (17 MB with fontkit, for this example alone): the PDF renderer
 * is loaded by the first PDF job, and without pdfkit that job fails at once (FatalError, code
 * MISSING_PACKAGE, "... needs the package pdfkit ...: npm install pdfkit"); CSV reports, and
 * `longhaul dev`, need nothing more.
 *
 * No checkpoint: a new attempt starts over (the temp files die with the process), which for a
 * report of at most a million rows costs less than it would to make resumable.
 */

import { createReadStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline, Transform } from 'node:stream';
import type { ResultFile } from '../blobs/handles.js';
import { type BlobTaskContext, withBlobs } from './blob-context.js';
import { FatalError } from '../core/errors.js';
import { loadOptional, MissingPackageError, OPTIONAL_PACKAGES } from '../core/optional-packages.js';
import { defineTask } from '../task-api/define.js';
import { renderCsv } from './report/render-csv.js';
import { readSpool, type SalesTotals, spoolSales } from './report/sales-data.js';
import { type StageWeight, weightedPercent } from './report/weighted-stages.js';
import { destroyOnAbort } from './stream-abort.js';

export type ReportFormat = 'csv' | 'pdf';

export interface ReportInput {
  rows: number;
  format: ReportFormat;
  seed: number;
}

export interface ReportResult {
  file: string;
  format: ReportFormat;
  rows: number;
  /** PDF only. */
  pages: number | null;
  size: number;
  sha256: string;
  totals: SalesTotals;
}

export const REPORT_MAX_ROWS = { csv: 1_000_000, pdf: 100_000 } as const;

type Stage = 'query' | 'render' | 'upload';

export const REPORT_STAGES: readonly StageWeight<Stage>[] = [
  { name: 'query', weight: 20 },
  { name: 'render', weight: 60 },
  { name: 'upload', weight: 20 },
];

const CONTENT_TYPES: Record<ReportFormat, string> = { csv: 'text/csv; charset=utf-8', pdf: 'application/pdf' };

export async function runReport(input: ReportInput, ctx: BlobTaskContext): Promise<ReportResult> {
  const { rows, format, seed } = input;
  const report = (stage: Stage, fraction: number, extra: { itemsDone?: number; message?: string } = {}) =>
    ctx.progress({ stage, percent: weightedPercent(REPORT_STAGES, stage, fraction), ...extra, ...(extra.itemsDone === undefined ? {} : { itemsTotal: rows }) });
  // Before any work: a PDF report without pdfkit fails at once.
  const renderPdf = format === 'pdf' ? await loadPdfRenderer() : null;
  const dir = await mkdtemp(join(tmpdir(), 'longhaul-report-'));
  try {
    const spool = join(dir, 'rows.jsonl');
    const rendered = join(dir, `report.${format}`);

    const totals = await ctx.stage('query', async () => {
      report('query', 0, { itemsDone: 0, message: 'querying' });
      return spoolSales(spool, {
        rows,
        seed,
        signal: ctx.signal,
        onRows: (done) => report('query', done / rows, { itemsDone: done, message: `${done} of ${rows} rows fetched` }),
      });
    });

    const pages = await ctx.stage('render', async () => {
      report('render', 0, { itemsDone: 0, message: `rendering ${format.toUpperCase()}` });
      const onRows = (done: number) => report('render', done / rows, { itemsDone: done, message: `${done} of ${rows} rows rendered` });
      if (renderPdf !== null) return (await renderPdf(readSpool(spool), rendered, { totals, seed, signal: ctx.signal, onRows })).pages;
      await renderCsv(readSpool(spool), rendered, { signal: ctx.signal, onRows });
      return null;
    });

    const name = `report.${format}`;
    const file: ResultFile = await ctx.stage('upload', async () => {
      const size = (await stat(rendered)).size;
      let sent = 0;
      report('upload', 0, { message: `uploading ${size} bytes` });
      // A cancel that came meanwhile (even from the progress call above) stops here, before any stream exists.
      ctx.signal.throwIfAborted();
      const meter = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          sent += chunk.length;
          report('upload', size > 0 ? sent / size : 1, { message: `${sent} of ${size} bytes uploaded` });
          callback(null, chunk);
        },
      });
      const body = pipeline(createReadStream(rendered), meter, () => {
        // Errors (and an abort) reach ctx.results.write through `meter`.
      });
      destroyOnAbort(ctx.signal, meter);
      const written = await ctx.results.write(name, body, { contentType: CONTENT_TYPES[format] });
      ctx.signal.throwIfAborted();
      report('upload', 1, { message: `${name} uploaded` });
      return written;
    });

    return { file: name, format, rows, pages, size: file.size, sha256: file.sha256, totals };
  } catch (err) {
    // A cancelled run reports why it stopped (the runtime's abort reason), not the stream error it caused.
    if (ctx.signal.aborted) throw ctx.signal.reason;
    throw err;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The PDF renderer (and pdfkit), loaded by the first PDF report; without pdfkit, a FatalError: another attempt would not find it either. */
async function loadPdfRenderer(): Promise<typeof import('./report/render-pdf.js').renderPdf> {
  try {
    return (await loadOptional(OPTIONAL_PACKAGES.pdf, () => import('./report/render-pdf.js'))).renderPdf;
  } catch (err) {
    if (err instanceof MissingPackageError) throw new FatalError(err.message, { code: err.code, cause: err });
    throw err;
  }
}

export const reportGenerate = defineTask<Record<string, unknown>, ReportResult>({
  type: 'report.generate',
  input: {
    type: 'object',
    additionalProperties: false,
    required: ['rows'],
    properties: {
      rows: { type: 'integer', minimum: 1, maximum: REPORT_MAX_ROWS.csv },
      format: { enum: ['csv', 'pdf'], default: 'csv' },
      seed: { type: 'integer', minimum: 0, maximum: 4_294_967_295, default: 1 },
    },
    // A PDF table of more rows is thousands of pages: nobody reads it, and it takes minutes to draw.
    if: { properties: { format: { const: 'pdf' } }, required: ['format'] },
    // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then; an object, not a function, so never a thenable
    then: { properties: { rows: { maximum: REPORT_MAX_ROWS.pdf } } },
  },
  maxAttempts: 3,
  async run(input, ctx) {
    return runReport(input as ReportInput, withBlobs(ctx, 'report.generate'));
  },
});
