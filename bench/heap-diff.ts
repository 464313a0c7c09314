/**
 * Compares two V8 heap snapshots of one process (bench/soak.ts --heap-snapshots): objects
 * counted by kind and constructor name, the groups that grew most first. Node ids are stable
 * within a process, so `--retainers NAME` follows a few objects of that group or name (prefix) present in the
 * second snapshot but not in the first back to a GC root (what keeps them alive).
 *
 *   node --max-old-space-size=8192 --import tsx bench/heap-diff.ts A.heapsnapshot B.heapsnapshot [--top 40] [--retainers Name] [--depth 12]
 */
import { readFileSync } from 'node:fs';
import { numFlag, strFlag, table } from './lib/util.js';

interface RawSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]]; edge_fields: string[]; edge_types: [string[], ...unknown[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

class Heap {
  readonly nodeFields: number;
  readonly edgeFields: number;
  readonly count: number;
  private readonly typeNames: string[];
  private readonly edgeTypeNames: string[];
  private readonly firstEdge: Uint32Array;
  private retainersOf: Map<number, number[]> | null = null;

  constructor(readonly raw: RawSnapshot) {
    const meta = raw.snapshot.meta;
    this.nodeFields = meta.node_fields.length;
    this.edgeFields = meta.edge_fields.length;
    this.typeNames = meta.node_types[0];
    this.edgeTypeNames = meta.edge_types[0];
    this.count = raw.nodes.length / this.nodeFields;
    this.firstEdge = new Uint32Array(this.count + 1);
    const edgeCountAt = meta.node_fields.indexOf('edge_count');
    for (let i = 0, e = 0; i < this.count; i++) {
      this.firstEdge[i] = e;
      e += (raw.nodes[i * this.nodeFields + edgeCountAt] as number) * this.edgeFields;
      this.firstEdge[i + 1] = e;
    }
  }

  type(i: number): string {
    return this.typeNames[this.raw.nodes[i * this.nodeFields] as number] ?? '?';
  }
  name(i: number): string {
    return this.raw.strings[this.raw.nodes[i * this.nodeFields + 1] as number] ?? '?';
  }
  id(i: number): number {
    return this.raw.nodes[i * this.nodeFields + 2] as number;
  }
  selfSize(i: number): number {
    return this.raw.nodes[i * this.nodeFields + 3] as number;
  }

  /** The group an object is counted in: its kind, and for objects and closures their name. */
  group(i: number): string {
    const t = this.type(i);
    if (t === 'object' || t === 'closure' || t === 'native' || t === 'hidden' || t === 'array' || t === 'code') return `${t} ${this.name(i).slice(0, 60)}`;
    return t;
  }

  groups(): Map<string, { count: number; size: number }> {
    const out = new Map<string, { count: number; size: number }>();
    for (let i = 0; i < this.count; i++) {
      const g = this.group(i);
      const e = out.get(g) ?? { count: 0, size: 0 };
      e.count++;
      e.size += this.selfSize(i);
      out.set(g, e);
    }
    return out;
  }

  /** Retainers of node i: [edge description, retaining node]. */
  retainers(i: number): [string, number][] {
    if (!this.retainersOf) {
      this.retainersOf = new Map();
      const edges = this.raw.edges;
      for (let n = 0; n < this.count; n++) {
        for (let e = this.firstEdge[n] as number; e < (this.firstEdge[n + 1] as number); e += this.edgeFields) {
          const to = (edges[e + 2] as number) / this.nodeFields;
          let list = this.retainersOf.get(to);
          if (!list) {
            list = [];
            this.retainersOf.set(to, list);
          }
          list.push(n, e);
        }
      }
    }
    const list = this.retainersOf.get(i) ?? [];
    const out: [string, number][] = [];
    for (let k = 0; k < list.length; k += 2) {
      const n = list[k] as number;
      const e = list[k + 1] as number;
      const et = this.edgeTypeNames[this.raw.edges[e] as number] ?? '?';
      const nameOrIndex = this.raw.edges[e + 1] as number;
      const label = et === 'element' || et === 'hidden' ? `[${nameOrIndex}]` : (this.raw.strings[nameOrIndex] ?? '?');
      if (et === 'weak') continue;
      out.push([`${et} ${label}`, n]);
    }
    return out;
  }
}

const [fileA, fileB] = process.argv.slice(2).filter((a, i, all) => !a.startsWith('--') && !all[i - 1]?.startsWith('--'));
if (!fileA || !fileB) throw new Error('usage: heap-diff.ts A.heapsnapshot B.heapsnapshot [--top 40] [--retainers Name] [--depth 12]');
const top = numFlag('top', 40);
const load = (f: string) => new Heap(JSON.parse(readFileSync(f, 'utf8')) as RawSnapshot);
const a = load(fileA);
const ga = a.groups();
const idsA = new Set<number>();
for (let i = 0; i < a.count; i++) idsA.add(a.id(i));
const b = load(fileB);
const gb = b.groups();

const rows = [...new Set([...ga.keys(), ...gb.keys()])]
  .map((g) => {
    const x = ga.get(g) ?? { count: 0, size: 0 };
    const y = gb.get(g) ?? { count: 0, size: 0 };
    return { g, countA: x.count, countB: y.count, dCount: y.count - x.count, dSize: y.size - x.size };
  })
  .sort((p, r) => r.dSize - p.dSize);
const total = (m: Map<string, { size: number }>) => [...m.values()].reduce((s, e) => s + e.size, 0);
console.log(`${fileA}: ${a.count} objects, ${(total(ga) / 1048576).toFixed(1)} MiB; ${fileB}: ${b.count} objects, ${(total(gb) / 1048576).toFixed(1)} MiB\n`);
console.log(
  table(
    ['group (kind, name)', 'count A', 'count B', 'Δ count', 'Δ self KiB'],
    rows.slice(0, top).map((r) => [r.g, String(r.countA), String(r.countB), String(r.dCount), (r.dSize / 1024).toFixed(0)]),
  ),
);

const wanted = strFlag('retainers');
if (wanted) {
  const depth = numFlag('depth', 12);
  const fresh: number[] = [];
  for (let i = 0; i < b.count && fresh.length < 1e6; i++) if ((b.group(i) === wanted || b.name(i).startsWith(wanted)) && !idsA.has(b.id(i))) fresh.push(i);
  console.log(
    `\n${fresh.length} objects named or grouped as ${wanted} (or whose name starts so) in B only; retainer paths of 3 of them (first retainer at each step, weak edges skipped):`,
  );
  for (const start of [fresh[0], fresh[Math.floor(fresh.length / 2)], fresh[fresh.length - 1]]) {
    if (start === undefined) continue;
    console.log(`\n- ${b.group(start)} @${b.id(start)}`);
    const seen = new Set<number>([start]);
    let at = start;
    for (let d = 0; d < depth; d++) {
      const next = b.retainers(at).find(([, n]) => !seen.has(n));
      if (!next) break;
      const [label, n] = next;
      seen.add(n);
      console.log(`  ${'  '.repeat(d)}<- ${label} of ${b.group(n)} @${b.id(n)}${idsA.has(b.id(n)) ? '' : ' (new)'}`);
      at = n;
    }
  }
}
