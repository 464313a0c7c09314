/**
 * Per-key rate limiting with the latest value winning: the first value of a key goes out at
 * once, later ones at most once per interval (the newest held back is sent when the interval
 * ends, so the last value is never lost). Used for progress, which handlers may report far
 * faster than other processes need it.
 */

interface Slot<T> {
  timer: NodeJS.Timeout;
  /** The newest value not yet sent, if any. */
  held: T | undefined;
}

export class Coalescer<T> {
  private readonly slots = new Map<string, Slot<T>>();

  constructor(
    private readonly intervalMs: number,
    private readonly send: (value: T) => void,
  ) {
    if (!(intervalMs >= 0)) throw new TypeError('intervalMs must be a non-negative number');
  }

  /** Keys currently inside their interval (tests, metrics). */
  get size(): number {
    return this.slots.size;
  }

  offer(key: string, value: T): void {
    const slot = this.slots.get(key);
    if (slot) {
      slot.held = value;
      return;
    }
    this.arm(key);
    this.send(value);
  }

  /** Sends the value held for `key` now (e.g. before a state change of the same job). */
  flush(key: string): void {
    const slot = this.slots.get(key);
    if (slot?.held === undefined) return;
    const v = slot.held;
    slot.held = undefined;
    this.send(v);
  }

  /** Sends every held value and forgets all keys. */
  flushAll(): void {
    const slots = [...this.slots.values()];
    this.slots.clear();
    for (const slot of slots) {
      clearTimeout(slot.timer);
      if (slot.held !== undefined) this.send(slot.held);
    }
  }

  private arm(key: string): void {
    const timer = setTimeout(() => {
      const slot = this.slots.get(key);
      if (!slot) return;
      if (slot.held === undefined) {
        this.slots.delete(key);
        return;
      }
      const v = slot.held;
      this.arm(key);
      this.send(v);
    }, this.intervalMs);
    timer.unref?.();
    this.slots.set(key, { timer, held: undefined });
  }
}
