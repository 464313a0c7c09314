/** The runnable examples the docs quote still run and print what the docs say. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const root = fileURLToPath(new URL('../../', import.meta.url));

describe('examples/workflows.ts (docs/workflows.md)', () => {
  it('runs every workflow of the docs to its documented end', { timeout: 60_000 }, async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'examples/workflows.ts'], { cwd: root, timeout: 55_000 });
    const lines = stdout.split('\n').filter((l) => !l.startsWith('{'));
    assert.deepEqual(lines.filter(Boolean), [
      'report.build: succeeded {"shards":10,"failed":0,"total":4500}',
      'reminder.send: succeeded {"sentTo":"ada@example.com"}',
      'post.publish: succeeded {"published":"p1","approvedBy":"grace"}',
      'video.transcode: succeeded {"output":"talk.mp4","thumbnail":"thumb.jpg"}',
      'order.place: failed {"message":"step \\"ship\\" failed: no courier available","code":"NO_COURIER","retryable":false,"compensated":true}',
      'order.place compensations: release res_1, refund pay_1',
    ]);
  });
});
