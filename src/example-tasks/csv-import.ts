/**
 * `csv.import {uploadId}`: validates an uploaded CSV of `id,email,name,amount,date` rows,
 * streaming it (never whole in memory), and writes `rejected.csv` (each refused row with its
 * line and reasons) and `summary.json` as result files; the job's JSON result is the summary
 * plus timing.
 *
 * Resumable to the byte: a checkpoint (every 1,000 rows or 5 s, whichever comes first) holds
 * the byte offset and line number where the next row starts, the counters, and the rejected
 * lines not yet flushed to a part file. A new attempt reopens the upload at that offset, so its
 * result files are byte-identical to those of an uninterrupted run. See docs/example-tasks.md.
 */
import type { UploadInfo } from '../blobs/handles.js';
import { FatalError } from '../core/errors.js';
import { type BlobTaskContext, withBlobs } from './blob-context.js';
import { countLineBreaks, readRecords, recordTooLarge, withoutLineBreak } from './csv/record-reader.js';
import { assembleRejected, isPartName, partName, REJECTED_FILE, type RejectedRow, rejectedLines } from './csv/rejected-file.js';
import { COLUMNS, checkRow, headerMatches, REASONS } from './csv/row-rules.js';
import { defineTask } from '../task-api/define.js';

export const SUMMARY_FILE = 'summary.json';

/** What `csv.import` saves as its checkpoint (checkpointVersion 1). Plain JSON. */
export interface CsvImportCheckpoint {
  /** The upload this state belongs to: a resumed attempt refuses a different file. */
  upload: { size: number; sha256: string };
  /** `reading` rows; `read`: every row counted and every rejected line in a part; `written`: result files written, parts may remain to delete. */
  phase: 'reading' | 'read' | 'written';
  /** Byte offset where the next record starts. */
  offset: number;
  /** 1-based physical line where the next record starts. */
  line: number;
  /** Whether the header row was read and checked. */
  header: boolean;
  /** Byte offset of the first data row (after the header), for the rows-total estimate. */
  dataStart: number;
  rows: number;
  accepted: number;
  rejected: number;
  /** Rejections per reason (a row may have several reasons). */
  reasons: Record<string, number>;
  /** Part files written so far: rejected.part-000001.csv .. this number. */
  parts: number;
  /** rejected.csv lines found since the last part file. */
  pending: string;
  /** Time spent importing over all attempts so far. */
  elapsedMs: number;
}

/** summary.json: only what the input determines, so every run over the same file writes the same bytes. */
export interface CsvImportSummary {
  upload: { size: number; sha256: string };
  columns: readonly string[];
  rows: number;
  accepted: number;
  rejected: number;
  reasons: Record<string, number>;
  rejectedFile: string;
}

export interface CsvImportResult extends CsvImportSummary {
  /** Import time over all attempts (not in summary.json, which must not depend on timing). */
  durationMs: number;
  /** Rows already done when this attempt started (0 for a fresh start). */
  resumedAtRow: number;
}

export interface CsvImportOptions {
  /** Checkpoint after this many rows... Default 1,000. */
  checkpointEveryRows: number;
  /** ...or this much time, whichever comes first. Default 5,000 ms. */
  checkpointEveryMs: number;
  /** Flush pending rejected lines to a part file once they reach this many characters. Default 32 Ki. */
  partFlushChars: number;
  /** Largest record accepted; beyond it the import fails (an unclosed quote would swallow the file). Default 1 MiB. */
  maxRecordBytes: number;
  /** Report progress every this many rows. Default 250. */
  progressEveryRows: number;
  clock: () => number;
}

export const CSV_IMPORT_DEFAULTS: CsvImportOptions = Object.freeze({
  checkpointEveryRows: 1_000,
  checkpointEveryMs: 5_000,
  partFlushChars: 32 * 1024,
  maxRecordBytes: 1024 * 1024,
  progressEveryRows: 250,
  clock: Date.now,
});

/** Reading takes this share of the percent; writing the result files the rest. */
const READ_PERCENT = 98;

function freshState(upload: UploadInfo): CsvImportCheckpoint {
  return {
    upload: { size: upload.size, sha256: upload.sha256 },
    phase: 'reading',
    offset: 0,
    line: 1,
    header: false,
    dataStart: 0,
    rows: 0,
    accepted: 0,
    rejected: 0,
    reasons: {},
    parts: 0,
    pending: '',
    elapsedMs: 0,
  };
}

