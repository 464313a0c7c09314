/**
 * Loaded with `--import`: makes the packages named in LONGHAUL_HIDE_PACKAGES (comma-separated,
 * e.g. `pg,@aws-sdk/client-s3`) unresolvable, as if they were not installed, for a test of what
 * a feature says when its optional package is missing. Node's own resolver produces the error
 * (ERR_MODULE_NOT_FOUND, "Cannot find package 'pg' imported from ..."): the hook resolves the
 * hidden name from a directory with no node_modules. For ESM imports, CommonJS requires and
 * import.meta.resolve alike (module.registerHooks runs in the thread, for all three).
 */
import { registerHooks } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const hidden = new Set(
  (process.env.LONGHAUL_HIDE_PACKAGES ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
);
// A file in a directory no node_modules is above (the system's temporary directory's own root).
const nowhere = pathToFileURL(join(tmpdir(), 'longhaul-hidden-packages', 'importer.js')).href;

/** The package a bare specifier names: `pg` of `pg/lib/x`, `@aws-sdk/client-s3` of `@aws-sdk/client-s3/dist`. */
function packageOf(specifier) {
  if (/^(\.|\/|[a-z]+:)/.test(specifier)) return null;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

registerHooks({
  resolve(specifier, context, nextResolve) {
    const pkg = packageOf(specifier);
    if (pkg !== null && hidden.has(pkg)) return nextResolve(specifier, { ...context, parentURL: nowhere });
    return nextResolve(specifier, context);
  },
});
