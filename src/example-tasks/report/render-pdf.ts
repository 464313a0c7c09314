/**
 * The PDF form of the sales report, drawn with pdfkit: a title and the totals on the first
 * page, then a table (header row repeated on every page) of every row, and "Page X of Y" in
 * each footer. Fixed row height, so the page count is known before drawing (`pdfPageCount`).
 * pdfkit writes each page out as soon as the next one starts; the output stream's backpressure
 * is honoured, so memory stays flat whatever the number of pages.
 */
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import PDFDocument from 'pdfkit';
import { abortReasonOr } from '../../core/abort.js';
import { formatCents, type SalesRow, type SalesTotals } from './sales-data.js';

/** A4 portrait, in PDF points. */
export const PDF_LAYOUT = Object.freeze({
  width: 595.28,
  height: 841.89,
  left: 40,
  right: 555.28,
  /** Where the table starts on page 1 (below the title block) and on the other pages. */
  firstTableTop: 150,
  tableTop: 40,
  /** Rows stop above this line; the footer sits below it. */
  tableBottom: 790,
  footerY: 805,
  headerHeight: 16,
  rowHeight: 11,
});

const L = PDF_LAYOUT;

export const PDF_ROWS_FIRST_PAGE = Math.floor((L.tableBottom - L.firstTableTop - L.headerHeight) / L.rowHeight);
export const PDF_ROWS_PER_PAGE = Math.floor((L.tableBottom - L.tableTop - L.headerHeight) / L.rowHeight);

export function pdfPageCount(rows: number): number {
  return rows <= PDF_ROWS_FIRST_PAGE ? 1 : 1 + Math.ceil((rows - PDF_ROWS_FIRST_PAGE) / PDF_ROWS_PER_PAGE);
}

interface Column {
  title: string;
  x: number;
  width: number;
  align: 'left' | 'right';
  value: (r: SalesRow) => string;
}

const COLUMNS: readonly Column[] = [
  { title: '#', x: 40, width: 50, align: 'right', value: (r) => String(r.n) },
  { title: 'Date', x: 100, width: 60, align: 'left', value: (r) => r.date },
  { title: 'Region', x: 165, width: 60, align: 'left', value: (r) => r.region },
  { title: 'Product', x: 230, width: 120, align: 'left', value: (r) => r.product },
  { title: 'Qty', x: 355, width: 50, align: 'right', value: (r) => String(r.quantity) },
  { title: 'Unit price', x: 410, width: 65, align: 'right', value: (r) => formatCents(r.unitPriceCents) },
  { title: 'Total', x: 480, width: 75.28, align: 'right', value: (r) => formatCents(r.totalCents) },
];

function money(cents: number): string {
  const [whole = '0', frac = '00'] = formatCents(cents).split('.');
  return `${whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',')}.${frac}`;
}

export async function renderPdf(
  rows: AsyncIterable<SalesRow>,
  path: string,
  options: { totals: SalesTotals; seed: number; signal: AbortSignal; every?: number; onRows?: (done: number) => void },
): Promise<{ pages: number }> {
  const { totals, seed, signal, every = 250, onRows } = options;
  const pages = pdfPageCount(totals.rows);
  const doc = new PDFDocument({
    size: 'A4',
    margins: { top: L.tableTop, bottom: 10, left: L.left, right: L.width - L.right },
    info: { Title: 'Sales report', Author: 'Longhaul report.generate', Subject: `${totals.rows} rows, seed ${seed}` },
  });
  const out = createWriteStream(path);
  // pipeline: write errors and the abort close both streams; awaited once the document ends.
  const written = pipeline(doc, out, { signal });
  written.catch(() => undefined); // an early failure is seen by the drawing loop (or the final await)
  try {
    let page = 1;
    const footer = () => {
      doc.font('Helvetica').fontSize(8).fillColor('#555555');
      doc.text('Sales report', L.left, L.footerY, { lineBreak: false });
      const label = `Page ${page} of ${pages}`;
      doc.text(label, L.right - doc.widthOfString(label), L.footerY, { lineBreak: false });
    };
    const tableHeader = (y: number) => {
      doc.rect(L.left, y, L.right - L.left, L.headerHeight - 2).fill('#e8ecf1');
      doc.font('Helvetica-Bold').fontSize(8).fillColor('#000000');
      for (const c of COLUMNS) cell(c, c.title, y + 4);
      doc.font('Helvetica');
      return y + L.headerHeight;
    };
    const cell = (c: Column, text: string, y: number) => {
      const x = c.align === 'right' ? c.x + c.width - doc.widthOfString(text) : c.x;
      doc.text(text, x, y, { lineBreak: false });
    };

    // Page 1: title block and totals.
    doc.font('Helvetica-Bold').fontSize(18).fillColor('#000000').text('Sales report', L.left, 40, { lineBreak: false });
    doc.font('Helvetica').fontSize(9).fillColor('#555555');
    doc.text(`${totals.rows.toLocaleString('en-US')} rows · synthetic data, seed ${seed} · ${pages} pages`, L.left, 66, { lineBreak: false });
    doc.fillColor('#000000').fontSize(10);
    doc.text(`Revenue ${money(totals.revenueCents)}   Units ${totals.quantity.toLocaleString('en-US')}`, L.left, 88, { lineBreak: false });
    const regions = Object.entries(totals.revenueByRegionCents)
      .map(([r, c]) => `${r} ${money(c)}`)
      .join('   ');
    doc.fontSize(8).text(regions, L.left, 106, { lineBreak: false });

    let y = tableHeader(L.firstTableTop);
    doc.fontSize(8);
    let done = 0;
    for await (const r of rows) {
      if (y + L.rowHeight > L.tableBottom) {
        footer();
        doc.addPage();
        page++;
        y = tableHeader(L.tableTop);
        doc.fontSize(8).fillColor('#000000');
      }
      for (const c of COLUMNS) cell(c, c.value(r), y);
      y += L.rowHeight;
      done++;
      if (done % every === 0) {
        signal.throwIfAborted();
        if (out.destroyed) await written; // the disk write failed: surface its error
        if (out.writableNeedDrain) await once(out, 'drain', { signal });
        onRows?.(done);
      }
    }
    footer();
    if (page !== pages) throw new Error(`PDF layout drew ${page} pages, expected ${pages}`);
    doc.end();
    await written;
    onRows?.(done);
    return { pages };
  } catch (err) {
    // The pipeline and `once` reject with a bare AbortError: report the cancel's reason.
    throw abortReasonOr(signal, err);
  } finally {
    // Ends the pipeline when drawing failed; a no-op after success.
    doc.destroy();
  }
}
