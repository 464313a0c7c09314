/**
 * The workflows of docs/workflows.md, runnable: node --import tsx examples/workflows.ts
 * (a temporary SQLite file; each example prints one line). test/integration/examples.test.ts
 * runs it, so the docs' code keeps working.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineTask, FatalError, Longhaul, WaitTimeoutError } from '../src/index.js';

// ---- fan-out / fan-in: a report built from 10 shards ---------------------------------------------
export const reportShard = defineTask({
  type: 'report.shard',
  async run(input) {
    const { shard } = input as { shard: number };
    return { shard, total: shard * 100 }; // the shard's part of the report
  },
});

export const reportBuild = defineTask({
  type: 'report.build',
  async run(input, ctx) {
    const { shards } = input as { shards: number };
    // Suspends this job until every child is terminal; the handler then runs again from the top
    // and spawn returns the children's counts (it does not spawn twice).
    const summary = await ctx.spawn(
      Array.from({ length: shards }, (_, shard) => ({ type: 'report.shard', input: { shard } })),
      { failurePolicy: 'collect' }, // or 'fail-fast' (the default): the first failure cancels the rest
    );
    let total = 0;
    for await (const child of ctx.children) if (child.status === 'succeeded') total += (child.result as { total: number }).total;
    return { shards: summary.total, failed: summary.failed, total };
  },
});

// ---- durable sleep: a reminder a while after sign-up ------------------------------------------------
export const reminder = defineTask({
  type: 'reminder.send',
  async run(input, ctx) {
    const { email } = input as { email: string };
    await ctx.sleep(1_000); // days in real life: the job waits without a worker, across restarts
    return { sentTo: email };
  },
});

// ---- signals: publish after a person approves --------------------------------------------------------
export const publish = defineTask({
  type: 'post.publish',
  async run(input, ctx) {
    const { postId } = input as { postId: string };
    const draft = await ctx.stage('render', () => ({ postId, html: `<h1>${postId}</h1>` })); // runs once
    try {
      const approval = await ctx.waitFor<{ by: string }>('approval', { timeoutMs: 60_000 });
      return { published: draft.postId, approvedBy: approval.by };
    } catch (err) {
      if (err instanceof WaitTimeoutError) return { published: null, reason: 'not approved in time' };
      throw err;
    }
  },
});

// ---- a pipeline: stages with weights, outputs kept, each retried alone --------------------------------
export const transcode = defineTask({
  type: 'video.transcode',
  stages: [
    { name: 'probe', weight: 1, run: (input) => ({ file: (input as { file: string }).file, seconds: 90 }) },
    {
      name: 'encode',
      weight: 8, // most of the job's percent
      maxAttempts: 5, // this stage's own retry budget
      timeoutMs: 10 * 60_000,
      async run(_input, ctx, probe: { file: string; seconds: number }) {
        for (let s = 0; s < probe.seconds; s += 30) ctx.progress((s / probe.seconds) * 100); // the stage's own percent
        return { output: probe.file.replace(/\.mov$/, '.mp4') };
      },
    },
    { name: 'thumbnail', weight: 1, run: (_input, _ctx, encoded: { output: string }) => ({ ...encoded, thumbnail: 'thumb.jpg' }) },
  ],
});

// ---- a saga: undo what was done when a later step fails for good -----------------------------------------
const undone: string[] = [];
export const placeOrder = defineTask({
  type: 'order.place',
  maxAttempts: 1,
  steps: [
    { name: 'charge', run: () => ({ paymentId: 'pay_1' }), compensate: (_i, _ctx, out: { paymentId: string }) => void undone.push(`refund ${out.paymentId}`) },
    { name: 'reserve', run: () => ({ reservationId: 'res_1' }), compensate: (_i, _ctx, out: { reservationId: string }) => void undone.push(`release ${out.reservationId}`) },
    {
      name: 'ship',
      run: () => {
        throw new FatalError('no courier available', { code: 'NO_COURIER' });
      },
    },
  ],
});

export const workflowExamples = [reportShard, reportBuild, reminder, publish, transcode, placeOrder];

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = mkdtempSync(join(tmpdir(), 'longhaul-workflows-example-'));
  const lh = await Longhaul.open({ database: join(dir, 'example.db'), tasks: workflowExamples });
  try {
    await lh.startWorker({ concurrency: 10 });
    const report = await lh.submit('report.build', { shards: 10 });
    const remind = await lh.submit('reminder.send', { email: 'ada@example.com' });
    const post = await lh.submit('post.publish', { postId: 'p1' });
    const video = await lh.submit('video.transcode', { file: 'talk.mov' });
    const order = await lh.submit('order.place', {});

    // The post waits for its approval: send it (HTTP: POST /v1/jobs/{id}/signals/approval).
    for await (const s of lh.watch(post.id)) if (s.status === 'waiting') break;
    await lh.signal(post.id, 'approval', { by: 'grace' });

    for (const job of [report, remind, post, video, order]) {
      const end = await lh.wait(job.id);
      console.log(`${end.type}: ${end.status} ${JSON.stringify(end.status === 'succeeded' ? end.result : end.error)}`);
    }
    console.log(`order.place compensations: ${undone.join(', ')}`);
  } finally {
    await lh.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
