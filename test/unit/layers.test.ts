/**
 * The layer rule of docs/architecture.md, kept: every import in src/ (static, type-only,
 * re-exports, and `import('...')` in code or in a type) is checked against the matrix the page
 * writes down ("What each folder may import"), and the packages it confines to one place.
 * The matrix is read from the page itself, so the page and the rule cannot drift apart.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { scanImports } from '../support/import-scan.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const srcDir = join(root, 'src');
const doc = readFileSync(join(root, 'docs/architecture.md'), 'utf8');

/** The rows of the markdown table that follows `heading` on the architecture page: backticked names per cell. */
function tableAfter(heading: string): { key: string; cells: string[][] }[] {
  const start = doc.indexOf(heading);
  assert.ok(start >= 0, `docs/architecture.md has no "${heading}"`);
  const lines = doc.slice(start).split('\n');
  const rows: { key: string; cells: string[][] }[] = [];
  let inTable = false;
  for (const line of lines.slice(1)) {
    if (!line.startsWith('|')) {
      if (inTable) break;
      continue;
    }
    inTable = true;
    const cells = line.split('|').slice(1, -1);
    if (cells.every((c) => /^\s*:?-+:?\s*$/.test(c))) continue;
    const names = cells.map((c) => [...c.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string));
    const key = names[0]?.[0];
    if (key !== undefined) rows.push({ key, cells: names.slice(1) });
  }
  assert.ok(rows.length > 0, `no table after "${heading}"`);
  return rows;
}

const rows = tableAfter('### What each folder may import');
const isPlace = (name: string): boolean => name === '*' || name.endsWith('/') || name.endsWith('.ts');
/** Folder (`core/`) or root file (`longhaul.ts`) → what of src/ it may import besides itself; `*` for anything. */
const matrix = new Map(rows.map((r) => [r.key, new Set((r.cells[0] ?? []).filter(isPlace))]));
/** A row that names packages (core/'s) may import only those: core/ stays pure. */
const rowPackages = new Map<string, string[]>();
for (const r of rows) {
  const packages = (r.cells[0] ?? []).filter((n) => !isPlace(n));
  if (packages.length > 0) rowPackages.set(r.key, packages);
}
/** Package → the places (folders or files under src/) that alone may import it. */
const confined = new Map(tableAfter('### Packages kept to one place').map((r) => [r.key, r.cells[0] ?? []]));
/** Dynamic imports of a computed name: both load the user's own task module, never a module of src/. */
const COMPUTED_IMPORTS = new Set(['cli/runtime.ts', 'worker/isolation/thread-entry.ts']);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return /\.(ts|mts|cts|js|mjs|cjs)$/.test(e.name) ? [path] : [];
  });
}

/** The matrix row a path under src/ belongs to: the most specific folder row holding it, or its root-file row. */
function rowOf(srcPath: string): string | undefined {
  if (matrix.has(srcPath)) return srcPath;
  let best: string | undefined;
  for (const key of matrix.keys()) {
    if (key.endsWith('/') && srcPath.startsWith(key) && (best === undefined || key.length > best.length)) best = key;
  }
  return best;
}

function placeMatches(srcPath: string, place: string): boolean {
  return place.endsWith('/') ? srcPath.startsWith(place) : srcPath === place;
}

interface Found {
  file: string;
  line: number;
  specifier: string;
  kind: string;
}

function allImports(): Found[] {
  const out: Found[] = [];
  for (const path of sourceFiles(srcDir)) {
    const file = relative(srcDir, path);
    const { imports, opaque } = scanImports(readFileSync(path, 'utf8'));
    for (const o of opaque) {
      if (!COMPUTED_IMPORTS.has(file)) out.push({ file, line: o.line, specifier: '<computed>', kind: 'dynamic' });
    }
    for (const i of imports) out.push({ file, line: i.line, specifier: i.specifier, kind: i.kind });
  }
  return out;
}

