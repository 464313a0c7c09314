/**
 * The two example tasks, `csv.import` and `report.generate`, run as plain handlers against a
 * test-local context (test/fixtures/csv-context.ts): results and uploads in a temp directory,
 * checkpoints in memory, crashes simulated by aborting a run and refusing its later side effects.
 * The real-process kill -9 test of a million rows lives with the worker tests.
 */
import assert from 'node:assert/strict';
import { createReadStream } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse } from 'csv-parse/sync';
import { FatalError } from '../../src/core/errors.js';
import { REASONS } from '../../src/example-tasks/csv/row-rules.js';
import { type CsvImportCheckpoint, type CsvImportOptions, type CsvImportResult, csvImport, runCsvImport } from '../../src/example-tasks/csv-import.js';
import { PDF_ROWS_FIRST_PAGE, PDF_ROWS_PER_PAGE } from '../../src/example-tasks/report/render-pdf.js';
import { reportGenerate, runReport } from '../../src/example-tasks/report-generate.js';
import { validateInput } from '../../src/task-api/schema.js';
import { CrashedError, makeRun, type RunRecord, TempBlobs } from '../fixtures/csv-context.js';
import { generateCsv } from '../fixtures/csv-generate.js';

type Run = RunRecord<CsvImportCheckpoint>;

/** A small file with every hard case: BOM, CRLF, quoted commas, doubled quotes, line breaks in quotes (CRLF and LF), a blank line, non-ASCII, no final newline. */
const TRICKY = [
  '\uFEFFid,email,name,amount,date\r\n',
  'a1,ann@example.com,"Smith, Ann",10.50,2024-01-31\r\n',
  'a2,bob@example.com,"He said ""hi""",3,2024-02-29\r\n',
  'a3,cy@example.com,"two\r\nlines, with comma",1.5,2024-03-01\r\n',
  'a4,not-an-email,"x",1,2024-01-01\r\n',
  '\r\n',
  'a5,dd@example.com,"Ünïcödé ☃",-2.25,2023-12-31\r\n',
  'a6,ee@example.com,"bad ""row"",\r\nspanning",abc,2023-02-29\r\n',
  'a7,ff@example.com,too,many,columns,here\r\n',
  ',gg@example.com,Name,1.001,2024-13-01\r\n',
  'a9,hh@example.com,"last ""quoted""\nfield",7,2024-06-30',
].join('');

const TRICKY_REJECTED = [
  ['line', 'row', 'reason'],
  ['6', 'a4,not-an-email,"x",1,2024-01-01', REASONS.emailInvalid],
  ['9', 'a6,ee@example.com,"bad ""row"",\r\nspanning",abc,2023-02-29', `${REASONS.amountInvalid}; ${REASONS.dateInvalid}`],
  ['11', 'a7,ff@example.com,too,many,columns,here', REASONS.columns],
  ['12', ',gg@example.com,Name,1.001,2024-13-01', `${REASONS.idMissing}; ${REASONS.amountPrecision}; ${REASONS.dateInvalid}`],
];

interface Outcome {
  result: CsvImportResult;
  rejected: Buffer;
  summary: Buffer;
  files: string[];
}

async function outcome(blobs: TempBlobs, result: CsvImportResult): Promise<Outcome> {
  return { result, rejected: await blobs.readResult('rejected.csv'), summary: await blobs.readResult('summary.json'), files: blobs.resultNames() };
}

/** Runs the import once, uninterrupted, in fresh storage. */
async function importOnce(content: string | Buffer, options: Partial<CsvImportOptions> = {}, chunkBytes = 64 * 1024): Promise<Outcome & { run: Run }> {
  const blobs = await TempBlobs.create();
  try {
    blobs.uploadChunkBytes = chunkBytes;
    const upload = await blobs.addUpload(content);
    const run = makeRun<CsvImportCheckpoint>({ blobs });
    const result = await runCsvImport({ uploadId: upload.id }, run.ctx, options);
    return { ...(await outcome(blobs, result)), run };
  } finally {
    await blobs.destroy();
  }
}

