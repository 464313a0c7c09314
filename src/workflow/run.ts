/**
 * One attempt's workflow: the journal it reads and extends, and the waits a handler makes
 * through its ctx (`spawn`, `sleep`, `waitFor`). A wait either finds its condition already met
 * (in the journal, or a signal already sent) and returns, or suspends the job (the store's
 * `suspend`: running → waiting, the worker slot freed) and throws `Suspended` to unwind the
 * handler. When the job is queued again, the handler runs from the top, and every wait it
 * reaches again returns from the journal.
 *
 * Waits are found again by key: the scope they run in (the handler's top level, a stage or a
 * saga step) and their place in it. A handler must therefore reach its waits in the same order
 * on every run (as with any replayed workflow); one that reaches a different kind of wait at a
 * key fails with NONDETERMINISTIC_WORKFLOW instead of taking another wait's outcome.
 */
import type { JobBus } from '../channel/bus.js';
import { ChildFailedError, FatalError, LeaseLostError, WaitTimeoutError } from '../core/errors.js';
import type { JobRecord } from '../core/job.js';
import { signalNameProblem } from '../core/limits.js';
import { type JobState, TERMINAL_STATES } from '../core/states.js';
import { suspend } from '../core/transitions.js';
import { emptyWorkflow, NEVER, readWorkflow, type WaitCondition, type WaitEntry, type WorkflowState } from '../core/workflow.js';
import type { JobQueueStore, NewJob, Store, SuspendResult } from '../store/store.js';
import type { ChildrenSummary, ChildrenView, ChildSpec, FailurePolicy } from '../task-api/children.js';
import { announce } from '../transitions/apply.js';

/** Unwinds a handler whose job was suspended; the worker frees the slot and writes nothing more. */
export class Suspended extends Error {
  constructor(readonly why: string) {
    super(`job suspended: ${why} (the handler runs again when the wait is over; do not catch this)`);
    this.name = 'Suspended';
  }
}

/** What a workflow needs of the worker. */
export interface WorkflowHost {
  store: Store;
  bus: JobBus;
  clock: () => number;
  workerId: string;
  /** Checks a child submission and builds its row (facade/prepare.ts), as a child of `parent`. */
  prepareChild(parent: JobRecord, spec: ChildSpec, now: number): NewJob | Promise<NewJob>;
  /** Cancels the job's open children (fail-fast); resolves to how many. */
  cancelChildren(parentId: string, now: number, reason: string): Promise<number>;
  /** Runs a store write through a short outage (the attempt's retry policy). */
  retry<T>(what: string, write: () => Promise<T>): Promise<T>;
  /** The job was suspended: abort the attempt's signal. */
  onSuspended(): void;
  /** A cancel (or timeout) was recorded for the job: abort the attempt with it. */
  onCancelRequested(reason: string | null): void;
  /** The attempt's signal (a wait does not start once it fired). */
  readonly signal: AbortSignal;
  /** The lease was lost during a workflow write. */
  onLeaseLost(): void;
}

export function summarize(byState: Record<JobState, number>): ChildrenSummary {
  let total = 0;
  for (const n of Object.values(byState)) total += n;
  return { total, byState, succeeded: byState.succeeded + byState.expired, failed: byState.failed, cancelled: byState.cancelled };
}

function openCount(byState: Record<JobState, number>): number {
  let n = 0;
  for (const [state, count] of Object.entries(byState)) if (!TERMINAL_STATES.has(state as JobState)) n += count;
  return n;
}

export class WorkflowRun {
  readonly journal: WorkflowState;
  /** The scope new waits are keyed in ('' for the handler's top level). */
  scope = '';
  private readonly counters = new Map<string, number>();

  constructor(
    private readonly job: JobRecord,
    private readonly host: WorkflowHost,
  ) {
    this.journal = job.workflow ? readWorkflow(job.workflow) : emptyWorkflow();
  }

  /** Runs `fn` with its waits keyed in `scope` (a stage or a saga step). */
  async inScope<T>(scope: string, fn: () => Promise<T>): Promise<T> {
    const outer = this.scope;
    this.scope = scope;
    try {
      return await fn();
    } finally {
      this.scope = outer;
    }
  }