function summaryOf(state: CsvImportCheckpoint): CsvImportSummary {
  const reasons: Record<string, number> = {};
  for (const key of Object.keys(state.reasons).sort()) reasons[key] = state.reasons[key] ?? 0;
  return {
    upload: state.upload,
    columns: COLUMNS,
    rows: state.rows,
    accepted: state.accepted,
    rejected: state.rejected,
    reasons,
    rejectedFile: REJECTED_FILE,
  };
}

/** A saved checkpoint we can resume from, or a FatalError when it belongs to another file. */
function resumeState(saved: CsvImportCheckpoint | undefined, upload: UploadInfo): CsvImportCheckpoint | null {
  if (saved === undefined || saved === null) return null;
  if (saved.upload.sha256 !== upload.sha256 || saved.upload.size !== upload.size) {
    throw new FatalError(`upload ${upload.id} is not the file this job's checkpoint was made from`, { code: 'CSV_UPLOAD_CHANGED' });
  }
  return { ...saved, reasons: { ...saved.reasons } };
}

export async function runCsvImport(
  input: { uploadId: string },
  ctx: BlobTaskContext<CsvImportCheckpoint>,
  overrides: Partial<CsvImportOptions> = {},
): Promise<CsvImportResult> {
  try {
    return await importCsv(input, ctx, overrides);
  } catch (err) {
    // A cancelled run reports why it stopped (the runtime's abort reason), not the stream error it caused.
    if (ctx.signal.aborted) throw ctx.signal.reason;
    throw err;
  }
}

async function importCsv(
  input: { uploadId: string },
  ctx: BlobTaskContext<CsvImportCheckpoint>,
  overrides: Partial<CsvImportOptions>,
): Promise<CsvImportResult> {
  const options: CsvImportOptions = { ...CSV_IMPORT_DEFAULTS, ...overrides };
  const { clock } = options;
  const upload = await ctx.uploads.stat(input.uploadId);
  const resumed = resumeState(ctx.checkpoint.value, upload);
  const state = resumed ?? freshState(upload);
  const resumedAtRow = state.rows;
  if (resumed) ctx.log.info({ offset: state.offset, rows: state.rows, phase: state.phase }, 'resuming csv import from checkpoint');

  // Time spent is accumulated across attempts in the checkpoint.
  let segmentStart = clock();
  const elapsed = () => state.elapsedMs + (clock() - segmentStart);
  const save = async () => {
    state.elapsedMs = elapsed();
    segmentStart = clock();
    await ctx.checkpoint.save({ ...state, reasons: { ...state.reasons } });
  };
  const flushPart = async () => {
    if (state.pending === '') return;
    await ctx.results.write(partName(state.parts + 1), state.pending, { contentType: 'text/csv; charset=utf-8' });
    state.parts++;
    state.pending = '';
  };

  if (state.phase === 'reading') {
    await ctx.stage('validating', () => readRows(input.uploadId, upload, state, ctx, options, { save, flushPart }));
    if (!state.header) {
      throw new FatalError(`upload ${input.uploadId} has no header row (expected ${COLUMNS.join(',')})`, { code: 'CSV_NO_HEADER' });
    }
    await flushPart();
    state.phase = 'read';
    await save();
  }

  const summary = summaryOf(state);
  if (state.phase === 'read') {
    await ctx.stage('writing results', async () => {
      ctx.progress({ percent: READ_PERCENT, itemsDone: state.rows, itemsTotal: state.rows, message: `writing ${REJECTED_FILE} and ${SUMMARY_FILE}` });
      await ctx.results.write(REJECTED_FILE, assembleRejected(ctx.results, state.parts, ctx.signal), { contentType: 'text/csv; charset=utf-8' });
      ctx.signal.throwIfAborted();
      await ctx.results.write(SUMMARY_FILE, `${JSON.stringify(summary, null, 2)}\n`, { contentType: 'application/json' });
    });
    state.phase = 'written';
    await save();
  }

  // Parts are only scaffolding; also removes a part an interrupted attempt wrote but never counted.
  for (const file of await ctx.results.list()) {
    if (isPartName(file.name)) await ctx.results.remove(file.name);
  }
  ctx.progress({
    percent: 100,
    itemsDone: state.rows,
    itemsTotal: state.rows,
    message: `${state.rows} rows: ${state.accepted} accepted, ${state.rejected} rejected`,
  });
  return { ...summary, durationMs: Math.round(state.elapsedMs), resumedAtRow };
}