/**
 * Runs the import in `blobs` until it succeeds, each run resuming from the last saved
 * checkpoint; `crashAt(runIndex)` says at which side-effect number that run crashes (or never).
 */
async function importWithCrashes(
  blobs: TempBlobs,
  uploadId: string,
  options: Partial<CsvImportOptions>,
  crashAt: (runIndex: number) => number | null,
): Promise<{ outcome: Outcome; runs: number; crashes: number; resumedAtRow: number }> {
  let checkpoint: CsvImportCheckpoint | undefined;
  let crashes = 0;
  for (let i = 0; i < 200; i++) {
    const at = crashAt(i);
    const run = makeRun<CsvImportCheckpoint>({
      blobs,
      checkpoint,
      attempt: i + 1,
      onEvent: (n, _kind, r) => {
        if (n === at) r.crash();
      },
    });
    try {
      const result = await runCsvImport({ uploadId }, run.ctx, options);
      assert.equal(run.crashed, false, 'a crashed run must not return a result');
      return { outcome: await outcome(blobs, result), runs: i + 1, crashes, resumedAtRow: result.resumedAtRow };
    } catch (err) {
      if (!run.crashed) throw err;
      assert.ok(err instanceof CrashedError, `a crashed run ends with its abort reason, got ${String(err)}`);
      crashes++;
      checkpoint = run.lastSaved ?? checkpoint;
    }
  }
  throw new Error('import never finished');
}

function assertSameOutcome(actual: Outcome, expected: Outcome, label: string): void {
  assert.ok(actual.rejected.equals(expected.rejected), `${label}: rejected.csv differs`);
  assert.ok(actual.summary.equals(expected.summary), `${label}: summary.json differs`);
  assert.deepEqual(actual.files, ['rejected.csv', 'summary.json'], `${label}: leftover result files`);
  const { durationMs: _a, resumedAtRow: _b, ...a } = actual.result;
  const { durationMs: _c, resumedAtRow: _d, ...e } = expected.result;
  assert.deepEqual(a, e, `${label}: JSON result differs`);
}

/** A deterministic PRNG for choosing crash points (reproducible failures). */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1_664_525) + 1_013_904_223) >>> 0;
    return s / 4_294_967_296;
  };
}

