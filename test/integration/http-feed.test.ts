/**
 * What docs/api.md lets a client of the tenant-wide feed (`GET /v1/events`) rely on: a frame
 * for every job that changes, each job's terminal state once it ends, and a job's `id`s that
 * never go down. It does not promise a frame per transition (changes are coalesced); the
 * transition log has every one.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { JobSnapshot } from '../../src/core/job.js';
import { call, type Harness, KEY_A, startHarness, submit, TERMINAL, until, untilJob } from '../support/http-harness.js';

interface Frame {
  id: number;
  event: string;
  job: JobSnapshot;
}

/** Reads an SSE response into frames until closed. */
async function openFeed(url: string, headers: Record<string, string>): Promise<{ frames: Frame[]; close: () => void }> {
  const ctl = new AbortController();
  const res = await fetch(url, { headers, signal: ctl.signal });
  assert.equal(res.status, 200);
  const frames: Frame[] = [];
  const body = res.body;
  assert.ok(body);
  void (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of body) {
        buffer += decoder.decode(chunk as Uint8Array, { stream: true });
        for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const field = (name: string) =>
            block
              .split('\n')
              .find((l) => l.startsWith(`${name}: `))
              ?.slice(name.length + 2);
          const data = field('data');
          if (data !== undefined) frames.push({ id: Number(field('id')), event: String(field('event')), job: JSON.parse(data) as JobSnapshot });
        }
      }
    } catch {
      // closed
    }
  })();
  return { frames, close: () => ctl.abort() };
}

describe('GET /v1/events: what a client may rely on', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.close();
  });

  it("every job that changes gets frames, the last one its terminal state; a job's ids never go down", async () => {
    const feed = await openFeed(`${h.base}/v1/events`, { authorization: `Bearer ${KEY_A}` });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 30; i++) ids.push((await submit(h.base, 't.quick', { i })).id);
      for (let i = 0; i < 3; i++) ids.push((await submit(h.base, 't.steps', { steps: 3, stepMs: 20 })).id);
      for (let i = 0; i < 2; i++) {
        const later = await submit(h.base, 't.quick', { later: i }, { delayMs: 600_000 });
        assert.equal((await call(h.base, `/v1/jobs/${later.id}/cancel`, { method: 'POST' })).status, 202);
        ids.push(later.id);
      }
      const ends = new Map<string, string>();
      for (const id of ids) ends.set(id, (await untilJob(h.lh, id, (s) => TERMINAL.has(s.status), 'the job to end')).status);
      await until(() => ids.every((id) => feed.frames.some((f) => f.job.id === id && f.job.status === ends.get(id))), 'a terminal frame for every job');
      for (const id of ids) {
        const mine = feed.frames.filter((f) => f.job.id === id);
        assert.equal(mine.at(-1)?.job.status, ends.get(id), `${id}: the last frame is the terminal state`);
        assert.equal(mine.at(-1)?.event, 'status');
        for (let i = 1; i < mine.length; i++) assert.ok((mine[i] as Frame).id >= (mine[i - 1] as Frame).id, `${id}: ids never go down`);
        // Every state the job went through is in its transition log, ending in the same state.
        const log = (await call(h.base, `/v1/jobs/${id}/transitions`)).json.items as { to: string }[];
        assert.equal(log.at(-1)?.to, ends.get(id));
      }
    } finally {
      feed.close();
    }
  });
});