async function readRows(
  uploadId: string,
  upload: UploadInfo,
  state: CsvImportCheckpoint,
  ctx: BlobTaskContext<CsvImportCheckpoint>,
  options: CsvImportOptions,
  io: { save: () => Promise<void>; flushPart: () => Promise<void> },
): Promise<void> {
  const { clock, checkpointEveryRows, checkpointEveryMs, partFlushChars, progressEveryRows, maxRecordBytes } = options;
  const size = upload.size;
  const report = () => {
    const done = state.rows;
    // Rows total: rows so far plus the bytes left at the average row size so far (exact at the end).
    const perRow = done > 0 ? (state.offset - state.dataStart) / done : 0;
    const total = perRow > 0 ? done + Math.round(Math.max(0, size - state.offset) / perRow) : undefined;
    ctx.progress({
      percent: size > 0 ? (READ_PERCENT * state.offset) / size : 0,
      itemsDone: done,
      ...(total === undefined ? {} : { itemsTotal: total }),
      message: `${done} rows checked, ${state.rejected} rejected`,
    });
  };
  // Rejected rows since the last checkpoint, turned into CSV text (state.pending) when one is saved.
  let batch: RejectedRow[] = [];
  let batchChars = 0;
  const reject = (line: number, text: string, reasons: readonly string[]) => {
    state.rejected++;
    for (const r of reasons) state.reasons[r] = (state.reasons[r] ?? 0) + 1;
    const reason = reasons.join('; ');
    batch.push([line, text, reason]);
    batchChars += text.length + reason.length + 16;
  };
  const settleBatch = () => {
    state.pending += rejectedLines(batch);
    batch = [];
    batchChars = 0;
  };

  report();
  let rowsAtSave = state.rows;
  let savedAt = clock();
  // Nothing left to read (an empty upload, or a checkpoint taken at the very last row): do not
  // ask storage for a range starting at the end, which S3 answers with 416.
  if (state.offset >= size) {
    report();
    return;
  }
  const source = await ctx.uploads.open(uploadId, { start: state.offset });
  const reader = readRecords(source, { start: state.offset, signal: ctx.signal, maxRecordBytes });
  for await (const item of reader.records) {
    ctx.signal.throwIfAborted();
    if (item.end - state.offset > maxRecordBytes) throw recordTooLarge(maxRecordBytes);
    const line = state.line;
    const text = withoutLineBreak(item.raw);
    state.line += countLineBreaks(item.raw);
    state.offset = item.end;
    if (text === '') continue; // a blank line
    if (!state.header) {
      if (!headerMatches(item.fields)) {
        throw new FatalError(`upload ${uploadId}: line ${line} must be the header ${COLUMNS.join(',')}, got ${JSON.stringify(text.slice(0, 200))}`, {
          code: 'CSV_BAD_HEADER',
        });
      }
      state.header = true;
      state.dataStart = state.offset;
      continue;
    }
    state.rows++;
    const reasons = checkRow(item.fields);
    if (reasons.length === 0) state.accepted++;
    else reject(line, text, reasons);
    if (state.rows % progressEveryRows === 0) report();
    if (state.rows - rowsAtSave >= checkpointEveryRows || state.pending.length + batchChars >= partFlushChars || clock() - savedAt >= checkpointEveryMs) {
      settleBatch();
      if (state.pending.length >= partFlushChars) await io.flushPart();
      await io.save();
      rowsAtSave = state.rows;
      savedAt = clock();
    }
  }
  const unclosed = reader.unclosed();
  if (unclosed !== undefined) {
    if (!state.header) throw new FatalError(`upload ${uploadId}: the header row has an unclosed quote`, { code: 'CSV_BAD_HEADER' });
    if (size - state.offset > maxRecordBytes) throw recordTooLarge(maxRecordBytes);
    state.rows++;
    reject(state.line, withoutLineBreak(unclosed), [REASONS.unclosedQuote]);
    state.line += countLineBreaks(unclosed);
    state.offset = size;
  }
  settleBatch();
  report();
}

export const csvImport = defineTask<Record<string, unknown>, CsvImportResult, CsvImportCheckpoint>({
  type: 'csv.import',
  input: {
    type: 'object',
    additionalProperties: false,
    required: ['uploadId'],
    properties: { uploadId: { type: 'string', minLength: 1, maxLength: 200 } },
  },
  maxAttempts: 5,
  checkpointVersion: 1,
  async run(input, ctx) {
    return runCsvImport(input as { uploadId: string }, withBlobs(ctx, 'csv.import'));
  },
});