describe('csv.import', () => {
  let generated: { path: string; blobs: TempBlobs; counts: Awaited<ReturnType<typeof generateCsv>> };

  before(async () => {
    const blobs = await TempBlobs.create();
    const path = join(blobs.dir, 'generated.csv');
    generated = { path, blobs, counts: await generateCsv(path, 6_000, { crlf: true }) };
  });
  after(async () => generated.blobs.destroy());

  it('validates every row of a generated file and reports exact counts, files and line numbers', async () => {
    const upload = await generated.blobs.addUpload(createReadStream(generated.path));
    const run = makeRun<CsvImportCheckpoint>({ blobs: generated.blobs });
    const result = await runCsvImport({ uploadId: upload.id }, run.ctx);
    const { counts } = generated;
    assert.equal(result.rows, counts.rows);
    assert.equal(result.accepted, counts.accepted);
    assert.equal(result.rejected, counts.rejected);
    assert.deepEqual(result.reasons, Object.fromEntries(Object.entries(counts.reasons).sort(([a], [b]) => a.localeCompare(b))));
    assert.deepEqual(result.upload, { size: upload.size, sha256: upload.sha256 });
    assert.equal(typeof result.durationMs, 'number');
    assert.equal(result.resumedAtRow, 0);

    const rejected = parse(await generated.blobs.readResult('rejected.csv')) as string[][];
    assert.deepEqual(rejected[0], ['line', 'row', 'reason']);
    assert.equal(rejected.length, counts.rejected + 1);
    // Row c20 is the first invalid one; rows 3, 11 and 19 before it span two lines each.
    assert.deepEqual(rejected[1], ['24', 'c20,user20@example.com,Zoë Ålander,"12,50",2024-09-21', REASONS.amountInvalid]);
    const summary = JSON.parse((await generated.blobs.readResult('summary.json')).toString());
    const { durationMs: _d, resumedAtRow: _r, ...fromResult } = result;
    assert.deepEqual(summary, fromResult);
    assert.deepEqual(generated.blobs.resultNames(), ['rejected.csv', 'summary.json']);
    assert.ok(run.saves >= 6, `checkpointed every 1,000 rows (${run.saves} saves)`);

    // Progress: stages in order, rows done of an estimated total, percent monotonic up to 100.
    assert.deepEqual(run.stages, ['validating', 'writing results']);
    const percents = run.progress.flatMap((p) => (p.percent === undefined ? [] : [p.percent]));
    assert.deepEqual(
      percents,
      [...percents].sort((a, b) => a - b),
    );
    assert.equal(percents.at(-1), 100);
    const mid = run.progress.find((p) => p.itemsDone === 3_000);
    assert.ok(mid?.itemsTotal !== undefined && Math.abs(mid.itemsTotal - 6_000) < 300, `estimated total near 6,000 halfway (${mid?.itemsTotal})`);
    assert.equal(run.progress.at(-1)?.itemsTotal, 6_000);
  });

  it('parses quoted commas, quotes and line breaks the same at every chunk size, with the right reasons and lines', async () => {
    const reference = await importOnce(TRICKY);
    assert.deepEqual(parse(reference.rejected, { relax_column_count: true }), TRICKY_REJECTED);
    assert.equal(reference.result.rows, 9);
    assert.equal(reference.result.accepted, 5);
    assert.equal(reference.result.rejected, 4);
    assert.deepEqual(reference.result.reasons, {
      [REASONS.amountInvalid]: 1,
      [REASONS.amountPrecision]: 1,
      [REASONS.dateInvalid]: 2,
      [REASONS.emailInvalid]: 1,
      [REASONS.idMissing]: 1,
      [REASONS.columns]: 1,
    });
    for (const chunk of [1, 2, 3, 5, 7, 13]) {
      assertSameOutcome(await importOnce(TRICKY, {}, chunk), reference, `chunks of ${chunk} bytes`);
    }
    // Same rows with LF line ends: same verdicts (line numbers too).
    const lf = await importOnce(TRICKY.replaceAll('\r\n', '\n'));
    assert.deepEqual(
      (parse(lf.rejected, { relax_column_count: true }) as string[][]).map((r) => [r[0], r[2]]),
      TRICKY_REJECTED.map((r) => [r[0], r[2]]),
    );
  });

  it('a crash at any single point, then a resumed run, gives byte-identical files', async () => {
    // A part file at every checkpoint, or rejected lines carried in the checkpoints until the end.
    for (const partFlushChars of [1, 10_000]) {
      const options = { checkpointEveryRows: 1, partFlushChars, progressEveryRows: 1 };
      await crashEverywhere(options);
    }
  });

  async function crashEverywhere(options: Partial<CsvImportOptions>): Promise<void> {
    const reference = await importOnce(TRICKY, options, 5);
    const events = reference.run.saves * 3 + reference.run.progress.length + 10; // an upper bound of the side effects of one run
    let crashedAfterACheckpoint = 0;
    for (let k = 1; k <= events; k++) {
      const blobs = await TempBlobs.create();
      try {
        blobs.uploadChunkBytes = 5;
        const upload = await blobs.addUpload(TRICKY);
        const got = await importWithCrashes(blobs, upload.id, options, (i) => (i === 0 ? k : null));
        assertSameOutcome(got.outcome, reference, `crash at event ${k}`);
        if (got.crashes === 1 && got.resumedAtRow > 0) crashedAfterACheckpoint++;
      } finally {
        await blobs.destroy();
      }
    }
    assert.ok(crashedAfterACheckpoint > 5, `several crashes resumed mid-file (${crashedAfterACheckpoint})`);
  }

  it('repeated crashes at random points over 6,000 rows still give byte-identical files', async () => {
    const options = { checkpointEveryRows: 200, partFlushChars: 1_500 };
    const reference = await (async () => {
      const upload = await generated.blobs.addUpload(createReadStream(generated.path));
      const run = makeRun<CsvImportCheckpoint>({ blobs: generated.blobs });
      const result = await runCsvImport({ uploadId: upload.id }, run.ctx, options);
      return { ...(await outcome(generated.blobs, result)), events: run.saves * 3 + run.progress.length };
    })();
    for (const seed of [1, 2, 3, 4]) {
      const random = prng(seed);
      const blobs = await TempBlobs.create();
      try {
        blobs.uploadChunkBytes = 4_093; // a prime: records straddle chunk boundaries everywhere
        const upload = await blobs.addUpload(createReadStream(generated.path));
        // Crash the first three runs at a random point (a later one may finish before its point).
        const got = await importWithCrashes(blobs, upload.id, options, (i) => (i < 3 ? 1 + Math.floor(random() * reference.events) : null));
        assertSameOutcome(got.outcome, reference, `seed ${seed}`);
        assert.ok(got.crashes >= 1, `seed ${seed}: at least one crash`);
        const left = (await blobs.filesOnDisk()).filter((f) => !['rejected.csv', 'summary.json'].includes(f));
        assert.deepEqual(left, [], `seed ${seed}: part files removed`);
      } finally {
        await blobs.destroy();
      }
    }
  });

  it('a crash between writing a part file and saving the checkpoint leaves no trace', async () => {
    const options = { checkpointEveryRows: 2, partFlushChars: 1 };
    const reference = await importOnce(TRICKY, options);
    for (const kind of [
      'written:rejected.part-000001.csv',
      'written:rejected.part-000002.csv',
      'written:rejected.csv',
      'written:summary.json',
      'remove:rejected.part-000001.csv',
    ]) {
      const blobs = await TempBlobs.create();
      try {
        const upload = await blobs.addUpload(TRICKY);
        const first = makeRun<CsvImportCheckpoint>({ blobs, onEvent: (_n, k, r) => k === kind && r.crash() });
        await assert.rejects(runCsvImport({ uploadId: upload.id }, first.ctx, options), CrashedError);
        assert.ok(first.crashed, `crashed at ${kind}`);
        const second = makeRun<CsvImportCheckpoint>({ blobs, checkpoint: first.lastSaved });
        assertSameOutcome(await outcome(blobs, await runCsvImport({ uploadId: upload.id }, second.ctx, options)), reference, kind);
      } finally {
        await blobs.destroy();
      }
    }
  });

  it('an empty file has no header: FatalError', async () => {
    await assert.rejects(importOnce(''), (err: unknown) => err instanceof FatalError && err.code === 'CSV_NO_HEADER');
    await assert.rejects(importOnce('\n\r\n\n'), (err: unknown) => err instanceof FatalError && err.code === 'CSV_NO_HEADER');
  });

  it('a header-only file imports zero rows', async () => {
    for (const text of ['id,email,name,amount,date', 'id,email,name,amount,date\n', '\uFEFF ID , Email,name,AMOUNT,date\r\n\r\n']) {
      const got = await importOnce(text);
      assert.equal(got.rejected.toString(), 'line,row,reason\n');
      assert.deepEqual(
        { rows: got.result.rows, accepted: got.result.accepted, rejected: got.result.rejected, reasons: got.result.reasons },
        { rows: 0, accepted: 0, rejected: 0, reasons: {} },
      );
    }
  });

  it('a wrong header: FatalError naming the expected columns', async () => {
    await assert.rejects(importOnce('id,mail,name,amount,date\n1,a@b.co,x,1,2024-01-01\n'), (err: unknown) => {
      return err instanceof FatalError && err.code === 'CSV_BAD_HEADER' && /id,email,name,amount,date/.test(err.message);
    });
  });

  it('a missing or unknown upload: FatalError', async () => {
    const blobs = await TempBlobs.create();
    try {
      const run = makeRun<CsvImportCheckpoint>({ blobs });
      await assert.rejects(runCsvImport({ uploadId: 'no-such-upload' }, run.ctx), FatalError);
    } finally {
      await blobs.destroy();
    }
  });

  it('a quote left open at the end rejects that last row; one left open early fails without reading the rest into memory', async () => {
    const got = await importOnce('id,email,name,amount,date\na1,a@b.co,Ann,1,2024-01-01\na2,b@b.co,"Bob\n,1,2024-01-01\n');
    assert.deepEqual(parse(got.rejected, { relax_column_count: true }), [
      ['line', 'row', 'reason'],
      ['3', 'a2,b@b.co,"Bob\n,1,2024-01-01', REASONS.unclosedQuote],
    ]);
    assert.equal(got.result.rows, 2);
    assert.equal(got.result.accepted, 1);

    const big = `id,email,name,amount,date\na1,a@b.co,"Ann,1,2024-01-01\n${'a2,b@b.co,Bob,1,2024-01-01\n'.repeat(20_000)}`;
    await assert.rejects(importOnce(big, { maxRecordBytes: 4_096 }), (err: unknown) => err instanceof FatalError && err.code === 'CSV_RECORD_TOO_LARGE');
    // The same verdict for a record just over the limit, whatever the chunking.
    const justOver = `id,email,name,amount,date\na1,a@b.co,"${'x'.repeat(5_000)}",1,2024-01-01\n`;
    for (const chunk of [7, 64 * 1024]) {
      await assert.rejects(
        importOnce(justOver, { maxRecordBytes: 4_096 }, chunk),
        (err: unknown) => err instanceof FatalError && err.code === 'CSV_RECORD_TOO_LARGE',
      );
    }
  });

  it('refuses a checkpoint made from another file', async () => {
    const blobs = await TempBlobs.create();
    try {
      const a = await blobs.addUpload(TRICKY);
      const b = await blobs.addUpload(`${TRICKY}\n`);
      const first = makeRun<CsvImportCheckpoint>({ blobs });
      await runCsvImport({ uploadId: a.id }, first.ctx, { checkpointEveryRows: 1 });
      const second = makeRun<CsvImportCheckpoint>({ blobs, checkpoint: first.lastSaved });
      await assert.rejects(runCsvImport({ uploadId: b.id }, second.ctx), (err: unknown) => err instanceof FatalError && err.code === 'CSV_UPLOAD_CHANGED');
    } finally {
      await blobs.destroy();
    }
  });

  it('stops promptly when cancelled, with the abort reason, writing no result', async () => {
    const blobs = await TempBlobs.create();
    try {
      const path = join(blobs.dir, 'cancel.csv');
      await generateCsv(path, 60_000);
      const upload = await blobs.addUpload(createReadStream(path));
      let abortedAt = 0;
      const reason = new Error('cancelled by test');
      const run = makeRun<CsvImportCheckpoint>({
        blobs,
        onEvent: (_n, kind, r) => {
          if (kind === 'save' && abortedAt === 0) {
            abortedAt = performance.now();
            r.controller.abort(reason);
          }
        },
      });
      await assert.rejects(runCsvImport({ uploadId: upload.id }, run.ctx), (err: unknown) => err === reason);
      const stopMs = performance.now() - abortedAt;
      assert.ok(stopMs < 250, `stopped ${stopMs.toFixed(0)} ms after the abort`);
      const last = run.progress.at(-1)?.itemsDone ?? 0;
      assert.ok(last < 5_000, `stopped near the abort (last progress at row ${last})`);
      assert.deepEqual(blobs.resultNames(), []);
    } finally {
      await blobs.destroy();
    }
  });

  it('is defined as a task with a JSON Schema input and needs ctx.results and ctx.uploads', async () => {
    assert.equal(csvImport.type, 'csv.import');
    assert.equal((await validateInput(csvImport.input!, { uploadId: 'u1' })).ok, true);
    assert.equal((await validateInput(csvImport.input!, {})).ok, false);
    assert.equal((await validateInput(csvImport.input!, { uploadId: 'u1', extra: 1 })).ok, false);
    const blobs = await TempBlobs.create();
    try {
      const { results: _r, uploads: _u, ...bare } = makeRun<CsvImportCheckpoint>({ blobs }).ctx;
      await assert.rejects(
        async () => {
          const run = csvImport.run as NonNullable<typeof csvImport.run>;
          return run({ uploadId: 'u1' }, bare as unknown as Parameters<typeof run>[1]);
        },
        (err: unknown) => err instanceof FatalError && err.code === 'BLOBS_UNAVAILABLE',
      );
    } finally {
      await blobs.destroy();
    }
  });
});

