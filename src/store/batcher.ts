/**
 * Group commit: calls that arrive within one event-loop turn are written together in one
 * store call (one transaction), and each caller resolves only after that write committed.
 * Under load this turns N commits into one; alone, a call waits one `setImmediate`.
 *
 * One caller's data must not fail the others: when the store refuses a batch of several for
 * anything but a passing outage (`isTransientStoreError`), each item is written again alone,
 * so only the items refused on their own reject.
 */
import { isTransientStoreError } from '../core/store-errors.js';

export class Batcher<I, O> {
  private queue: { item: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;
  private flushing = false;

  constructor(
    private readonly write: (items: I[]) => Promise<O[]>,
    private readonly maxBatch = 500,
  ) {}

  add(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.flushing) return;
    this.scheduled = true;
    setImmediate(() => void this.flush());
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    this.flushing = true;
    const batch = this.queue.splice(0, this.maxBatch);
    try {
      const out = await this.write(batch.map((b) => b.item));
      batch.forEach((b, i) => {
        b.resolve(out[i] as O);
      });
    } catch (err) {
      if (batch.length > 1 && !isTransientStoreError(err)) {
        for (const b of batch) {
          try {
            const [out] = await this.write([b.item]);
            b.resolve(out as O);
          } catch (own) {
            b.reject(own);
          }
        }
      } else {
        for (const b of batch) b.reject(err);
      }
    } finally {
      this.flushing = false;
      if (this.queue.length > 0) this.schedule();
    }
  }
}
