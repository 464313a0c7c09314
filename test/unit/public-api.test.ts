/**
 * The public surface of the root entry, `longhaul` (src/index.ts), compared with a committed
 * list (test/unit/public-api.txt), so that adding, removing or renaming an export is a visible
 * decision: change the list in the same commit, and say why. Each line is a name, `type `
 * before the names that exist only as types.
 *
 * The names are read from src/index.ts's `export { ... } from` statements (the only form it
 * uses: any other export statement fails the test); the value names found are checked against
 * the module's runtime exports, so the reading cannot drift from what the entry exports.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';

const INDEX = new URL('../../src/index.ts', import.meta.url);
const LIST = new URL('./public-api.txt', import.meta.url);

/** `name` or `type name` for every name src/index.ts exports, sorted by name. */
function exportedNames(source: string): string[] {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  const clause = /export\s+(type\s+)?\{([^}]*)\}\s*from\s*'[^']+';/g;
  const names: string[] = [];
  for (const m of code.matchAll(clause)) {
    const allTypes = m[1] !== undefined;
    for (const raw of (m[2] ?? '').split(',')) {
      const item = raw.trim();
      if (item === '') continue;
      const typeOnly = allTypes || item.startsWith('type ');
      const name = item.replace(/^type\s+/, '').split(/\s+as\s+/).at(-1)?.trim() ?? '';
      assert.match(name, /^[A-Za-z_$][\w$]*$/, `cannot read the export "${item}"`);
      names.push(typeOnly ? `type ${name}` : name);
    }
  }
  const rest = code.replace(clause, '');
  assert.doesNotMatch(rest, /\bexport\b/, 'src/index.ts has an export statement this test cannot read (only `export { ... } from` is read)');
  // By name, case folded, then as written: the same order in every locale.
  const key = (n: string) => {
    const name = n.replace(/^type /, '');
    return `${name.toLowerCase()}\u0000${name}`;
  };
  return names.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

describe('the public API of the root entry', () => {
  const names = exportedNames(readFileSync(INDEX, 'utf8'));

  it('the value exports read from src/index.ts are the ones the module has', async () => {
    const runtime = Object.keys(await import('../../src/index.js')).sort();
    const values = names.filter((n) => !n.startsWith('type ')).sort();
    assert.deepEqual(values, runtime);
  });

  it('matches the committed list (test/unit/public-api.txt)', () => {
    if (process.env.UPDATE_PUBLIC_API === '1') writeFileSync(LIST, `${names.join('\n')}\n`);
    const committed = readFileSync(LIST, 'utf8').split('\n').filter((l) => l !== '');
    assert.deepEqual(
      names,
      committed,
      'the root entry exports changed: if that is meant, update test/unit/public-api.txt (UPDATE_PUBLIC_API=1) in the same commit and say why',
    );
  });
});
