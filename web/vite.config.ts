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
  // The dashboard takes its API types and its SSE parser from the client SDK, compiled from
  // source (the same mapping as web/tsconfig.json's paths); only what it uses is bundled.
  resolve: { alias: { 'longhaul/client': fileURLToPath(new URL('../src/client/index.ts', import.meta.url)) } },
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
