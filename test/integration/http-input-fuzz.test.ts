/**
 * Fuzz of every HTTP route in `/openapi.json`, on SQLite and on PostgreSQL: bad values in every
 * path and query parameter (NUL bytes, invalid UTF-8 percent-escapes, huge and negative numbers,
 * over-long strings, repeated parameters, dates out of range, ids that are not ids) and bad
 * bodies (wrong types, huge numbers, NUL bytes, lone surrogates, invalid UTF-8 bytes, long
 * strings, arrays for scalars), sent with an admin key and with a tenant key. No answer may be a
 * 5xx, and every 4xx must be problem+json with a `code` (docs/security.md, "Input validation").
 *
 * The routes are read from `/openapi.json` when the test runs, so a new route is fuzzed without
 * a change here. First a sweep (each parameter of each route with each value of the catalogue
 * below, the others valid), then random requests, drawn from a seed, until the time budget is
 * spent. The seed is printed; `FUZZ_SEED=<n>` replays a run (`FUZZ_MS` changes the budget).
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { FsBlobStore } from '../../src/blobs/fs-store.js';
import { FatalError } from '../../src/core/errors.js';
import { Longhaul } from '../../src/longhaul.js';
import { buildServer } from '../../src/server/app.js';
import { parseApiKeys } from '../../src/server/auth.js';
import { defineTask } from '../../src/task-api/define.js';
import { settled } from '../support/jobs.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { seededRandom } from '../../src/core/seeded-random.js';

const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : randomInt(2 ** 31);
/** Random requests after the sweep, per store and key. */
const BUDGET_MS = Number(process.env.FUZZ_MS ?? 1_500);
const CONCURRENCY = 8;

const ADMIN_KEY = 'fuzz-admin-key-0123456789abcdef';
const TENANT_KEY = 'fuzz-tenant-key-0123456789abcdef';

// ---- the random source ---------------------------------------------------------------------------

/** A seeded source (core/seeded-random.ts) with the picks the fuzz needs. */
function rng(seed: number) {
  const next = seededRandom(seed);
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick<T>(items: readonly T[]): T {
      return items[Math.floor(next() * items.length)] as T;
    },
    chance: (p: number) => next() < p,
  };
}
type Rng = ReturnType<typeof rng>;

// ---- what is sent ----------------------------------------------------------------------------------

const UUID = '0190f3e2-7b1c-7d4e-8f00-0123456789ab';
const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64url');

/** Bad values for a path or query parameter, already percent-encoded as they go on the wire. */
const BAD_VALUES: readonly string[] = [
  '',
  '%00',
  'a%00b',
  '%C3%28',
  '%FF',
  '%ED%A0%80',
  '%E2%82',
  '%F0%9F%98',
  '%',
  '%zz',
  '%25',
  '-1',
  '0',
  '1.5',
  '1e400',
  '-1e400',
  'NaN',
  'Infinity',
  '99999999999999999999',
  '-99999999999999999999',
  '9007199254740993',
  '18446744073709551616',
  '-9223372036854775809',
  '9223372036854775807',
  '%20',
  '+',
  '%0A',
  '%0D%0A',
  '%7F',
  '%C2%85',
  '%EF%BF%BF',
  '%EF%BB%BF',
  '%E2%80%A8',
  '%F0%9F%98%80',
  '*',
  '..',
  '%2F',
  '%5C',
  'null',
  'true',
  '%5B%5D',
  '%7B%7D',
  '%22',
  "'",
  'x'.repeat(129),
  'x'.repeat(201),
  '2024-13-45T99:99:99Z',
  '%2B275760-09-13T00:00:00.001Z',
  '-271821-04-20T00:00:00.000Z',
  '0000-00-00',
  '9999-12-31T23:59:59.999Z',
  '2024-01-01T00:00:00%2B99:99',
  UUID.toUpperCase(),
  `urn:uuid:${UUID}`,
  '00000000-0000-0000-0000-000000000000',
  `${UUID}%00`,
  'g'.repeat(36),
  b64('\u0000'),
  b64(`99999999999999999999.${UUID}`),
  b64(`-9999999999999999.${UUID}`),
  b64(`9999999999999999.${UUID}`),
  '2147483648',
  '9999999999',
  '4294967296',
  b64('not a cursor'),
  '%E2%80%AE',
];

