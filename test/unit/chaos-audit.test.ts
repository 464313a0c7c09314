/**
 * The chaos run's judgements (bench/lib/chaos/audit.ts) on hand-made ledgers and transition
 * logs: an effect repeated after a kill between it and its checkpoint is allowed, one repeated
 * after its completion was recorded is not; a saga must compensate exactly its completed steps,
 * in reverse; a parent's counts must match its children. (The chaos run itself:
 * test/e2e/chaos.test.ts.) The first case is a saga seen in a chaos run: step s1 applied twice,
 * never saved, its worker killed on every attempt.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { judgeDuplicates, judgeParent, judgeSaga, KILLED, LEASE_LOST, lostSignals, SAVE_FAILED, type Snap, type Transition, ZOMBIE } from '../../bench/lib/chaos/audit.js';
import type { EffectRow } from '../fixtures/effects.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(T0 + ms).toISOString();

function tr(from: string | null, to: string, ms: number, reason: string, attempt: number, pid?: number): Transition {
  return { from, to, at: at(ms), reason, attempt, workerId: pid === undefined ? null : `host:${pid}:abcd1234` };
}

let seq = 0;
function fx(kind: string, attempt: number, pid: number, ms: number): EffectRow {
  return { seq: ++seq, jobId: 'j', attempt, kind, step: null, data: null, pid, at: T0 + ms };
}

function snap(type: string, status: string, extra: Partial<Snap> = {}): Snap {
  return { id: 'j', type, status, input: {}, result: null, error: null, attempts: 1, parentId: null, children: null, startedAt: null, finishedAt: null, ...extra };
}

/** A job claimed by pid 1 (attempt 1), reaped, claimed by pid 2 (attempt 2), which ends it as `end`. */
function twoRuns(end: { to: string; reason: string }, reapReason = 'heartbeat lost; requeued'): Transition[] {
  return [
    tr(null, 'queued', 0, 'submitted', 0),
    tr('queued', 'running', 10, 'claimed', 1, 1),
    tr('running', 'retrying', 3000, reapReason, 1, 1),
    tr('retrying', 'queued', 3001, 'due', 1),
    tr('queued', 'running', 3010, 'claimed', 2, 2),
    tr('running', end.to, 3500, end.reason, 2, 2),
  ];
}