  private nextKey(): string {
    const n = this.counters.get(this.scope) ?? 0;
    this.counters.set(this.scope, n + 1);
    return `${this.scope}#${n}`;
  }

  private entryAt<K extends WaitEntry['kind']>(key: string, kind: K): Extract<WaitEntry, { kind: K }> | undefined {
    const entry = this.journal.waits[key];
    if (entry === undefined) return undefined;
    if (entry.kind !== kind) {
      throw new FatalError(`wait ${key} was a ${entry.kind} on an earlier run and is a ${kind} now: a workflow must reach its waits in the same order on every run`, {
        code: 'NONDETERMINISTIC_WORKFLOW',
      });
    }
    return entry as Extract<WaitEntry, { kind: K }>;
  }

  /** Durable sleep until `until` (ms since the epoch). */
  async sleepUntil(until: number): Promise<void> {
    if (!Number.isFinite(until)) throw new TypeError('sleepUntil needs a valid date');
    const key = this.nextKey();
    const entry = this.entryAt(key, 'sleep') ?? { kind: 'sleep' as const, until };
    if (this.host.clock() >= entry.until) return;
    this.journal.waits[key] = entry;
    await this.suspendOn({ kind: 'sleep' }, entry.until, `sleeping until ${new Date(entry.until).toISOString()}`);
  }

  /** Waits for the signal `name`; resolves to its payload, or throws WaitTimeoutError after `timeoutMs`. */
  async waitFor(name: string, timeoutMs: number | undefined): Promise<unknown> {
    const problem = signalNameProblem(name);
    if (problem) throw new TypeError(`signal name ${problem} (got ${JSON.stringify(name)})`);
    if (timeoutMs !== undefined && (!Number.isFinite(timeoutMs) || timeoutMs < 0)) throw new TypeError('timeoutMs must be a non-negative number');
    const key = this.nextKey();
    let entry = this.entryAt(key, 'signal');
    const now = this.host.clock();
    if (entry) {
      if (entry.name !== name) throw new FatalError(`wait ${key} waited for signal "${entry.name}" on an earlier run and for "${name}" now`, { code: 'NONDETERMINISTIC_WORKFLOW' });
      const consumed = await this.host.retry('signal read', () => this.host.store.consumedSignal({ id: this.job.id, key }));
      if (consumed) return consumed.payload;
      if (entry.deadline !== null && now >= entry.deadline) throw new WaitTimeoutError(name);
    } else {
      entry = { kind: 'signal', name, deadline: timeoutMs === undefined ? null : now + timeoutMs };
      this.journal.waits[key] = entry;
    }
    const r = await this.suspendOn({ kind: 'signal', name, key }, entry.deadline ?? NEVER, `waiting for signal ${name}`);
    return r.kind === 'signalled' ? r.payload : undefined;
  }

  /** Spawns children and waits until they are done (see ChildrenSummary). */
  async spawn(specs: readonly ChildSpec[], policy: FailurePolicy): Promise<ChildrenSummary> {
    if (!Array.isArray(specs)) throw new TypeError('spawn takes an array of children');
    if (policy !== 'fail-fast' && policy !== 'collect') throw new TypeError("failurePolicy must be 'fail-fast' or 'collect'");
    const failFast = policy === 'fail-fast';
    const key = this.nextKey();
    const entry = this.entryAt(key, 'spawn');
    if (entry) return await this.childrenDone(failFast);
    if (specs.length === 0) return summarize(await this.host.store.countChildren({ id: this.job.id }));
    const now = this.host.clock();
    const children: NewJob[] = [];
    for (const spec of specs) {
      const row = this.host.prepareChild(this.job, spec, now);
      children.push(row instanceof Promise ? await row : row);
    }
    this.journal.waits[key] = { kind: 'spawn', count: children.length, failFast };
    await this.suspendOn({ kind: 'children', failFast }, NEVER, `waiting for ${children.length} children`, children);
    throw new Error('unreachable: a children wait always suspends');
  }

