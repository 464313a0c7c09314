/**
 * Diagnostic (not a throughput figure): the worker's store work without the worker runtime.
 * It drives SqliteStore's internal steps the way Worker.pump → completeAndClaim does — complete
 * the previous batch, claim `c` more, in one IMMEDIATE transaction — and times each part of
 * the transaction: completion UPDATEs, claim (candidate SELECT + claim UPDATEs), COMMIT.
 * Jobs/s here is the store's ceiling for that concurrency on this machine.
 *
 *   node --import tsx bench/store-split.ts [--jobs 20000] [--concurrency 10] [--memory] [--no-autocheckpoint]
 *        [--cache-size KIB] [--lib DIR]
 *
 * Uses SqliteStore internals (claimSync, transitionSync, promoteDueSync, db): update it when they change.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import type { JobRecord } from '../src/core/job.js';
import type { ClaimParams, TransitionParams } from '../src/store/store.js';
import { boolFlag, numFlag, strFlag, table } from './lib/util.js';

type Lib = typeof import('../src/index.js');
const LIB = strFlag('lib');
const lib: Lib = LIB === undefined ? await import('../src/index.js') : ((await import(pathToFileURL(resolve(LIB, 'index.js')).href)) as Lib);

interface StoreInternals {
  db: import('node:sqlite').DatabaseSync;
  claimSync(params: ClaimParams): { jobs: JobRecord[] };
  transitionSync(p: TransitionParams): boolean;
  /** The stats the claims and ends counted themselves, written before each commit (SqliteStore.write does it). */
  statsBatch: { flush(): void };
}

const JOBS = numFlag('jobs', 20_000);
const C = numFlag('concurrency', 10);
const MEMORY = boolFlag('memory');
const dir = mkdtempSync(join(tmpdir(), 'longhaul-store-split-'));
const noop = lib.defineTask({ type: 'bench.noop', run: () => null });
const lh = await lib.Longhaul.open({ database: MEMORY ? ':memory:' : join(dir, 'split.db'), tasks: [noop], logger: pino({ level: 'silent' }) });
try {
  const store = lh.store as unknown as StoreInternals;
  if (boolFlag('no-autocheckpoint')) store.db.exec('PRAGMA wal_autocheckpoint = 0');
  const cacheKiB = numFlag('cache-size', 0);
  if (cacheKiB > 0) store.db.exec(`PRAGMA cache_size = -${cacheKiB}`);
  for (let i = 0; i < JOBS; i += 1000) {
    await lh.submitMany(Array.from({ length: Math.min(1000, JOBS - i) }, (_, j) => ({ type: 'bench.noop', input: { n: i + j } })));
  }
  const begin = store.db.prepare('BEGIN IMMEDIATE');
  const commit = store.db.prepare('COMMIT');
  const types = [{ type: 'bench.noop', concurrency: undefined }];
  const t = { begin: 0, complete: 0, claim: 0, commit: 0 };
  let prev: JobRecord[] = [];
  let txns = 0;
  const start = performance.now();
  do {
    const t0 = performance.now();
    begin.run();
    const t1 = performance.now();
    const now = Date.now();
    for (const job of prev) {
      store.transitionSync({
        id: job.id,
        from: 'running',
        to: 'succeeded',
        lease: job.lease,
        workerId: 'split',
        at: now,
        reason: 'completed',
        patch: { result: null, error: null, finishedAt: now, expiresAt: now + 86_400_000, clearCheckpoint: true },
      });
    }
    const t2 = performance.now();
    prev = store.claimSync({ workerId: 'split', types, limit: C, now }).jobs; // includes promoteDue
    store.statsBatch.flush();
    const t3 = performance.now();
    commit.run();
    const t4 = performance.now();
    t.begin += t1 - t0;
    t.complete += t2 - t1;
    t.claim += t3 - t2;
    t.commit += t4 - t3;
    txns++;
  } while (prev.length > 0);
  const total = performance.now() - start;
  const us = (ms: number) => ((ms * 1000) / txns).toFixed(1);
  console.log(`store only, ${JOBS} jobs, c=${C}, ${MEMORY ? ':memory:' : 'file (WAL)'}: ${txns} transactions, ${Math.round(JOBS / (total / 1000))} jobs/s\n`);
  console.log(
    table(
      ['part of one transaction', 'µs'],
      [
        ['BEGIN IMMEDIATE', us(t.begin)],
        [`${C} completion UPDATEs`, us(t.complete)],
        [`claim ${C} (promote + SELECT + UPDATEs)`, us(t.claim)],
        ['COMMIT', us(t.commit)],
        ['total', us(total)],
      ],
    ),
  );
  console.log(
    JSON.stringify({
      jobs: JOBS,
      concurrency: C,
      memory: MEMORY,
      txns,
      perSec: JOBS / (total / 1000),
      usPerTxn: { begin: +us(t.begin), complete: +us(t.complete), claim: +us(t.claim), commit: +us(t.commit), total: +us(total) },
    }),
  );
} finally {
  await lh.close();
  rmSync(dir, { recursive: true, force: true });
}
