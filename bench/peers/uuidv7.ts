/**
 * UUIDv7 ids per second: Longhaul's src/core/ids.ts against the `uuid` package's v7 (issue 35:
 * take `uuid` unless ours matters). `uuid` is a devDependency of bench/ only: `cd bench && npm
 * install` first.
 *
 *   node --import tsx bench/peers/uuidv7.ts [--ids 1000000] [--rounds 5]
 *
 * Longhaul makes one id per submitted job (facade/prepare.ts), upload and webhook delivery, with
 * the time of its injectable clock (`uuidv7(now)`), many in one burst for a batch or a group
 * commit; ids of one process must be strictly increasing (they are list cursors). So each round
 * makes `ids` ids in a tight loop with each of:
 *   - longhaul  `uuidv7(Date.now())`, as Longhaul calls it;
 *   - uuid      `v7()`: the package's own clock, monotonic (its state is private to it);
 *   - uuid+ms   `v7({ msecs: Date.now() })`: how an injected clock is passed to it (no state:
 *               random sequence, not monotonic within a millisecond).
 * The three alternate in each round (the order rotates); the figure is the median of the rounds,
 * with the count of ids not greater than the previous one (0 is required).
 *
 * Prints a table, then one JSON line.
 */
import { v7 } from 'uuid';
import { uuidv7 } from '../../src/core/ids.js';
import { median, numFlag, table } from '../lib/util.js';

const IDS = numFlag('ids', 1_000_000);
const ROUNDS = numFlag('rounds', 5);

const makers: Record<string, () => string> = {
  longhaul: () => uuidv7(Date.now()),
  uuid: () => v7(),
  'uuid+ms': () => v7({ msecs: Date.now() }),
};
const names = Object.keys(makers);

function round(make: () => string): { perSecond: number; notIncreasing: number } {
  let prev = '';
  let notIncreasing = 0;
  const start = process.hrtime.bigint();
  for (let i = 0; i < IDS; i++) {
    const id = make();
    if (id <= prev) notIncreasing++;
    prev = id;
  }
  const ns = Number(process.hrtime.bigint() - start);
  return { perSecond: IDS / (ns / 1e9), notIncreasing };
}

// Warm-up: every maker compiled before any clock counts.
for (const name of names) for (let i = 0; i < 100_000; i++) makers[name]?.();

const perSecond = new Map<string, number[]>(names.map((n) => [n, []]));
const notIncreasing = new Map<string, number>(names.map((n) => [n, 0]));
for (let r = 0; r < ROUNDS; r++) {
  for (let k = 0; k < names.length; k++) {
    const name = names[(r + k) % names.length] as string;
    const res = round(makers[name] as () => string);
    perSecond.get(name)?.push(res.perSecond);
    notIncreasing.set(name, (notIncreasing.get(name) ?? 0) + res.notIncreasing);
  }
}

const rows = names.map((name) => {
  const all = perSecond.get(name) ?? [];
  return [name, Math.round(median(all)).toLocaleString('en'), all.map((x) => Math.round(x / 1000)).join(' / '), String(notIncreasing.get(name))];
});
console.log(table(['maker', 'ids/s (median)', 'rounds, thousands/s', 'ids not increasing'], rows));
console.log(
  JSON.stringify({
    ids: IDS,
    rounds: ROUNDS,
    node: process.version,
    results: Object.fromEntries(names.map((n) => [n, { medianPerSecond: Math.round(median(perSecond.get(n) ?? [])), notIncreasing: notIncreasing.get(n) }])),
  }),
);