/** Every import that breaks the matrix or a package's confinement, as `file:line kind specifier: why`. */
function violations(): string[] {
  const found: string[] = [];
  for (const imp of allImports()) {
    const where = `${imp.file}:${imp.line} ${imp.kind} ${imp.specifier}`;
    if (imp.specifier === '<computed>') {
      found.push(`${where}: a dynamic import of a computed name cannot be checked`);
      continue;
    }
    const from = rowOf(imp.file);
    if (from === undefined) {
      found.push(`${where}: ${imp.file} belongs to no row of the matrix`);
      continue;
    }
    if (imp.specifier.startsWith('.')) {
      const target = relative(srcDir, resolve(srcDir, dirname(imp.file), imp.specifier)).replace(/\.js$/, '.ts');
      if (target.startsWith('..')) {
        found.push(`${where}: reaches outside src/`);
        continue;
      }
      const to = rowOf(target);
      const allowed = matrix.get(from) as Set<string>;
      if (to === undefined) found.push(`${where}: ${target} belongs to no row of the matrix`);
      else if (to !== from && !allowed.has('*') && !allowed.has(to)) found.push(`${where}: ${from} may not import ${to}`);
      continue;
    }
    const pkg = imp.specifier.startsWith('node:') ? imp.specifier : imp.specifier.startsWith('@') ? imp.specifier.split('/').slice(0, 2).join('/') : (imp.specifier.split('/')[0] as string);
    const places = confined.get(pkg) ?? [...confined].find(([k]) => k.endsWith('/*') && pkg.startsWith(k.slice(0, -1)))?.[1];
    if (places && !places.some((p) => placeMatches(imp.file, p))) found.push(`${where}: ${pkg} is imported only in ${places.join(', ')}`);
    const own = rowPackages.get(from);
    if (own && !own.includes(imp.specifier) && !own.includes(pkg)) found.push(`${where}: ${from} uses only ${own.join(', ')}`);
  }
  return found;
}

describe('the layer rule (docs/architecture.md)', () => {
  it('reads a matrix whose every named folder or file exists and whose rows allow no cycle', () => {
    for (const [key, allowed] of matrix) {
      for (const name of [key, ...allowed]) {
        if (name === '*') continue;
        assert.ok(
          sourceFiles(srcDir).some((p) => placeMatches(relative(srcDir, p), name)),
          `the matrix names ${name}, which holds no file under src/`,
        );
        assert.ok(matrix.has(name), `the matrix allows ${name}, which has no row of its own`);
      }
    }
    // Anything-goes rows aside (the entry and the CLI sit on top), the allowed edges form no cycle.
    const seen = new Map<string, 'open' | 'done'>();
    const visit = (key: string, path: string[]): void => {
      if (seen.get(key) === 'done') return;
      assert.notEqual(seen.get(key), 'open', `the matrix allows a cycle: ${[...path, key].join(' → ')}`);
      seen.set(key, 'open');
      for (const next of matrix.get(key) ?? []) if (next !== '*' && next !== key) visit(next, [...path, key]);
      seen.set(key, 'done');
    };
    for (const key of matrix.keys()) visit(key, []);
  });

  it('every file of src/ belongs to a row', () => {
    const orphans = sourceFiles(srcDir)
      .map((p) => relative(srcDir, p))
      .filter((f) => rowOf(f) === undefined);
    assert.deepEqual(orphans, []);
  });

  it('every import in src/ is one the matrix allows', () => {
    assert.deepEqual(violations(), []);
  });
});

describe('import scanning (test/support/import-scan.ts)', () => {
  it('finds every form of import, type-only ones and imports in types included', () => {
    const text = [
      '#!/usr/bin/env node',
      "import a, { b as c } from './a.js';",
      "import type { T } from './t.js';",
      "import { type U, v } from './u.js';",
      "import * as ns from './ns.js';",
      "import './side.js';",
      "export { x } from './x.js';",
      "export type { Y } from './y.js';",
      "export * as z from './z.js';",
      'export { local };',
      "let d: import('./in-type.js').D;",
      "const m = await import('./dyn.js');",
      'const n = await import(name);',
      'const o = { import: 1 }.import;',
      'const meta = import.meta.url;',
    ].join('\n');
    const { imports, opaque } = scanImports(text);
    assert.deepEqual(
      imports.map((i) => `${i.line} ${i.kind} ${i.specifier}`),
      [
        '2 static ./a.js',
        '3 type ./t.js',
        '4 static ./u.js',
        '5 static ./ns.js',
        '6 side-effect ./side.js',
        '7 re-export ./x.js',
        '8 re-export ./y.js',
        '9 re-export ./z.js',
        '11 dynamic ./in-type.js',
        '12 dynamic ./dyn.js',
      ],
    );
    assert.deepEqual(opaque, [{ line: 13 }]);
  });

  it('reads no import out of comments, strings, template text or regular expressions', () => {
    const text = [
      "// import a from './comment.js';",
      "/* export * from './block.js'; */",
      `const s = "import b from './string.js'";`,
      "const t = `import c from './template.js' $" + "{`import('./nested.js')`}`;",
      "const r = /import d from '.\\/regex.js'/;",
      "const q = x / 2; const w = y / 3; // import('./division.js')",
      "import real from './real.js';",
    ].join('\n');
    assert.deepEqual(
      scanImports(text).imports.map((i) => i.specifier),
      ['./real.js'],
    );
  });
});