/** Only in query strings: a path segment this long is a 414 before any route runs. */
const LONG_QUERY_VALUES: readonly string[] = ['x'.repeat(1_000), '%C3%A9'.repeat(1_500)];

/** Random bytes, percent-encoded. */
function randomValue(r: Rng): string {
  const n = r.pick([0, 1, 2, 8, 36, 40, 130, 300]);
  let s = '';
  for (let i = 0; i < n; i++) {
    const byte = r.chance(0.5) ? 0x20 + r.int(0x5f) : r.int(256);
    s += /[A-Za-z0-9._~-]/.test(String.fromCharCode(byte)) ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return s;
}

/** JSON fragments (raw text) for a body field: wrong types, extremes, strings stores refuse. */
const BAD_JSON: readonly string[] = [
  '1e400',
  '-1e400',
  '-1',
  '0',
  '1.5',
  '9007199254740993',
  '1e308',
  '-9223372036854775809',
  '""',
  '"\\u0000"',
  '"a\\u0000b"',
  '"\\ud800"',
  '"\\udfff x"',
  '"%C3%28"',
  '"*"',
  `"${'x'.repeat(100_000)}"`,
  '[]',
  '[1,"x",null]',
  '{}',
  '{"a":{"b":[]}}',
  'null',
  'true',
  '"2024-13-45T99:99:99Z"',
  '"+275760-09-13T00:00:00.001Z"',
  '"99999999999999999999"',
  `"${UUID.toUpperCase()}"`,
];

/** Whole bodies that are wrong as a whole. */
const BAD_BODIES: readonly (string | Buffer)[] = [
  '',
  'null',
  '[]',
  '"x"',
  '1e400',
  '{',
  '{"a":',
  '[{}]',
  '{"__proto__":{"polluted":1}}',
  '{"constructor":{"prototype":{"polluted":1}}}',
  '['.repeat(5_000),
  `"${'x'.repeat(200_000)}"`,
  Buffer.from([0x7b, 0x22, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]), // {"type":"\xC3("}
  Buffer.from([0xff, 0xfe, 0x00, 0x00]),
];

// ---- the routes, as /openapi.json describes them -----------------------------------------------------

interface Param {
  name: string;
  in: 'path' | 'query';
}
interface Operation {
  method: string;
  path: string;
  params: Param[];
  /** The JSON body's schema, when the route takes one. */
  body: JsonSchema | null;
  /** Takes any bytes (uploads). */
  raw: boolean;
}
interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  enum?: unknown[];
}

function operationsOf(doc: { paths: Record<string, Record<string, Record<string, unknown>>> }): Operation[] {
  const ops: Operation[] = [];
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      const params = ((op.parameters ?? []) as Param[]).filter((p) => p.in === 'path' || p.in === 'query').map((p) => ({ name: p.name, in: p.in }));
      const content = (op.requestBody as { content?: Record<string, { schema?: JsonSchema }> } | undefined)?.content ?? {};
      const json = Object.entries(content).find(([type]) => /json/.test(type));
      ops.push({ method: method.toUpperCase(), path, params, body: json ? (json[1].schema ?? {}) : null, raw: '*/*' in content });
    }
  }
  return ops;
}

interface World {
  jobId: string;
  failedId: string;
  resultJobId: string;
  uploadId: string;
  schedule: string;
}

/** A value the route would accept for a parameter, so that a request reaches past the others. */
function validValue(op: Operation, p: Param, w: World): string | undefined {
  if (p.in === 'path') {
    if (p.name === 'id') return op.path.startsWith('/v1/uploads') ? w.uploadId : op.path.includes('/result') ? w.resultJobId : op.path.includes('/attempts') ? w.failedId : w.jobId;
    if (p.name === 'name') return op.path.startsWith('/v1/schedules') ? w.schedule : op.path.includes('/results/') ? 'out.txt' : 'go';
    return 'x';
  }
  const known: Record<string, string> = { limit: '10', tenant: 'acme', type: 't.quick', status: 'pending,failed', state: 'failed', noCode: 'false' };
  return known[p.name];
}

