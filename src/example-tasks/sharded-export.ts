/**
 * The example workflow `longhaul dev` registers: a sharded export. `demo.export {rows, shards}`
 * plans the shards (a saved step), spawns one `demo.export-shard` child per shard, waits for
 * them without holding a worker (its progress meanwhile is its children's), then merges their
 * CSV parts into one result file, `export.csv`, and reports what it wrote.
 *
 *   longhaul submit demo.export --input '{"rows":20000,"shards":8}' --watch
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { withAbortReason } from '../core/abort.js';
import { FatalError } from '../core/errors.js';
import { defineTask } from '../task-api/define.js';

export interface ShardInput {
  shard: number;
  from: number;
  to: number;
  /** A pause per 500 rows, to make progress visible in a demo. */
  pauseMs: number;
}

export interface ShardResult {
  shard: number;
  rows: number;
  csv: string;
}

/** One shard: rows `from` (inclusive) to `to` (exclusive) of a synthetic table, as CSV lines. */
export const exportShard = defineTask<Record<string, unknown>, ShardResult>({
  type: 'demo.export-shard',
  input: {
    type: 'object',
    required: ['shard', 'from', 'to'],
    additionalProperties: false,
    properties: {
      shard: { type: 'integer', minimum: 0 },
      from: { type: 'integer', minimum: 0 },
      to: { type: 'integer', minimum: 0 },
      pauseMs: { type: 'integer', minimum: 0, maximum: 10_000, default: 0 },
    },
  },
  maxAttempts: 3,
  async run(input, ctx) {
    const { shard, from, to, pauseMs } = input as unknown as ShardInput;
    const lines: string[] = [];
    ctx.progress({ stage: 'exporting', itemsDone: 0, itemsTotal: to - from });
    for (let row = from; row < to; row++) {
      lines.push(`${row},customer-${row % 997},${((row * 7919) % 100_000) / 100}`);
      if ((row - from + 1) % 500 === 0) {
        ctx.progress({ itemsDone: row - from + 1 });
        if (pauseMs > 0) await withAbortReason(ctx.signal, sleep(pauseMs, undefined, { signal: ctx.signal }));
      }
    }
    ctx.progress({ itemsDone: to - from });
    return { shard, rows: to - from, csv: lines.join('\n') };
  },
});

/** The parent: plan, spawn the shards, merge. */
export const shardedExport = defineTask<Record<string, unknown>, { rows: number; shards: number; bytes: number }>({
  type: 'demo.export',
  input: {
    type: 'object',
    additionalProperties: false,
    properties: {
      rows: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 10_000 },
      shards: { type: 'integer', minimum: 1, maximum: 1_000, default: 8 },
      pauseMs: { type: 'integer', minimum: 0, maximum: 10_000, default: 200 },
    },
  },
  maxAttempts: 3,
  async run(input, ctx) {
    const { rows, shards, pauseMs } = input as { rows: number; shards: number; pauseMs: number };
    // Saved once: the run after the children are done gets the same plan without computing it.
    const plan = await ctx.stage('plan', () => {
      const size = Math.ceil(rows / shards);
      return Array.from({ length: shards }, (_, shard) => ({ shard, from: shard * size, to: Math.min(rows, (shard + 1) * size), pauseMs })).filter((s) => s.from < s.to);
    });
    await ctx.spawn(
      plan.map((s) => ({ type: 'demo.export-shard', input: s })),
      { failurePolicy: 'fail-fast' },
    );
    ctx.progress({ stage: 'merging', percent: 99 });
    const parts: ShardResult[] = [];
    for await (const child of ctx.children) {
      if (child.status !== 'succeeded') throw new FatalError(`shard child ${child.id} ended ${child.status}`, { code: 'SHARD_FAILED' });
      parts.push(child.result as ShardResult);
    }
    parts.sort((a, b) => a.shard - b.shard);
    const csv = `id,customer,amount\n${parts.map((p) => p.csv).join('\n')}\n`;
    const file = await ctx.results.write('export.csv', csv, { contentType: 'text/csv' });
    ctx.progress({ stage: 'done', percent: 100 });
    return { rows: parts.reduce((n, p) => n + p.rows, 0), shards: parts.length, bytes: file.size };
  },
});
