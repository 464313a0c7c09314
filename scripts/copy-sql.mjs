// Build step: copies the stores' migration files (src/store/*/migrations/*.sql) into dist/,
// beside the compiled code that reads them (src/store/migration-files.ts). tsc copies no .sql.
import { cpSync, existsSync } from 'node:fs';

for (const store of ['sqlite', 'postgres']) {
  const from = `src/store/${store}/migrations`;
  if (existsSync(from)) cpSync(from, `dist/store/${store}/migrations`, { recursive: true, filter: (f) => !f.includes('.') || f.endsWith('.sql') });
}