function bodyValue(schema: JsonSchema | undefined, name: string, r: Rng, bad: boolean, submitSchema: JsonSchema | null): string {
  if (bad) return r.pick(BAD_JSON);
  const fixed: Record<string, string> = { type: '"t.quick"', task: '"t.quick"', name: `"fz-${r.int(1000)}"`, cron: '"* * * * *"', timezone: '"UTC"' };
  if (fixed[name]) return fixed[name];
  if (name === 'jobs' && submitSchema) return `[${objectBody(submitSchema, r, submitSchema)}]`;
  if (schema?.enum?.length) return JSON.stringify(r.pick(schema.enum));
  const type = Array.isArray(schema?.type) ? schema?.type[0] : schema?.type;
  if (type === 'integer' || type === 'number') return String(r.pick([1, 10, 1000]));
  if (type === 'boolean') return 'true';
  if (type === 'array') return '[]';
  if (type === 'object') return '{}';
  return '"x"';
}

/**
 * An object for the schema, the required fields present more often than not, and one field bad
 * (mostly: a bad value in one field gets past the checks of the others), or several.
 */
function objectBody(schema: JsonSchema, r: Rng, submitSchema: JsonSchema | null): string {
  const fields: string[] = [];
  const required = new Set(schema.required ?? []);
  const names = Object.keys(schema.properties ?? {});
  const badOne = r.chance(0.85) ? r.pick(names) : undefined;
  for (const [name, sub] of Object.entries(schema.properties ?? {})) {
    if (name !== badOne && !required.has(name) && r.chance(0.5)) continue;
    if (name !== badOne && required.has(name) && r.chance(0.05)) continue;
    fields.push(`${JSON.stringify(name)}:${bodyValue(sub, name, r, badOne === undefined ? r.chance(0.35) : name === badOne, submitSchema)}`);
  }
  if (r.chance(0.1)) fields.push(`"unknownField":${r.pick(BAD_JSON)}`);
  return `{${fields.join(',')}}`;
}

interface Case {
  method: string;
  path: string;
  key: string;
  body?: string | Buffer;
  contentType?: string;
  what: string;
}

/** A request of the operation: `target` (a parameter) gets `value`; the others valid, left out, or random. */
function requestOf(op: Operation, w: World, key: string, r: Rng | null, target?: { param: Param; value: string; twice?: boolean }): Case {
  let path = op.path;
  const query: string[] = [];
  for (const p of op.params) {
    let value: string | undefined;
    if (target?.param === p) value = target.value;
    else if (r?.chance(0.15)) value = r.chance(0.5) ? r.pick(BAD_VALUES) : randomValue(r);
    else value = validValue(op, p, w);
    if (p.in === 'path') path = path.replace(`{${p.name}}`, value ?? 'x');
    else if (value !== undefined && (target?.param === p || r === null || r.chance(0.6))) {
      query.push(`${p.name}=${value}`);
      if (target?.param === p && target.twice) query.push(`${p.name}=${value}`);
    }
  }
  const url = query.length > 0 ? `${path}?${query.join('&')}` : path;
  const c: Case = { method: op.method, path: url, key, what: target ? `${target.param.in} ${target.param.name}` : 'random' };
  return c;
}

function withBody(c: Case, op: Operation, r: Rng, submitSchema: JsonSchema | null): Case {
  if (op.raw) return { ...c, body: r.pick(BAD_BODIES), contentType: r.pick(['application/octet-stream', 'text/plain', 'bad type', '']) };
  if (!op.body) return c;
  const body = r.chance(0.25) ? r.pick(BAD_BODIES) : objectBody(op.body, r, submitSchema);
  const contentType = r.chance(0.9) ? 'application/json' : r.pick(['text/plain', 'application/json; charset=latin1', '']);
  return { ...c, body, contentType, what: `${c.what}, body` };
}

// ---- sending ------------------------------------------------------------------------------------------

interface Answer {
  status: number;
  contentType: string;
  body: string;
}

function send(base: URL, agent: Agent, c: Case): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { authorization: `Bearer ${c.key}` };
    if (c.body !== undefined) {
      if (c.contentType) headers['content-type'] = c.contentType;
      headers['content-length'] = Buffer.byteLength(c.body);
    }
    const req = httpRequest({ host: base.hostname, port: base.port, method: c.method, path: c.path, headers, agent }, (res) => {
      const contentType = String(res.headers['content-type'] ?? '');
      // A stream that opened (SSE) is all we need to know: it would run until the job ends.
      if (contentType.startsWith('text/event-stream')) {
        res.destroy();
        req.destroy();
        return resolve({ status: res.statusCode ?? 0, contentType, body: '' });
      }
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error(`no answer in 15 s: ${c.method} ${c.path.slice(0, 200)}`)));
    req.end(c.body);
  });
}