describe('report.generate', () => {
  async function generate(rows: number, format: 'csv' | 'pdf', seed = 1) {
    const blobs = await TempBlobs.create();
    try {
      const run = makeRun({ blobs });
      const result = await runReport({ rows, format, seed }, run.ctx);
      return { result, run, file: await blobs.readResult(result.file), names: blobs.resultNames() };
    } finally {
      await blobs.destroy();
    }
  }

  function pdfPages(pdf: Buffer): { pageObjects: number; count: number } {
    const text = pdf.toString('latin1');
    const pageObjects = (text.match(/\/Type\s*\/Page(?![a-zA-Z])/g) ?? []).length;
    const count = Number(/\/Type\s*\/Pages[\s\S]*?\/Count\s+(\d+)/.exec(text)?.[1]);
    return { pageObjects, count };
  }

  it('renders a real, multi-page PDF with the expected page count', async () => {
    // 56 rows fit under the title block of page 1, 66 on every later page.
    assert.equal(PDF_ROWS_FIRST_PAGE, 56);
    assert.equal(PDF_ROWS_PER_PAGE, 66);
    for (const [rows, pages] of [
      [1, 1],
      [56, 1],
      [57, 2],
      [122, 2],
      [123, 3],
      [1_000, 16],
    ] as const) {
      const { result, file, names } = await generate(rows, 'pdf');
      assert.ok(file.subarray(0, 5).equals(Buffer.from('%PDF-')), 'starts with %PDF-');
      assert.match(file.subarray(-8).toString('latin1'), /%%EOF\s*$/);
      assert.deepEqual(pdfPages(file), { pageObjects: pages, count: pages }, `${rows} rows`);
      assert.equal(result.pages, pages);
      assert.equal(result.size, file.length);
      assert.deepEqual(names, ['report.pdf']);
    }
  });

  it('renders a CSV of rows + 1 lines, the same for the same seed', async () => {
    const a = await generate(2_500, 'csv', 7);
    const lines = a.file.toString().split('\n');
    assert.equal(lines.pop(), '', 'ends with a newline');
    assert.equal(lines.length, 2_501);
    assert.equal(lines[0], 'n,date,region,product,quantity,unit_price,total');
    assert.match(lines[1]!, /^1,\d{4}-\d{2}-\d{2},[A-Za-z]+,[^,]+,\d+,\d+\.\d{2},\d+\.\d{2}$/);
    assert.equal(a.result.totals.rows, 2_500);
    const sum = lines.slice(1).reduce((s, l) => s + Math.round(Number(l.split(',').at(-1)) * 100), 0);
    assert.equal(sum, a.result.totals.revenueCents, 'totals match the rows');
    const b = await generate(2_500, 'csv', 7);
    assert.equal(b.result.sha256, a.result.sha256);
    const c = await generate(2_500, 'csv', 8);
    assert.notEqual(c.result.sha256, a.result.sha256);
  });

  it('reports weighted progress: query, render, upload in order, monotonic, up to 100', async () => {
    for (const format of ['csv', 'pdf'] as const) {
      const { run } = await generate(3_000, format);
      assert.deepEqual(run.stages, ['query', 'render', 'upload']);
      const withPercent = run.progress.filter((p) => p.percent !== undefined);
      const percents = withPercent.map((p) => p.percent!);
      for (let i = 1; i < percents.length; i++) assert.ok(percents[i]! >= percents[i - 1]!, `${format}: percent went back at ${i}`);
      assert.equal(percents.at(-1), 100);
      const stageOrder = withPercent.map((p) => p.stage).filter((s, i, all) => s !== all[i - 1]);
      assert.deepEqual(stageOrder, ['query', 'render', 'upload']);
      // Each stage stays inside its share: query 0-20, render 20-80, upload 80-100.
      const range = (stage: string) => withPercent.filter((p) => p.stage === stage).map((p) => p.percent!);
      assert.ok(
        Math.max(...range('query')) <= 20 && Math.min(...range('render')) >= 20 && Math.max(...range('render')) <= 80 && Math.min(...range('upload')) >= 80,
      );
    }
  });

  it('stops promptly when cancelled in any stage, writing nothing and leaving no temp files', async () => {
    // A temp directory of this test's own (os.tmpdir() reads TMPDIR at each call): other test
    // files running meanwhile make and remove report temp directories in the shared one.
    const ownTmp = await mkdtemp(join(tmpdir(), 'lh-report-cancel-'));
    const savedTmp = process.env.TMPDIR;
    process.env.TMPDIR = ownTmp;
    try {
      // `upload` aborts at the stage's first progress call, before its streams exist; `upload:bytes`
      // once bytes are on their way (the abort then reaches a piped stream).
      for (const stage of ['query', 'render', 'upload', 'upload:bytes']) {
        const blobs = await TempBlobs.create();
        try {
          const reason = new Error(`cancel in ${stage}`);
          let abortedAt = 0;
          const run = makeRun({
            blobs,
            onEvent: (_n, kind, r) => {
              const last = r.progress.at(-1);
              const at = stage === 'upload:bytes' ? last?.stage === 'upload' && /bytes uploaded$/.test(last.message ?? '') : last?.stage === stage;
              if (kind === 'progress' && abortedAt === 0 && at) {
                abortedAt = performance.now();
                r.controller.abort(reason);
              }
            },
          });
          await assert.rejects(runReport({ rows: 20_000, format: 'pdf', seed: 1 }, run.ctx), (err: unknown) => err === reason);
          const stopMs = performance.now() - abortedAt;
          assert.ok(abortedAt > 0 && stopMs < 500, `${stage}: stopped ${stopMs.toFixed(0)} ms after the abort`);
          assert.deepEqual(blobs.resultNames(), []);
        } finally {
          await blobs.destroy();
        }
      }
      assert.deepEqual(await readdir(ownTmp), [], 'temp directories removed');
    } finally {
      if (savedTmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = savedTmp;
      await rm(ownTmp, { recursive: true, force: true });
    }
  });

  it('is defined as a task whose schema bounds rows per format', async () => {
    assert.equal(reportGenerate.type, 'report.generate');
    const check = async (input: unknown) => validateInput(reportGenerate.input!, input);
    assert.deepEqual(await check({ rows: 10 }), { ok: true, value: { rows: 10, format: 'csv', seed: 1 } });
    assert.equal((await check({ rows: 1_000_000, format: 'csv' })).ok, true);
    assert.equal((await check({ rows: 100_000, format: 'pdf' })).ok, true);
    assert.equal((await check({ rows: 100_001, format: 'pdf' })).ok, false);
    assert.equal((await check({ rows: 1_000_001 })).ok, false);
    assert.equal((await check({ rows: 0 })).ok, false);
    assert.equal((await check({ rows: 10, format: 'xlsx' })).ok, false);
  });
});
