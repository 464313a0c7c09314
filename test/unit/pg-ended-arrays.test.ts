/**
 * Which completions PostgreSQL's worker cycle sends as arrays (store/postgres/transitions.ts
 * endedArrays, migration 18): exactly the success `succeed` builds for the claiming worker, with
 * deleteOnEnd, of a job named once in the batch; everything else stays JSON, ordinals kept.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { uuidv7 } from '../../src/core/ids.js';
import { runningNote, succeed } from '../../src/core/transitions.js';
import { encodeTransitions, endedArrays } from '../../src/store/postgres/transitions.js';
import type { TransitionParams } from '../../src/store/store.js';

const job = (lease = 1) => ({ id: uuidv7(), state: 'running' as const, lease });
const ended = (j = job(), result: unknown = null, at = 1000): TransitionParams => ({ ...succeed(j, 'w1', at, result, 500), deleteOnEnd: true });

describe('endedArrays: retention 0 successes as PostgreSQL arrays', () => {
  it('takes the worker’s own successes, sorted by id, with their ordinals, times and results', () => {
    const [low, high] = [uuidv7(), uuidv7()].sort();
    const a = { id: high as string, state: 'running' as const, lease: 2 };
    const b = { id: low as string, state: 'running' as const, lease: 1 };
    const items = [ended(a, { q: 'say "hi" \\ {x,y}' }, 1001), ended(b, null, 1002)];
    const e = endedArrays(items, 'w1');
    assert.equal(e.count, 2);
    assert.equal(e.ids, `{${b.id},${a.id}}`);
    assert.equal(e.leases, '{1,2}');
    assert.equal(e.ords, '{2,1}');
    assert.equal(e.ats, '{1002,1001}');
    assert.equal(e.expires, '{1502,1501}');
    assert.equal(e.results, '{NULL,"{\\"q\\":\\"say \\\\\\"hi\\\\\\" \\\\\\\\ {x,y}\\"}"}');
    assert.deepEqual(e.skip, [true, true]);
    assert.deepEqual(encodeTransitions(items, e.skip), { json: '[]', rounds: 0 });
  });

  it('leaves as JSON anything else: another worker, no deleteOnEnd, another end, an extra patch field, a job named twice, an id that is no UUID', () => {
    const twice = job();
    const items: TransitionParams[] = [
      { ...ended(), workerId: 'w2' },
      { ...ended(), deleteOnEnd: false },
      { ...ended(), to: 'failed' },
      { ...ended(), reason: 'other' },
      { ...ended(), cancelRequested: false },
      { ...ended(), patch: { ...ended().patch, stalled: false } },
      { ...ended(), patch: { ...ended().patch, finishedAt: 999 } },
      runningNote(twice, 'w1', 999, 'note'),
      ended(twice),
      { ...ended(), id: 'not-a-uuid' },
      ended(),
    ];
    const e = endedArrays(items, 'w1');
    assert.equal(e.count, 1);
    assert.deepEqual(e.skip, [...new Array(10).fill(false), true]);
    assert.equal(e.ords, '{11}');
    const json = JSON.parse(encodeTransitions(items, e.skip).json) as { o: number }[];
    assert.deepEqual(json.map((x) => x.o).sort((x, y) => x - y), [1, 2, 3, 4, 5, 6, 7, 8, 9], 'the others as JSON (the invalid id left out, as before)');
  });

  it('sends nothing as arrays when there is nothing to take', () => {
    const e = endedArrays([], 'w1');
    assert.equal(e.count, 0);
    assert.equal(e.ids, '{}');
    assert.equal(endedArrays([runningNote(job(), 'w1', 1, 'n')], 'w1').count, 0);
  });
});