/** Why an answer breaks the rule, or null. */
function violation(a: Answer): string | null {
  if (a.status >= 500) return `${a.status} ${a.body.slice(0, 200)}`;
  if (a.status >= 400) {
    if (!a.contentType.startsWith('application/problem+json')) return `${a.status} without problem+json (${a.contentType}): ${a.body.slice(0, 200)}`;
    let p: { status?: unknown; code?: unknown };
    try {
      p = JSON.parse(a.body);
    } catch {
      return `${a.status} problem+json that is not JSON: ${a.body.slice(0, 200)}`;
    }
    if (typeof p.code !== 'string' || p.code === '' || p.status !== a.status) return `${a.status} problem without a code or with another status: ${a.body.slice(0, 200)}`;
  }
  return null;
}

/** Answers by status, printed with FUZZ_STATS=1 (to see how deep the requests reach). */
function report(what: string, statuses: Map<number, number>): void {
  if (process.env.FUZZ_STATS) console.log(what, JSON.stringify(Object.fromEntries([...statuses].sort(([a], [b]) => a - b))));
}

async function runAll(base: URL, cases: Iterable<Case> | (() => Case | null), failures: Map<string, string>, what: string): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const next: () => Case | null =
    typeof cases === 'function'
      ? cases
      : (() => {
          const it = cases[Symbol.iterator]();
          return () => {
            const n = it.next();
            return n.done ? null : n.value;
          };
        })();
  let sent = 0;
  const statuses = new Map<number, number>();
  const worker = async () => {
    for (let c = next(); c !== null; c = next()) {
      sent++;
      const answer = await send(base, agent, c).catch((err: Error) => ({ status: 599, contentType: '', body: `request failed: ${err.message}` }));
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      const v = violation(answer);
      if (v) {
        const where = `${c.method} ${c.path.length > 160 ? `${c.path.slice(0, 160)}…` : c.path} [${c.what}${c.key === ADMIN_KEY ? ', admin' : ', tenant'}]`;
        if (failures.size < 200 && !failures.has(where)) failures.set(where, `${v}${c.body === undefined ? '' : ` — body ${String(c.body).slice(0, 120)}`}`);
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  agent.destroy();
  report(what, statuses);
  return sent;
}

// ---- the servers ------------------------------------------------------------------------------------

const tasks = [
  defineTask({ type: 't.quick', async run(input) {
    return { echo: input ?? null };
  } }),
  defineTask({ type: 't.fail', maxAttempts: 1, async run() {
    throw new FatalError('always fails', { code: 'E_FUZZ' });
  } }),
  defineTask({ type: 't.file', async run(_input, ctx) {
    await ctx.results.write('out.txt', 'hello');
    return 'written';
  } }),
  defineTask({
    type: 't.wait',
    async run(_input, ctx) {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    },
  }),
];

const stores: Array<{ name: string; database(dir: string): Promise<{ url: string; drop(): Promise<void> }> }> = [
  { name: 'sqlite', database: async (dir) => ({ url: join(dir, 'fuzz.db'), drop: async () => {} }) },
  {
    name: 'postgres',
    database: async () => {
      const db: TestDatabase = await createTestDatabase('lh_http_fuzz');
      return { url: db.url, drop: () => db.drop() };
    },
  },
];

console.log(`http-input-fuzz: FUZZ_SEED=${SEED} (set it to replay this run)`);

for (const [index, store] of stores.entries()) {
  describe(`every route of /openapi.json with bad parameters and bodies: ${store.name}`, () => {
    let dir: string;
    let db: { url: string; drop(): Promise<void> };
    let lh: Longhaul;
    let app: FastifyInstance;
    let base: URL;
    let ops: Operation[];
    let world: World;
    let submitSchema: JsonSchema | null;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'longhaul-http-fuzz-'));
      db = await store.database(dir);
      lh = await Longhaul.open({
        database: db.url,
        tasks,
        logger: pino({ level: 'silent' }),
        files: { urlSigningSecret: 'http-fuzz-url-signing-secret-0123456789abcdef', blobs: await FsBlobStore.open(join(dir, 'blobs')) },
      });
      await lh.startWorker({ concurrency: 8, pollIntervalMs: 20 });
      // Bad stream tokens are 401s: throttling them would answer the rest of the run 429
      // (server/auth-throttle.ts; the option is typed here too, for trees without it).
      const options: Parameters<typeof buildServer>[0] & { authThrottle?: false } = {
        lh,
        apiKeys: parseApiKeys(`ops:${ADMIN_KEY},acme:${TENANT_KEY}`),
        adminTenants: ['ops'],
        authThrottle: false,
        logger: false,
      };
      app = await buildServer(options);
      base = new URL(await app.listen({ port: 0, host: '127.0.0.1' }));
      const tenant = { tenant: 'acme' };
      const failed = await lh.submit('t.fail', null, tenant);
      const file = await lh.submit('t.file', null, tenant);
      const waiting = await lh.submit('t.wait', null, tenant);
      await settled(lh, failed.id, 20_000);
      await settled(lh, file.id, 20_000);
      await lh.schedules.create({ name: 'fz-daily', task: 't.quick', cron: '0 3 * * *' }, tenant);
      const upload = await fetch(new URL('/v1/uploads', base), { method: 'POST', headers: { authorization: `Bearer ${TENANT_KEY}`, 'content-type': 'text/plain' }, body: 'x' });
      assert.equal(upload.status, 201);
      world = { jobId: waiting.id, failedId: failed.id, resultJobId: file.id, uploadId: ((await upload.json()) as { id: string }).id, schedule: 'fz-daily' };
      const doc = (await (await fetch(new URL('/openapi.json', base))).json()) as Parameters<typeof operationsOf>[0];
      ops = operationsOf(doc);
      submitSchema = ops.find((o) => o.method === 'POST' && o.path === '/v1/jobs')?.body ?? null;
    });
    after(async () => {
      await app?.close();
      await lh?.close({ drainMs: 0 });
      await db?.drop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('reads the routes from /openapi.json: dead letters, schedules, signals, batches, purge, attempts, uploads, results, jobs, task types, stats', () => {
      const paths = new Set(ops.map((o) => `${o.method} ${o.path}`));
      for (const p of [
        'GET /v1/dead-letters',
        'GET /v1/schedules/{name}',
        'POST /v1/jobs/{id}/signals/{name}',
        'POST /v1/batches',
        'DELETE /v1/jobs',
        'GET /v1/jobs/{id}/attempts',
        'GET /v1/uploads/{id}',
        'GET /v1/jobs/{id}/results/{name}',
        'GET /v1/jobs',
        'GET /v1/task-types',
        'GET /v1/stats',
      ]) {
        assert.ok(paths.has(p), `${p} in /openapi.json`);
      }
    });

    it('refuses what the stores cannot hold with 400 INVALID_REQUEST naming the parameter (the examples of issue 36 among them)', async () => {
      const cases: Array<[string, string]> = [
        ['/v1/dead-letters?failedAfter=99999999999999999999', 'failedAfter'],
        ['/v1/dead-letters/jobs?failedBefore=9223372036854775807', 'failedBefore'],
        ['/v1/schedules/%00', 'name'],
        ['/v1/schedules/a%00b/pause', 'name'],
        [`/v1/jobs/${world.failedId}/attempts?cursor=2147483648`, 'cursor'],
        ['/v1/jobs?q=%C3%28', 'q'],
        ['/v1/jobs?type=%FF', 'type'],
        ['/v1/jobs?limit=1001', 'limit'],
        ['/v1/jobs?limit=1&limit=2', 'limit'],
        [`/v1/jobs/${world.jobId.toUpperCase()}`, 'id'],
        ['/v1/uploads/not-an-upload', 'id'],
        ['/v1/jobs?tenant=a%00b', 'tenant'],
      ];
      for (const [path, param] of cases) {
        const answer = await send(base, new Agent(), { method: path.includes('/pause') ? 'POST' : 'GET', path, key: ADMIN_KEY, what: path });
        assert.equal(answer.status, 400, `${path}: ${answer.body}`);
        const p = JSON.parse(answer.body) as { code: string; errors?: Array<{ path: string; message: string }> };
        assert.equal(p.code, 'INVALID_REQUEST', path);
        assert.deepEqual(p.errors?.map((e) => e.path), [param], `${path}: ${answer.body}`);
      }
      const purge = await send(base, new Agent(), { method: 'DELETE', path: '/v1/jobs?before=99999999999999999999', key: ADMIN_KEY, what: 'purge' });
      assert.equal(purge.status, 400, purge.body);
      // An empty cursor or filter is none (the first page, every type), as before.
      const first = await send(base, new Agent(), { method: 'GET', path: '/v1/jobs?cursor=&type=&parentId=', key: TENANT_KEY, what: 'empty' });
      assert.equal(first.status, 200, first.body);
      // Other control characters are storable (an error code may hold a tab): a filter may name them.
      for (const path of ['/v1/dead-letters?code=E%09X', '/v1/jobs?q=a%09b']) {
        const ok = await send(base, new Agent(), { method: 'GET', path, key: TENANT_KEY, what: path });
        assert.equal(ok.status, 200, `${path}: ${ok.body}`);
      }
    });

    it('documents the rules in /openapi.json', async () => {
      const doc = (await (await fetch(new URL('/openapi.json', base))).json()) as Parameters<typeof operationsOf>[0];
      const params = (path: string, method: string) => (doc.paths[path]?.[method]?.parameters ?? []) as Array<{ name: string; schema: { pattern?: string } }>;
      assert.match(String(params('/v1/jobs/{id}', 'get').find((p) => p.name === 'id')?.schema.pattern), /0-9a-f\]\{8\}/);
      assert.ok(params('/v1/dead-letters', 'get').find((p) => p.name === 'failedAfter')?.schema.pattern);
      assert.ok(params('/v1/schedules/{name}', 'get').find((p) => p.name === 'name')?.schema.pattern);
      // Every path and query parameter of every route has a bound: a pattern, an enum or a length.
      for (const op of ops) {
        for (const p of params(op.path, op.method.toLowerCase()) as Array<{ name: string; in: string; schema: Record<string, unknown> }>) {
          if (p.in !== 'path' && p.in !== 'query') continue;
          assert.ok(p.schema.pattern !== undefined || p.schema.enum !== undefined || p.schema.maxLength !== undefined, `${op.method} ${op.path} ${p.name}: ${JSON.stringify(p.schema)}`);
        }
      }
    });

    it('answers every bad parameter of every route, for an admin and a tenant, with a 4xx problem (never a 5xx)', async () => {
      const failures = new Map<string, string>();
      const cases: Case[] = [];
      // Destructive routes last, so that the others meet the world as it was made.
      const ordered = [...ops].sort((a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE'));
      // Each value once, with the admin key and the tenant key in turn.
      const key = () => (cases.length % 2 === 0 ? TENANT_KEY : ADMIN_KEY);
      for (const op of ordered) {
        for (const param of op.params) {
          const values = param.in === 'query' ? [...BAD_VALUES, ...LONG_QUERY_VALUES] : BAD_VALUES;
          for (const value of values) cases.push(requestOf(op, world, key(), null, { param, value }));
          // The same parameter twice: an array where the route expects one value.
          const valid = validValue(op, param, world) ?? '1';
          if (param.in === 'query') for (const k of [TENANT_KEY, ADMIN_KEY]) cases.push(requestOf(op, world, k, null, { param, value: valid, twice: true }));
        }
      }
      const sent = await runAll(base, cases, failures, `${store.name} sweep`);
      assert.ok(sent >= 3_000, `a sweep of ${sent} requests`);
      assert.deepEqual([...failures].map(([k, v]) => `${k}: ${v}`), [], `FUZZ_SEED=${SEED}: ${failures.size} requests broke the rule`);
    });

    it('answers random bad requests (parameters and bodies) with a 4xx problem or a success, never a 5xx', async () => {
      const r = rng(SEED + index);
      const failures = new Map<string, string>();
      const until = Date.now() + BUDGET_MS;
      const next = (): Case | null => {
        if (Date.now() > until) return null;
        const op = r.pick(ops);
        const key = r.chance(0.5) ? ADMIN_KEY : TENANT_KEY;
        const param = op.params.length > 0 && r.chance(0.8) ? r.pick(op.params) : undefined;
        const value = r.chance(0.5) ? r.pick(BAD_VALUES) : randomValue(r);
        const c = requestOf(op, world, key, r, param ? { param, value } : undefined);
        return op.body || op.raw ? withBody(c, op, r, submitSchema) : c;
      };
      const sent = await runAll(base, next, failures, `${store.name} random`);
      assert.ok(sent > 0);
      assert.deepEqual([...failures].map(([k, v]) => `${k}: ${v}`), [], `FUZZ_SEED=${SEED}: ${failures.size} requests broke the rule`);
      const health = await fetch(new URL('/healthz', base));
      assert.equal(health.status, 200, 'the server is still live');
    });
  });
}
