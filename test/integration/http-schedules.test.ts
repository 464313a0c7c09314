/**
 * `/v1/schedules` over HTTP on both stores: every route, tenant scoping, the problems it answers
 * (shape 400, a refused cron, timezone or task 422, a taken name 409, unknown 404, no key 401),
 * and a per-second schedule ticking for real (the harness runs a worker and the sweeper).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LonghaulApiError, LonghaulClient } from '../../src/client/index.js';
import { call, type Harness, KEY_A, KEY_B, problemOf, startHarness, until } from '../support/http-harness.js';

// The per-second schedule below is under the default minimum interval between ticks (1 minute).
process.env.LONGHAUL_SCHEDULE_MIN_INTERVAL = '1s';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const dbs: TestDatabase[] = [];
const TARGETS = [
  { name: 'SQLite', start: () => startHarness() },
  {
    name: 'PostgreSQL',
    async start() {
      const db = await createTestDatabase('lh_http_sched');
      dbs.push(db);
      return startHarness({ database: db.url });
    },
  },
];

after(async () => {
  for (const db of dbs.splice(0)) await db.drop();
});

for (const target of TARGETS) {
  describe(`schedule routes on ${target.name}`, () => {
    let h: Harness;
    before(async () => {
      h = await target.start();
    });
    after(() => h.close());

    it('create answers 201 with a Location and the next five runs in UTC, the timezone stated', async () => {
      const res = await call(h.base, '/v1/schedules', { body: { name: 'berlin', task: 't.quick', cron: '0 3 * * *', timezone: 'Europe/Berlin', input: { a: 1 } } });
      assert.equal(res.status, 201, res.text);
      assert.equal(res.headers.get('location'), '/v1/schedules/berlin');
      assert.equal(res.json.timezone, 'Europe/Berlin');
      assert.equal(res.json.nextRuns.length, 5);
      for (const t of res.json.nextRuns) assert.match(t, /^\d{4}-\d\d-\d\dT0[12]:00:00\.000Z$/, '03:00 Berlin is 01:00Z or 02:00Z');
      assert.deepEqual([res.json.paused, res.json.declared, res.json.lastRun, res.json.catchUp, res.json.overlap, res.json.input], [false, false, null, 'skip', true, { a: 1 }]);
      const got = await call(h.base, '/v1/schedules/berlin');
      assert.equal(got.status, 200);
      assert.deepEqual(got.json.nextRuns, res.json.nextRuns);
      assert.equal(got.headers.get('cache-control'), 'no-store');
    });

    it('refuses bad schedules with problem+json naming the field', async () => {
      const bad = async (body: unknown, status: number, code: string, field?: string) => {
        const res = await call(h.base, '/v1/schedules', { body });
        assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
        const p = problemOf(res, status, code);
        if (field) assert.ok((p.errors as { path: string }[]).some((e) => e.path === field), JSON.stringify(p));
        return p;
      };
      const cronProblem = await bad({ name: 'x', task: 't.quick', cron: '* * *' }, 422, 'INVALID_SCHEDULE', 'cron');
      assert.match(String(cronProblem.detail), /has 3 fields/);
      await bad({ name: 'x', task: 't.quick', cron: '99 * * * *' }, 422, 'INVALID_SCHEDULE', 'cron');
      await bad({ name: 'x', task: 't.quick', cron: '* * * * *', timezone: 'Mars/Olympus' }, 422, 'INVALID_SCHEDULE', 'timezone');
      await bad({ name: 'bad name', task: 't.quick', cron: '* * * * *' }, 422, 'INVALID_SCHEDULE', 'name');
      await bad({ name: 'x', task: 'no.such.task', cron: '* * * * *' }, 422, 'UNKNOWN_TASK');
      // Every run would be refused: the schedule is refused now, with the task's field errors.
      await bad({ name: 'x', task: 't.schema', cron: '* * * * *', input: { n: 0 } }, 422, 'INVALID_INPUT', 'n');
      assert.equal((await call(h.base, '/v1/schedules', { body: { name: 'schema-ok', task: 't.schema', cron: '0 0 1 1 *', input: { n: 2 } } })).status, 201);
      problemOf(await call(h.base, '/v1/schedules/schema-ok', { method: 'PATCH', body: { input: { n: 'two' } } }), 422, 'INVALID_INPUT');
      assert.equal((await call(h.base, '/v1/schedules/schema-ok', { method: 'DELETE' })).status, 204);
      await bad({ name: 'x', task: 't.quick', cron: 5 }, 400, 'INVALID_REQUEST', 'cron');
      await bad({ name: 'x', task: 't.quick' }, 400, 'INVALID_REQUEST');
      await bad({ name: 'x', task: 't.quick', cron: '* * * * *', catchUp: 'all' }, 400, 'INVALID_REQUEST', 'catchUp');
      await bad({ name: 'x', task: 't.quick', cron: '* * * * *', extra: 1 }, 400, 'INVALID_REQUEST');
      await bad({ name: 'berlin', task: 't.quick', cron: '* * * * *' }, 409, 'SCHEDULE_EXISTS');
      problemOf(await call(h.base, '/v1/schedules', { key: null }), 401, 'UNAUTHORIZED');
    });

    it("a tenant sees only its own schedules (another's is a 404)", async () => {
      problemOf(await call(h.base, '/v1/schedules/berlin', { key: KEY_B }), 404, 'SCHEDULE_NOT_FOUND');
      problemOf(await call(h.base, '/v1/schedules/berlin/trigger', { key: KEY_B, method: 'POST' }), 404, 'SCHEDULE_NOT_FOUND');
      assert.deepEqual((await call(h.base, '/v1/schedules', { key: KEY_B })).json.items, []);
      // Tenant B may use the same name.
      assert.equal((await call(h.base, '/v1/schedules', { key: KEY_B, body: { name: 'berlin', task: 't.quick', cron: '0 4 * * *' } })).status, 201);
      assert.deepEqual(
        (await call(h.base, '/v1/schedules')).json.items.map((s: { name: string; cron: string }) => [s.name, s.cron]),
        [['berlin', '0 3 * * *']],
      );
    });

    it('update, pause, resume, trigger and delete', async () => {
      const patched = await call(h.base, '/v1/schedules/berlin', { method: 'PATCH', body: { cron: '15 6 * * 1', timezone: 'UTC', input: { a: 2 } } });
      assert.equal(patched.status, 200, patched.text);
      assert.deepEqual([patched.json.cron, patched.json.timezone, patched.json.input], ['15 6 * * 1', 'UTC', { a: 2 }]);
      for (const t of patched.json.nextRuns) assert.match(t, /T06:15:00\.000Z$/);
      assert.equal(new Date(patched.json.nextRuns[0]).getUTCDay(), 1, 'Mondays');
      problemOf(await call(h.base, '/v1/schedules/berlin', { method: 'PATCH', body: { cron: 'x' } }), 422, 'INVALID_SCHEDULE');
      problemOf(await call(h.base, '/v1/schedules/berlin', { method: 'PATCH', body: { name: 'renamed' } }), 400, 'INVALID_REQUEST');
      problemOf(await call(h.base, '/v1/schedules/nope', { method: 'PATCH', body: { cron: '* * * * *' } }), 404, 'SCHEDULE_NOT_FOUND');

      const paused = await call(h.base, '/v1/schedules/berlin/pause', { method: 'POST' });
      assert.deepEqual([paused.status, paused.json.paused, paused.json.nextRuns], [200, true, []]);
      const resumed = await call(h.base, '/v1/schedules/berlin/resume', { method: 'POST' });
      assert.deepEqual([resumed.status, resumed.json.paused, resumed.json.nextRuns.length], [200, false, 5]);

      const trig = await call(h.base, '/v1/schedules/berlin/trigger', { method: 'POST' });
      assert.equal(trig.status, 202, trig.text);
      assert.equal(trig.headers.get('location'), `/v1/jobs/${trig.json.id}`);
      assert.deepEqual([trig.json.type, trig.json.input], ['t.quick', { a: 2 }]);
      const done = await until(async () => {
        const s = (await call(h.base, '/v1/schedules/berlin')).json;
        return s.lastRun?.status === 'succeeded' ? s : undefined;
      }, 'the triggered run succeeds');
      assert.equal(done.lastRun.jobId, trig.json.id);

      assert.equal((await call(h.base, '/v1/schedules/berlin', { method: 'DELETE' })).status, 204);
      problemOf(await call(h.base, '/v1/schedules/berlin', { method: 'DELETE' }), 404, 'SCHEDULE_NOT_FOUND');
      problemOf(await call(h.base, '/v1/schedules/berlin'), 404, 'SCHEDULE_NOT_FOUND');
      // The run of a deleted schedule stays.
      assert.equal((await call(h.base, `/v1/jobs/${trig.json.id}`)).json.status, 'succeeded');
    });

    it('the client: every schedule method, and refusals as LonghaulApiError with the code and field', async () => {
      const client = new LonghaulClient({ baseUrl: h.base, apiKey: KEY_A });
      const created = await client.createSchedule({ name: 'client-made', task: 't.quick', cron: '0 0 1 1 *', timezone: 'America/New_York', catchUp: 'runOnce', overlap: false });
      assert.deepEqual([created.catchUp, created.overlap, created.nextRuns[0]?.slice(5)], ['runOnce', false, '01-01T05:00:00.000Z']);
      assert.ok((await client.listSchedules()).some((s) => s.name === 'client-made'));
      assert.equal((await client.getSchedule('client-made')).timezone, 'America/New_York');
      assert.equal((await client.updateSchedule('client-made', { cron: '0 0 2 1 *' })).nextRuns[0]?.slice(5), '01-02T05:00:00.000Z');
      assert.equal((await client.pauseSchedule('client-made')).paused, true);
      assert.equal((await client.resumeSchedule('client-made')).paused, false);
      const job = await client.triggerSchedule('client-made');
      assert.equal(job.type, 't.quick');
      await client.deleteSchedule('client-made');
      const err = await client.getSchedule('client-made').catch((e: unknown) => e);
      assert.ok(err instanceof LonghaulApiError);
      assert.deepEqual([err.status, err.code], [404, 'SCHEDULE_NOT_FOUND']);
      const invalid = await client.createSchedule({ name: 'y', task: 't.quick', cron: '0 0 * *' }).catch((e: unknown) => e);
      assert.ok(invalid instanceof LonghaulApiError);
      assert.deepEqual([invalid.status, invalid.code, invalid.errors[0]?.path], [422, 'INVALID_SCHEDULE', 'cron']);
    });

    it('a per-second schedule ticks by itself: one run per tick, each with its tick time', async () => {
      assert.equal((await call(h.base, '/v1/schedules', { body: { name: 'every-second', task: 't.quick', cron: '* * * * * *', input: { tick: true } } })).status, 201);
      await until(async () => ((await call(h.base, '/v1/jobs?type=t.quick&limit=100')).json.items.filter((j: { metadata: { schedule?: string } | null }) => j.metadata?.schedule === 'every-second').length >= 3 ? true : undefined), 'three runs', 10_000);
      assert.equal((await call(h.base, '/v1/schedules/every-second/pause', { method: 'POST' })).status, 200);
      const runs = (await call(h.base, '/v1/jobs?type=t.quick&limit=100')).json.items.filter((j: { metadata: { schedule?: string } | null }) => j.metadata?.schedule === 'every-second');
      const ticks = runs.map((j: { metadata: { tick: string } }) => j.metadata.tick);
      assert.equal(new Set(ticks).size, ticks.length, 'one run per tick');
      for (const t of ticks) assert.match(t, /\.000Z$/, 'ticks fall on whole seconds');
    });
  });
}
