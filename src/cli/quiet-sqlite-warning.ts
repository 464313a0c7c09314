/**
 * Keeps Node's "SQLite is an experimental feature" ExperimentalWarning off the CLI's stderr.
 *
 * Node 22 (and Node 24 before 24.15) prints it once per process when `node:sqlite` loads; the
 * store uses that module, so without this every `longhaul` command on SQLite would start its
 * stderr with two lines its user can do nothing about (docs/operations.md). Only that warning
 * is dropped; every other warning is printed as before. It must run before `node:sqlite` is
 * loaded, so main.ts imports this module first. The library does not do this: an application
 * decides what its own process prints.
 */
const emitWarning = process.emitWarning;

function isSqliteExperimental(warning: string | Error, rest: unknown[]): boolean {
  const message = typeof warning === 'string' ? warning : warning.message;
  const first = rest[0];
  const type = typeof first === 'string' ? first : typeof warning === 'string' ? (first as { type?: string } | undefined)?.type : warning.name;
  return type === 'ExperimentalWarning' && message.startsWith('SQLite is an experimental feature');
}

process.emitWarning = function emitUnlessSqliteExperimental(this: NodeJS.Process, warning: string | Error, ...rest: unknown[]) {
  if (isSqliteExperimental(warning, rest)) return;
  return (emitWarning as (...args: unknown[]) => void).call(this, warning, ...rest);
} as typeof process.emitWarning;