describe('chaos audit: repeated effects', () => {
  it('an effect repeated after its worker was killed before the outcome is allowed, and says so', () => {
    const effects = [fx('effect', 1, 1, 100), fx('effect', 2, 2, 3100)];
    const dups = judgeDuplicates({ id: 'j', type: 'chaos.plain' }, effects, twoRuns({ to: 'succeeded', reason: 'completed' }), new Map([[1, T0 + 200]]));
    assert.deepEqual(
      dups.map((d) => [d.unit, d.explained, d.why]),
      [['effect', true, KILLED]],
    );
  });

  it('without a kill of its process, the reaped run is a lease lost while the worker lived; after the reap, a zombie', () => {
    const log = twoRuns({ to: 'succeeded', reason: 'completed' });
    const alive = judgeDuplicates({ id: 'j', type: 'chaos.plain' }, [fx('effect', 1, 1, 100), fx('effect', 2, 2, 3100)], log, new Map());
    assert.equal(alive[0]?.why, LEASE_LOST);
    // Its process killed later, after the reap, does not make it a kill.
    const killedLater = judgeDuplicates({ id: 'j', type: 'chaos.plain' }, [fx('effect', 1, 1, 100), fx('effect', 2, 2, 3100)], log, new Map([[1, T0 + 5000]]));
    assert.equal(killedLater[0]?.why, LEASE_LOST);
    const late = judgeDuplicates({ id: 'j', type: 'chaos.plain' }, [fx('effect', 1, 1, 3200), fx('effect', 2, 2, 3100)], log, new Map());
    assert.equal(late[0]?.why, ZOMBIE);
    assert.equal(late[0]?.explained, true);
  });

  it('an effect repeated after a run that ended with an outcome is not allowed', () => {
    // Attempt 1 failed (retry scheduled): its outcome was written after the effect, yet the effect ran again.
    const log = twoRuns({ to: 'succeeded', reason: 'completed' }, 'retry scheduled');
    const dups = judgeDuplicates({ id: 'j', type: 'chaos.plain' }, [fx('effect', 1, 1, 100), fx('effect', 2, 2, 3100)], log, new Map([[1, T0 + 200]]));
    assert.equal(dups[0]?.explained, false);
    assert.match(dups[0]?.why ?? '', /ended running → retrying \(retry scheduled\)/);
  });

  it('after a failed attempt, allowed only when the failure was the database out of reach (the checkpoint write gave up)', () => {
    const log = twoRuns({ to: 'succeeded', reason: 'completed' }, 'retry scheduled');
    const effects = [fx('step:s4', 1, 1, 100), fx('step:s4', 2, 2, 3100)];
    const outage = judgeDuplicates({ id: 'j', type: 'chaos.saga' }, effects, log, new Map(), new Map([[1, 'ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:5432']]));
    assert.deepEqual(
      outage.map((d) => [d.explained, d.why]),
      [[true, SAVE_FAILED]],
    );
    const handler = judgeDuplicates({ id: 'j', type: 'chaos.saga' }, effects, log, new Map(), new Map([[1, 'CHAOS_STEP: step s4 fails on purpose']]));
    assert.equal(handler[0]?.explained, false);
    assert.match(handler[0]?.why ?? '', /CHAOS_STEP/);
  });

  it('a stage repeated although the next stage began in the same run (its completion was saved) is not allowed', () => {
    const effects = [fx('stage:one', 1, 1, 100), fx('start:stage:two', 1, 1, 150), fx('stage:one', 2, 2, 3100), fx('stage:two', 2, 2, 3200), fx('stage:three', 2, 2, 3300)];
    const dups = judgeDuplicates({ id: 'j', type: 'chaos.pipeline' }, effects, twoRuns({ to: 'succeeded', reason: 'completed' }), new Map([[1, T0 + 200]]));
    assert.equal(dups.length, 1);
    assert.equal(dups[0]?.explained, false);
    assert.match(dups[0]?.why ?? '', /later unit began after it in the same run \(start:stage:two\)/);
  });

  it('a unit run twice in one run is not allowed', () => {
    const log = twoRuns({ to: 'succeeded', reason: 'completed' });
    const dups = judgeDuplicates({ id: 'j', type: 'chaos.plain' }, [fx('effect', 2, 2, 3100), fx('effect', 2, 2, 3200)], log, new Map());
    assert.equal(dups[0]?.explained, false);
    assert.match(dups[0]?.why ?? '', /twice in one run/);
  });

  it('a unit repeated after a suspension (the run ended running → waiting) is not allowed', () => {
    const log = [
      tr(null, 'queued', 0, 'submitted', 0),
      tr('queued', 'running', 10, 'claimed', 1, 1),
      tr('running', 'waiting', 200, 'sleeping until later', 1, 1),
      tr('waiting', 'queued', 1200, 'wait over', 1),
      tr('queued', 'running', 1210, 'claimed', 1, 2),
      tr('running', 'succeeded', 1400, 'completed', 1, 2),
    ];
    const dups = judgeDuplicates({ id: 'j', type: 'chaos.sleeper' }, [fx('before', 1, 1, 100), fx('before', 1, 2, 1250), fx('after', 1, 2, 1300)], log, new Map());
    assert.equal(dups[0]?.explained, false);
    assert.match(dups[0]?.why ?? '', /running → waiting/);
  });
});

