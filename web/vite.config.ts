/**
 * Builds the dashboard (web/) into dist/web, which the server serves at `/`
 * (src/server/dashboard.ts). Run by `npm run build`; needs nothing but the npm packages.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  publicDir: false,
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('../dist/web', import.meta.url)),
    emptyOutDir: true,
    assetsDir: 'assets',
    // The page runs in current browsers only; no polyfill is injected (nothing inline: see the CSP).
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: 'es2022',
  },
});
