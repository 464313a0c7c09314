/** Redis for tests: the server at LONGHAUL_TEST_REDIS_URL (default redis://127.0.0.1:6379), when one answers. */
import { Redis } from 'ioredis';

export const TEST_REDIS_URL = process.env.LONGHAUL_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Whether a Redis answers PING at `url` within about a second. */
export async function redisAnswers(url = TEST_REDIS_URL): Promise<boolean> {
  const r = new Redis(url, { lazyConnect: true, connectTimeout: 1000, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  r.on('error', () => undefined);
  try {
    await r.connect();
    return (await r.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    r.disconnect();
  }
}

/** The reason to give `skip` when no Redis answers, or false when one does. */
export async function skipUnlessRedis(url = TEST_REDIS_URL): Promise<string | false> {
  return (await redisAnswers(url)) ? false : `skipped: Redis did not answer at ${url} (set LONGHAUL_TEST_REDIS_URL)`;
}
