/** What the workflow benchmarks (bench/workflows.ts and its BullMQ peer) share: the fan-in flags and how latencies are summed up. */
import { fmtMs, percentile, strFlag } from './util.js';

/** `--fanin 200x10,20x1000` (parents × children), or `none`. */
export function fanInShapes(): { parents: number; children: number }[] {
  const raw = strFlag('fanin') ?? '200x10,20x1000';
  if (raw === 'none') return [];
  return raw.split(',').map((s) => {
    const m = /^(\d+)x(\d+)$/.exec(s.trim());
    if (!m) throw new Error(`--fanin takes PxK pairs, e.g. 200x10,20x1000 (got ${s})`);
    return { parents: Number(m[1]), children: Number(m[2]) };
  });
}

/** `--fanin-mode burst,seq`. */
export function fanInModes(): string[] {
  const modes = (strFlag('fanin-mode') ?? 'burst,seq').split(',').filter((m) => m !== '');
  for (const m of modes) if (m !== 'burst' && m !== 'seq') throw new Error('--fanin-mode takes burst and/or seq');
  return modes;
}

/** p50, p99 and max of a list of ms. */
export const pct = (list: number[]) => {
  const s = [...list].sort((a, b) => a - b);
  return { p50: percentile(s, 0.5), p99: percentile(s, 0.99), max: s[s.length - 1] ?? Number.NaN };
};

/** "p50 / p99 / max" of a list of ms. */
export const fmtP = (list: number[]) => {
  const p = pct(list);
  return `${fmtMs(p.p50)} / ${fmtMs(p.p99)} / ${fmtMs(p.max)}`;
};

export const int = (n: number) => Math.round(n).toLocaleString('en-US');
