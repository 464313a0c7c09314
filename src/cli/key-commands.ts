/**
 * `longhaul keys create|list|revoke`: API keys kept in the database the command is pointed at
 * (`--database`, else LONGHAUL_DATABASE_URL, else ./longhaul.db), hashed (facade/api-keys.ts).
 * Every server over that database accepts them beside LONGHAUL_API_KEYS; a revoked key is refused
 * by every server within LONGHAUL_API_KEY_CACHE_MS (5 s). `keys create --env` makes a key for
 * LONGHAUL_API_KEYS instead and touches no database.
 */
import { randomBytes } from 'node:crypto';
import type { Command } from 'commander';
import pino from 'pino';
import { API_KEY_PREFIX, isApiKeyId } from '../core/api-keys.js';
import { TENANT_NAME } from '../core/tenant-name.js';
import type { ApiKeyView } from '../facade/api-keys.js';
import { Longhaul } from '../longhaul.js';
import { CliError, redactUrl } from './runtime.js';

/** The database's Longhaul for one command: no events channel, logs on stderr (stdout carries the answer). */
async function openDatabase(database: string | undefined): Promise<Longhaul> {
  const logger = pino({ level: process.env.LONGHAUL_LOG_LEVEL?.trim() || 'warn', name: 'longhaul' }, pino.destination(2));
  return Longhaul.open({ ...(database ? { database } : {}), logger, channel: false });
}

async function withDatabase<T>(database: string | undefined, fn: (lh: Longhaul) => Promise<T>): Promise<T> {
  const lh = await openDatabase(database);
  try {
    return await fn(lh);
  } finally {
    await lh.close();
  }
}

const time = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));

/** The keys as a table (ID, TENANT, PREFIX, ADMIN, CREATED, LAST USED, and REVOKED when listed). */
export function keyTable(keys: readonly ApiKeyView[], revoked: boolean): string {
  const head = ['ID', 'TENANT', 'PREFIX', 'ADMIN', 'CREATED', 'LAST USED', ...(revoked ? ['REVOKED'] : [])];
  const rows = keys.map((k) => [k.id, k.tenant, k.prefix, k.admin ? 'yes' : 'no', time(k.createdAt), time(k.lastUsedAt), ...(revoked ? [time(k.revokedAt)] : [])]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  return [head, ...rows].map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] as number))).join('  ')).join('\n');
}

/** The id in `lh_<id>` or `lh_<id>_…` (what `keys list` shows as PREFIX), or the id itself. */
function idOf(given: string): string {
  const m = /^lh_([a-z2-7]{12})(?:_.*)?$/.exec(given);
  return m ? (m[1] as string) : given;
}

export function registerKeyCommands(program: Command): void {
  const keys = program.command('keys').description('API keys kept in the database (hashed), beside LONGHAUL_API_KEYS');

  keys
    .command('create')
    .description('make an API key for a tenant, store its hash in the database and print the key (shown this once)')
    .requiredOption('--tenant <name>', 'tenant the key belongs to (1–64 letters, digits, . _ -)')
    .option('--admin', "an admin key: other tenants' jobs, purge, metrics (as a tenant of LONGHAUL_ADMIN_TENANTS)")
    .option('--database <url>', 'SQLite path or postgres:// URL (LONGHAUL_DATABASE_URL)')
    .option('--env', 'touch no database: print a tenant:key entry for LONGHAUL_API_KEYS instead')
    .action(async (o: { tenant: string; admin?: boolean; database?: string; env?: boolean }) => {
      if (!TENANT_NAME.test(o.tenant)) throw new CliError('tenant must be 1–64 letters, digits, . _ -');
      if (o.env) {
        if (o.admin) throw new CliError('--admin is for database keys; an environment key is an admin when its tenant is in LONGHAUL_ADMIN_TENANTS');
        if (o.database) throw new CliError('--env touches no database: drop --database');
        process.stdout.write(`${o.tenant}:${API_KEY_PREFIX}${randomBytes(24).toString('base64url')}\n`);
        return;
      }
      await withDatabase(o.database, async (lh) => {
        const made = await lh.apiKeys.create({ tenant: o.tenant, admin: o.admin === true });
        process.stdout.write(`${made.key}\n`);
        process.stderr.write(
          `created ${o.admin ? 'admin ' : ''}key ${made.view.id} for tenant ${o.tenant} in ${redactUrl(lh.config.database)}; ` +
            'the key above is shown only now (the database keeps its hash). Servers started before the first key was made must be restarted to require keys.\n',
        );
      });
    });

  keys
    .command('list')
    .description('the keys in the database: id, tenant, prefix, admin, created, last used (never the key)')
    .option('--tenant <name>', "one tenant's keys")
    .option('--all', 'revoked keys too')
    .option('--json', 'print JSON')
    .option('--database <url>', 'SQLite path or postgres:// URL (LONGHAUL_DATABASE_URL)')
    .action(async (o: { tenant?: string; all?: boolean; json?: boolean; database?: string }) => {
      await withDatabase(o.database, async (lh) => {
        const list = await lh.apiKeys.list({ ...(o.tenant !== undefined ? { tenant: o.tenant } : {}), revoked: o.all === true });
        if (o.json) process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
        else if (list.length === 0) process.stdout.write(o.all ? 'no API keys in the database\n' : 'no valid API keys in the database\n');
        else process.stdout.write(`${keyTable(list, o.all === true)}\n`);
      });
    });

  keys
    .command('revoke')
    .description('revoke a key by id (or its prefix lh_<id>_): every server refuses it within LONGHAUL_API_KEY_CACHE_MS (5 s)')
    .argument('<id>', 'the key id, as keys list shows it')
    .option('--database <url>', 'SQLite path or postgres:// URL (LONGHAUL_DATABASE_URL)')
    .action(async (given: string, o: { database?: string }) => {
      const id = idOf(given.trim());
      if (!isApiKeyId(id)) throw new CliError(`not a key id: "${given.slice(0, 40)}" (keys list shows the ids)`);
      await withDatabase(o.database, async (lh) => {
        const k = await lh.apiKeys.revoke(id);
        process.stdout.write(`revoked key ${k.id} of tenant ${k.tenant} (${time(k.revokedAt)})\n`);
      });
    });
}
