/**
 * Summarises a V8 .cpuprofile (node --cpu-prof, or `npm run bench -- --profile PREFIX`):
 * top functions by self time, self time per file/package, and total (inclusive) time of the
 * functions given with --focus.
 *
 *   node --import tsx bench/profile-summary.ts file.cpuprofile [--top 40] [--focus completeAndClaim,claimSync] [--callees begin,makeContext]
 *
 * --callees prints, for each named function, its own self time and the total time of each
 * direct callee (where its children's time goes).
 */
import { readFileSync } from 'node:fs';
import { table } from './lib/util.js';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith('--') && args[args.indexOf(a) - 1]?.startsWith('--') !== true);
if (!file) throw new Error('usage: profile-summary.ts file.cpuprofile [--top 40] [--focus name,name]');
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? undefined : args[i + 1];
};
const top = Number(flag('top') ?? 40);
const focus = (flag('focus') ?? '').split(',').filter(Boolean);
const callees = (flag('callees') ?? '').split(',').filter(Boolean);

const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

// Time per sample: timeDeltas[i] is the gap before sample i; attribute the next gap to it.
const selfUs = new Map<number, number>();
const { samples, timeDeltas } = profile;
for (let i = 0; i < samples.length; i++) {
  const dt = timeDeltas[i + 1] ?? timeDeltas[i] ?? 0;
  const id = samples[i] as number;
  selfUs.set(id, (selfUs.get(id) ?? 0) + Math.max(0, dt));
}
const totalUs = [...selfUs.values()].reduce((a, b) => a + b, 0);

function shortUrl(url: string): string {
  if (url === '') return '(native)';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) return url.slice(nm + 'node_modules/'.length);
  const src = url.search(/\/(src|bench|test)\//);
  if (src >= 0) return url.slice(src + 1);
  return url.replace(/^file:\/\//, '');
}

function label(cf: CallFrame): string {
  const name = cf.functionName || '(anonymous)';
  return cf.url ? `${name}  ${shortUrl(cf.url)}:${cf.lineNumber + 1}` : name;
}

function group(cf: CallFrame): string {
  const u = shortUrl(cf.url);
  if (u === '(native)') return cf.functionName.startsWith('(') ? cf.functionName : '(native: V8 builtins / C++ addons)';
  if (u.startsWith('node:')) return 'node: internals';
  const pkg = /^(@[^/]+\/[^/]+|[^/]+)\//.exec(u);
  if (!cf.url.includes('node_modules/')) return u;
  return `pkg ${pkg?.[1] ?? u}`;
}

const pct = (us: number) => `${((100 * us) / totalUs).toFixed(1)}%`;
const ms = (us: number) => (us / 1000).toFixed(1);

// Self time per function (same name + location merged).
const selfByFn = new Map<string, number>();
const selfByGroup = new Map<string, number>();
for (const [id, us] of selfUs) {
  const cf = (byId.get(id) as ProfileNode).callFrame;
  selfByFn.set(label(cf), (selfByFn.get(label(cf)) ?? 0) + us);
  selfByGroup.set(group(cf), (selfByGroup.get(group(cf)) ?? 0) + us);
}

// Total (inclusive) time: each sample counts once for every distinct function on its stack.
const totalByFn = new Map<string, number>();
for (const [id, us] of selfUs) {
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const l = label((byId.get(cur) as ProfileNode).callFrame);
    if (seen.has(l)) continue;
    seen.add(l);
    totalByFn.set(l, (totalByFn.get(l) ?? 0) + us);
  }
}

// Native leaves (node:sqlite's run/get/all, JSON.parse, ...) by their JS caller.
const nativeByCaller = new Map<string, number>();
for (const [id, us] of selfUs) {
  const node = byId.get(id) as ProfileNode;
  if (node.callFrame.url !== '' || node.callFrame.functionName.startsWith('(')) continue;
  const p = parent.get(id);
  const caller = p === undefined ? '?' : label((byId.get(p) as ProfileNode).callFrame);
  const key = `${node.callFrame.functionName || '(anonymous)'}  ← ${caller}`;
  nativeByCaller.set(key, (nativeByCaller.get(key) ?? 0) + us);
}

const sorted = (m: Map<string, number>, n: number) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);

console.log(`${file}: ${samples.length} samples, ${ms(totalUs)} ms sampled (${ms(profile.endTime - profile.startTime)} ms wall)\n`);
console.log(`Top ${top} functions by self time`);
console.log(
  table(
    ['function  file:line', 'self ms', 'self %', 'total %'],
    sorted(selfByFn, top).map(([k, v]) => [k, ms(v), pct(v), pct(totalByFn.get(k) ?? 0)]),
  ),
);
console.log('\nSelf time by file / package');
console.log(
  table(
    ['file or package', 'self ms', 'self %'],
    sorted(selfByGroup, 30).map(([k, v]) => [k, ms(v), pct(v)]),
  ),
);
console.log('\nNative functions by JS caller (self time)');
console.log(
  table(
    ['native  ← caller', 'self ms', 'self %'],
    sorted(nativeByCaller, 25).map(([k, v]) => [k, ms(v), pct(v)]),
  ),
);
if (focus.length > 0) {
  console.log('\nTotal (inclusive) time of focus functions');
  const rows = [...totalByFn.entries()].filter(([k]) => focus.some((f) => k.split('  ')[0] === f)).sort((a, b) => b[1] - a[1]);
  console.log(
    table(
      ['function  file:line', 'total ms', 'total %'],
      rows.map(([k, v]) => [k, ms(v), pct(v)]),
    ),
  );
}

if (callees.length > 0) {
  // Inclusive time of every node, then per named function: its self time and its direct callees' totals.
  const inclusive = new Map<number, number>();
  for (const [id, us] of selfUs)
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) inclusive.set(cur, (inclusive.get(cur) ?? 0) + us);
  for (const name of callees) {
    const rows = new Map<string, number>();
    let own = 0;
    for (const n of profile.nodes) {
      if (n.callFrame.functionName !== name) continue;
      own += selfUs.get(n.id) ?? 0;
      for (const c of n.children ?? []) {
        const l = label((byId.get(c) as ProfileNode).callFrame);
        rows.set(l, (rows.get(l) ?? 0) + (inclusive.get(c) ?? 0));
      }
    }
    console.log(`\nCallees of ${name} (self ${ms(own)} ms, ${pct(own)})`);
    console.log(
      table(
        ['callee  file:line', 'total ms', 'total %'],
        sorted(rows, 15).map(([k, v]) => [k, ms(v), pct(v)]),
      ),
    );
  }
}
