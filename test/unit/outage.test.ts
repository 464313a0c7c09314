/**
 * The outage log (src/core/outage.ts): a database outage met by one part of a process is one
 * line when it starts, a reminder every 30 s while it lasts, and one line when it ends (with the
 * failures counted and how long it lasted); any other error is a line every time.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OUTAGE_ENDED, OUTAGE_LASTING, OUTAGE_STARTED, Outage } from '../../src/core/outage.js';

const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

describe('Outage', () => {
  it('one line when the database stops answering, none per try, one when it answers again', () => {
    const outage = new Outage('sweeper');
    assert.equal(outage.succeeded(0), null, 'nothing to say while it answers');
    const start = outage.failed(refused(), 1_000, 'sweep failed');
    assert.ok(start);
    assert.equal(start.msg, OUTAGE_STARTED);
    assert.equal(start.level, 'error');
    assert.equal(start.fields.component, 'sweeper');
    assert.equal((start.fields.err as Error).message, 'connect ECONNREFUSED 127.0.0.1:5432');
    assert.ok(outage.down);
    for (let t = 1_100; t < 11_000; t += 100) assert.equal(outage.failed(refused(), t, 'sweep failed'), null, `a failed try at ${t} ms`);
    const end = outage.succeeded(11_000);
    assert.deepEqual(end, { level: 'info', msg: OUTAGE_ENDED, fields: { component: 'sweeper', outage: 'ended', failures: 100, downMs: 10_000 } });
    assert.equal(outage.down, false);
    assert.equal(outage.succeeded(11_100), null);
    assert.equal(outage.failed(refused(), 12_000, 'sweep failed')?.msg, OUTAGE_STARTED, 'the next outage is logged again');
  });

  it('a lasting outage is mentioned again every 30 s, with its failures and duration so far', () => {
    const outage = new Outage('worker loop');
    outage.failed(refused(), 0, 'x');
    const lines = [];
    for (let t = 1_000; t <= 95_000; t += 1_000) {
      const line = outage.failed(refused(), t, 'x');
      if (line) lines.push(line);
    }
    assert.deepEqual(
      lines.map((l) => [l.msg, l.level, l.fields.downMs, l.fields.failures, (l.fields.err as { code: string }).code]),
      [
        [OUTAGE_LASTING, 'warn', 30_000, 31, 'ECONNREFUSED'],
        [OUTAGE_LASTING, 'warn', 60_000, 61, 'ECONNREFUSED'],
        [OUTAGE_LASTING, 'warn', 90_000, 91, 'ECONNREFUSED'],
      ],
    );
  });

  it('an error that is not an outage (a refusal, a bug) is logged every time, as the caller named it', () => {
    const outage = new Outage('sweeper');
    const bug = new TypeError('cannot read properties of undefined');
    const denied = Object.assign(new Error('permission denied for table jobs'), { code: '42501' });
    for (const err of [bug, bug, denied]) {
      assert.deepEqual(outage.failed(err, 0, 'sweep failed'), { level: 'error', msg: 'sweep failed', fields: { component: 'sweeper', err } });
    }
    assert.equal(outage.down, false);
    assert.equal(outage.succeeded(1), null);
  });
});
