/** Sentences the process commands print about what they did or found. Pure functions. */
import type { MigrationResult } from '../store/store.js';

function migrations(from: number, to: number): string {
  return to - from === 1 ? `migration ${to}` : `migrations ${from + 1} to ${to}`;
}

/** What `longhaul migrate` did to the schema. */
export function describeMigration({ from, to }: MigrationResult): string {
  if (from === to) return `schema version ${to} is up to date, nothing to apply`;
  if (from === 0) return `created the schema: applied ${migrations(from, to)}, now at version ${to}`;
  return `upgraded the schema from version ${from}: applied ${migrations(from, to)}, now at version ${to}`;
}

/** The banner's `tasks` line of `dev` and `server`: the task types, or what having none means. */
export function describeTasks(types: readonly string[]): string {
  if (types.length > 0) return types.join(', ');
  return 'none loaded: every submission is refused (422 UNKNOWN_TASK); pass --tasks FILE (or LONGHAUL_TASKS)';
}
