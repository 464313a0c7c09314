/** Polls `fn` every 20 ms until it returns a value; an error from `fn` fails at once (unlike the HTTP harness's `until`, which retries through errors). */
export async function pollUntil<T>(fn: () => Promise<T | undefined>, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
