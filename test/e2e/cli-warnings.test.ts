/**
 * The `longhaul` command hides Node's "SQLite is an experimental feature" warning (printed by
 * Node 22 when the store opens; src/cli/quiet-sqlite-warning.ts) and no other warning. Node 24.21
 * and 26 no longer emit it, so the warning is emitted by hand here: the filter is tested on every
 * Node the suite runs on, and the CLI tests cover the real one on Node 22.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';

describe('CLI warnings', () => {
  it("drops only node:sqlite's ExperimentalWarning; other warnings still print", () => {
    const script = `
      await import('./src/cli/quiet-sqlite-warning.ts');
      process.emitWarning('SQLite is an experimental feature and might change at any time', 'ExperimentalWarning');
      process.emitWarning('Another feature is experimental', 'ExperimentalWarning');
      process.emitWarning('SQLite is an experimental feature, but this is a DeprecationWarning', 'DeprecationWarning');`;
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.doesNotMatch(run.stderr, /ExperimentalWarning: SQLite is an experimental feature/);
    assert.match(run.stderr, /ExperimentalWarning: Another feature is experimental/);
    assert.match(run.stderr, /DeprecationWarning: SQLite is an experimental feature, but this is a DeprecationWarning/);
  });
});
