/** The README's library example, kept here so the type checker proves it compiles. Run: node --import tsx examples/export-csv.ts */
import { z } from 'zod';
import { defineTask, FatalError, Longhaul } from '../src/index.js';

export const exportCsv = defineTask({
  type: 'export.csv',
  input: z.object({ accountId: z.string(), rows: z.number().int().positive() }),
  maxAttempts: 4,
  backoff: { baseMs: 1_000, maxMs: 60_000 },
  timeoutMs: 30 * 60_000,
  concurrency: 5, // at most 5 running at once, across all workers
  async run(input, ctx) {
    let row = (ctx.checkpoint.value as { row: number } | undefined)?.row ?? 0; // resume after a crash
    ctx.progress({ stage: 'exporting', itemsTotal: input.rows });
    for (; row < input.rows; row++) {
      ctx.signal.throwIfAborted(); // cancellation, timeout, shutdown
      if (row % 1000 === 0) await ctx.checkpoint.save({ row });
      ctx.progress({ itemsDone: row + 1 }); // call freely: writes are coalesced
    }
    if (input.rows > 1e7) throw new FatalError('too large'); // fatal: no retry
    return { rows: input.rows };
  },
});

if (import.meta.url === `file://${process.argv[1]}`) {
  const lh = await Longhaul.open({ database: './longhaul-example.db', tasks: [exportCsv] });
  await lh.startWorker({ concurrency: 10 });
  const job = await lh.submit('export.csv', { accountId: 'a1', rows: 50_000 });
  for await (const snapshot of lh.watch(job.id)) console.log(snapshot.status, snapshot.progress.percent);
  await lh.close();
}