  /** Run again after a spawn: the children are done (or one failed, fail-fast), or the job waits again. */
  private async childrenDone(failFast: boolean): Promise<ChildrenSummary> {
    const byState = await this.host.retry('children count', () => this.host.store.countChildren({ id: this.job.id }));
    const summary = summarize(byState);
    if (failFast && summary.failed + summary.cancelled > 0) {
      // The store stopped the open siblings in the write that woke this job (store/fail-fast.ts);
      // this is a backstop for any still open.
      await this.host.cancelChildren(this.job.id, this.host.clock(), 'sibling failed');
      const after = summarize(await this.host.store.countChildren({ id: this.job.id }));
      throw new ChildFailedError(after.failed, after.cancelled);
    }
    if (openCount(byState) === 0) return summary;
    // Queued again before its children were done (a manual retry): wait again.
    await this.suspendOn({ kind: 'children', failFast }, NEVER, 'waiting for children');
    throw new Error('unreachable: a children wait always suspends');
  }

  /** Suspends the job on `wait`; returns only when a signal wait found its signal already sent. */
  private async suspendOn(wait: WaitCondition, runAt: number, reason: string, children?: NewJob[]): Promise<Extract<SuspendResult, { kind: 'signalled' }>> {
    const { store, bus, clock, workerId, signal } = this.host;
    // Cancelled, timed out or stopping: the attempt ends now, it does not wait.
    if (signal.aborted) throw signal.reason;
    const write = suspend(this.job, workerId, clock(), runAt, reason);
    const params = children === undefined ? { write, wait, workflow: this.journal } : { write, wait, workflow: this.journal, children };
    const r = await this.host.retry('suspend', () => store.suspend(params));
    if (r.kind === 'signalled') return r;
    if (r.kind === 'lost') {
      // Refused because a cancel was recorded (by a user, a parent's cascade or a timeout,
      // maybe in another process), or because the lease is gone: end the attempt as such.
      const [status] = await this.host.retry('lease status', () => store.leaseStatus({ items: [{ id: this.job.id, lease: this.job.lease }] }));
      if (status?.ok && status.cancelRequested) {
        this.host.onCancelRequested(status.cancelReason);
        throw signal.reason;
      }
      this.host.onLeaseLost();
      throw new LeaseLostError(this.job.id);
    }
    announce(bus, this.job, write);
    // The children are claimable: wake idle workers (here, and elsewhere through the channel).
    if (children !== undefined && children.length > 0) bus.emit('jobs:promoted', { count: children.length });
    this.host.onSuspended();
    throw new Suspended(reason);
  }

  /** Saves the journal under the lease (a stage's output, a saga step). */
  async save(): Promise<void> {
    const { store, clock } = this.host;
    const ok = await this.host.retry('workflow', () => store.saveWorkflow({ id: this.job.id, lease: this.job.lease, workflow: this.journal, now: clock() }));
    if (!ok) {
      this.host.onLeaseLost();
      throw new LeaseLostError(this.job.id);
    }
  }
}

export function childrenView(store: JobQueueStore & Pick<Store, 'countChildren'>, job: JobRecord): ChildrenView {
  const list: ChildrenView['list'] = async (options = {}) => {
    const limit = Math.min(Math.max(1, options.limit ?? 500), 1000);
    const page = await store.listJobs({
      parentId: job.id,
      limit,
      cursor: options.cursor ?? null,
      ...(options.states ? { states: options.states } : {}),
    });
    return {
      items: page.items.map((c) => ({ id: c.id, type: c.type, status: c.state, input: c.input, result: c.result ?? null, error: c.error })),
      nextCursor: page.nextCursor,
    };
  };
  return {
    total: job.childrenTotal,
    counts: async () => summarize(await store.countChildren({ id: job.id })),
    list,
    async *[Symbol.asyncIterator]() {
      let cursor: string | null = null;
      do {
        const page = await list({ cursor, limit: 500 });
        yield* page.items;
        cursor = page.nextCursor;
      } while (cursor !== null);
    },
  };
}