describe('chaos audit: sagas', () => {
  const killedThrice = [
    tr(null, 'queued', 0, 'submitted', 0),
    tr('queued', 'running', 10, 'claimed', 1, 1),
    tr('running', 'retrying', 3000, 'heartbeat lost; requeued', 1, 1),
    tr('retrying', 'queued', 3001, 'due', 1),
    tr('queued', 'running', 3010, 'claimed', 2, 2),
    tr('running', 'retrying', 6000, 'heartbeat lost; requeued', 2, 2),
    tr('retrying', 'queued', 6001, 'due', 2),
    tr('queued', 'running', 6010, 'claimed', 3, 3),
    tr('running', 'failed', 9000, 'heartbeat lost; attempts exhausted', 3, 3),
  ];

  it('a step applied but never saved, its worker killed on every attempt: nothing to compensate, the step counted as partial', () => {
    const effects = [fx('start:step:s1', 1, 1, 20), fx('step:s1', 1, 1, 300), fx('start:step:s1', 2, 2, 3020), fx('step:s1', 2, 2, 3300), fx('start:step:s1', 3, 3, 6020)];
    const v = judgeSaga(snap('chaos.saga', 'failed', { error: { code: 'HEARTBEAT_TIMEOUT' } }), effects, killedThrice);
    assert.deepEqual(v, { problem: null, partial: ['s1'] });
  });

  it('completed steps left undone when the worker dies on the last attempt are a violation', () => {
    // s1 and s2 saved (s3 began), the worker killed in s3 on the last attempt, no compensation.
    const effects = [fx('step:s1', 1, 1, 100), fx('start:step:s2', 1, 1, 150), fx('step:s2', 1, 1, 200), fx('start:step:s3', 3, 3, 6020)];
    const v = judgeSaga(snap('chaos.saga', 'failed', { error: { code: 'HEARTBEAT_TIMEOUT' } }), effects, killedThrice);
    assert.match(v.problem ?? '', /failed without compensating its completed steps s1, s2/);
  });

  it('compensations must cover the completed steps in reverse order; a repeat after a kill counts once', () => {
    const log = [tr(null, 'queued', 0, 'submitted', 0), tr('queued', 'running', 10, 'claimed', 1, 1), tr('running', 'failed', 900, 'fatal', 1, 1)];
    const forward = [fx('step:s1', 1, 1, 100), fx('start:step:s2', 1, 1, 150), fx('step:s2', 1, 1, 200), fx('start:step:s3', 1, 1, 300)];
    const failed = snap('chaos.saga', 'failed', { input: { failAt: 's3' }, error: { code: 'CHAOS_STEP', compensated: true } });
    const good = judgeSaga(failed, [...forward, fx('comp:s2', 1, 1, 400), fx('comp:s2', 1, 1, 450), fx('comp:s1', 1, 1, 500)], log);
    assert.deepEqual(good, { problem: null, partial: [] });
    const reversed = judgeSaga(failed, [...forward, fx('comp:s1', 1, 1, 400), fx('comp:s2', 1, 1, 500)], log);
    assert.match(reversed.problem ?? '', /out of reverse order: s1, s2/);
    const short = judgeSaga(failed, [...forward, fx('comp:s2', 1, 1, 400)], log);
    assert.match(short.problem ?? '', /completed steps not compensated: s1/);
    const extra = judgeSaga(failed, [...forward, fx('comp:s3', 1, 1, 350), fx('comp:s2', 1, 1, 400), fx('comp:s1', 1, 1, 500)], log);
    assert.match(extra.problem ?? '', /compensated steps that never ran: s3/);
  });

  it('a succeeded saga compensates nothing', () => {
    const log = [tr('queued', 'running', 10, 'claimed', 1, 1), tr('running', 'succeeded', 900, 'completed', 1, 1)];
    assert.match(judgeSaga(snap('chaos.saga', 'succeeded'), [fx('step:s1', 1, 1, 100), fx('comp:s1', 1, 1, 200)], log).problem ?? '', /succeeded but compensated s1/);
  });
});

describe('chaos audit: parents and signals', () => {
  const child = (status: string) => snap('chaos.child', status, { parentId: 'p' });

  it("a parent's snapshot and result must count its children as they ended", () => {
    const children = [child('succeeded'), child('succeeded'), child('failed')];
    const parent = (counts: Record<string, number>, summary: Record<string, number>) =>
      snap('chaos.parent', 'succeeded', { input: { n: 3, policy: 'collect' }, children: { total: 3, byState: counts }, result: { summary: { total: 3, ...summary } } });
    assert.equal(judgeParent(parent({ succeeded: 2, failed: 1 }, { succeeded: 2, failed: 1, cancelled: 0 }), children), null);
    assert.match(judgeParent(parent({ succeeded: 3 }, { succeeded: 2, failed: 1, cancelled: 0 }), children) ?? '', /snapshot counts succeeded 3, its children are failed 1, succeeded 2/);
    assert.match(judgeParent(parent({ succeeded: 2, failed: 1 }, { succeeded: 3, failed: 0, cancelled: 0 }), children) ?? '', /its result counts/);
    assert.match(judgeParent(parent({ succeeded: 2, failed: 1 }, { succeeded: 2, failed: 1, cancelled: 0 }), children.slice(1)) ?? '', /2 children found, 3 spawned/);
  });

  it('an accepted signal whose payload the job did not return is lost; one refused because the job had ended is not', () => {
    const done = snap('chaos.signal', 'succeeded', { result: { approve: { nonce: 'a1' }, ship: { nonce: 's1' } } });
    const sent = (name: string, nonce: string, outcome: 'accepted' | 'refused' = 'accepted') => ({ jobId: 'j', name, nonce, outcome, tries: 1 });
    assert.deepEqual(lostSignals(done, [sent('approve', 'a1'), sent('ship', 's1')]), []);
    assert.equal(lostSignals(done, [sent('approve', 'a2')]).length, 1);
    assert.equal(lostSignals(snap('chaos.signal', 'waiting'), [sent('ship', 's1')]).length, 1);
    assert.deepEqual(lostSignals(snap('chaos.signal', 'failed'), [sent('ship', 's1', 'refused')]), []);
  });
});
