/**
 * Reads CSV records from a byte stream that starts at a record boundary, with the absolute byte
 * offset where each record ends (= where the next one starts: what a checkpoint stores to
 * resume exactly) and the record's original text. Parsing is csv-parse's (RFC 4180 quoting,
 * quoted fields may hold delimiters, quotes and line breaks); chunk boundaries do not matter.
 *
 * Choices that keep a resumed read identical to an uninterrupted one:
 * - record delimiters are fixed (`\r\n` or `\n`), never auto-detected from the first chunk;
 * - a BOM is only skipped at offset 0;
 * - quoting is relaxed (a stray quote inside an unquoted field is data), so the only parse
 *   error left is a quote still open at the end of the input, reported by `unclosed()`
 *   after every complete record;
 * - a record may not exceed `maxRecordBytes`; an unterminated quote early in a big file would
 *   otherwise buffer the rest of the file. Past `maxRecordBytes` plus some slack for stream
 *   buffers the read stops at once (bounded memory); a record whose end is found but is longer
 *   than `maxRecordBytes` is refused too (the same verdict whatever the chunking).
 */
import { pipeline, type Readable, Transform } from 'node:stream';
import { type Options, Parser } from 'csv-parse';
import { FatalError } from '../../core/errors.js';
import { destroyOnAbort } from '../stream-abort.js';

export interface CsvRecord {
  fields: string[];
  /** The record's text as it appears in the file, including its line break if it has one. */
  raw: string;
  /** Absolute byte offset just past this record (and its line break). */
  end: number;
}

export interface ReadOptions {
  /** Absolute byte offset where `source` starts (a record boundary). */
  start: number;
  signal: AbortSignal;
  maxRecordBytes: number;
}

export interface RecordReader {
  /** The complete records, in order. */
  records: AsyncIterable<CsvRecord>;
  /** After `records` ended: the text from the last record boundary to the end of the input when a quote was left open there. */
  unclosed(): string | undefined;
}

/** Slack over `maxRecordBytes` for bytes sitting in stream buffers between the source and the parser. */
const BUFFER_SLACK = 1024 * 1024;

export function recordTooLarge(maxRecordBytes: number): FatalError {
  return new FatalError(`a CSV record is larger than ${maxRecordBytes} bytes (an unclosed quote?)`, { code: 'CSV_RECORD_TOO_LARGE' });
}

/**
 * csv-parse's stream parser, each record stamped with where it ends. The parser pushes a
 * record synchronously right after counting its bytes, so its live `info.bytes` is exact at
 * that moment. (csv-parse's own `info`/`on_record` options give the same number but build a
 * snapshot object per record, which made the whole import twice as slow.)
 */
class OffsetParser extends Parser {
  constructor(
    options: Options,
    private readonly base: number,
    private readonly onEnd: (end: number) => void,
  ) {
    super(options);
  }

  override push(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk !== null && typeof chunk === 'object') {
      const { record, raw } = chunk as { record: string[]; raw: string };
      const end = this.base + this.info.bytes;
      this.onEnd(end);
      return super.push({ fields: record, raw, end } satisfies CsvRecord, encoding);
    }
    return super.push(chunk, encoding);
  }
}

export function readRecords(source: Readable, options: ReadOptions): RecordReader {
  const { start, signal, maxRecordBytes } = options;
  let fed = start;
  let lastEnd = start;
  let unclosed: string | undefined;
  let skipError: Error | undefined;
  const guard = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      fed += chunk.length;
      if (fed - lastEnd > maxRecordBytes + BUFFER_SLACK) callback(recordTooLarge(maxRecordBytes));
      else callback(null, chunk);
    },
  });
  const parser = new OffsetParser(
    {
      bom: start === 0,
      raw: true,
      relax_quotes: true,
      relax_column_count: true,
      record_delimiter: ['\r\n', '\n'],
      skip_records_with_error: true,
      on_skip: (err, raw) => {
        if (err?.code === 'CSV_QUOTE_NOT_CLOSED') unclosed = raw ?? '';
        else skipError = err ?? new Error('CSV record skipped');
        return undefined;
      },
    },
    start,
    (end) => {
      lastEnd = end;
    },
  );
  pipeline(source, guard, parser, () => {
    // Errors (and an abort, with its reason) reach the consumer through the parser's iterator.
  });
  destroyOnAbort(signal, parser);
  async function* records(): AsyncGenerator<CsvRecord> {
    try {
      yield* parser as AsyncIterable<CsvRecord>;
    } finally {
      // An early exit (abort, a fatal row) must release the upload stream.
      source.destroy();
      parser.destroy();
    }
    if (skipError) throw skipError;
  }
  return { records: records(), unclosed: () => unclosed };
}

/** Line breaks in `text` (`\r\n`, `\n` or a lone `\r` each count as one), to keep physical line numbers. */
export function countLineBreaks(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) n++;
    else if (c === 13 && text.charCodeAt(i + 1) !== 10) n++;
  }
  return n;
}

/**
 * The record's text without its terminating line break. csv-parse's raw text of a record ends
 * with `\n` for LF files and with `\r` for CRLF files (the `\n` of the delimiter is consumed
 * unseen); a record at the end of a file without a final line break has neither.
 */
export function withoutLineBreak(raw: string): string {
  if (raw.endsWith('\r\n')) return raw.slice(0, -2); // only the unclosed remainder can end so
  const last = raw.charCodeAt(raw.length - 1);
  return last === 10 || last === 13 ? raw.slice(0, -1) : raw;
}
