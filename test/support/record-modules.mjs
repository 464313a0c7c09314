/**
 * Loaded with `--import` first, before anything else: records the URL of every module the
 * process resolves, ESM imports and CommonJS requires alike (module.registerHooks runs in the
 * thread, for both), in `globalThis.__longhaulModules`, for a test to read what an import loaded.
 */
import { registerHooks } from 'node:module';

const loaded = new Set();
globalThis.__longhaulModules = loaded;
registerHooks({
  resolve(specifier, context, nextResolve) {
    const result = nextResolve(specifier, context);
    loaded.add(result.url);
    return result;
  },
});
