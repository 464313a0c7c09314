/**
 * The worker's attempt spans: `longhaul.attempt <type>`, a child of the job's stored submit
 * context (trace.ts), from the claim to the handler's end, active while the handler runs (so a
 * handler's own spans and the jobs it spawns join the trace). Only when an SDK is registered:
 * then the claimed jobs' contexts are read in one store call per claim batch.
 */
import { context, type Context, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { JobRecord } from '../core/job.js';
import type { JobState } from '../core/states.js';
import type { JobQueueStore } from '../store/store.js';
import { contextOf, tracer, tracingEnabled } from './trace.js';

/** An attempt's span and the context its handler runs in. */
export interface AttemptSpan {
  span: Span;
  ctx: Context;
}

export class AttemptSpans {
  /** Contexts being read for claimed jobs, by job id (one store call per claim batch). */
  private readonly pending = new Map<string, Promise<string | undefined>>();
  private batch: string[] = [];
  private batchRead: Promise<Map<string, string>> | null = null;

  constructor(private readonly store: Pick<JobQueueStore, 'traceParents'>) {}

  /** A job was claimed: starts reading its stored context (batched with the jobs claimed with it). */
  claimed(job: JobRecord): void {
    if (!tracingEnabled()) return;
    if (this.batchRead === null) {
      const ids: string[] = [];
      this.batch = ids;
      this.batchRead = new Promise<void>((resolve) => queueMicrotask(() => resolve())).then(() => {
        this.batchRead = null;
        return this.store.traceParents({ ids }).catch(() => new Map<string, string>());
      });
    }
    this.batch.push(job.id);
    const read = this.batchRead;
    this.pending.set(
      job.id,
      read.then((m) => m.get(job.id)),
    );
  }

  /** True when the job's context is being read (tracing was on at its claim). */
  reading(id: string): boolean {
    return this.pending.has(id);
  }

  /** The attempt's span, started at the claim, and the context its handler runs in; null when tracing is off. */
  async start(job: JobRecord): Promise<AttemptSpan | null> {
    const read = this.pending.get(job.id);
    if (read === undefined) return null;
    this.pending.delete(job.id);
    const parent = contextOf(await read);
    const span = tracer().startSpan(
      `longhaul.attempt ${job.type}`,
      {
        kind: SpanKind.CONSUMER,
        ...(job.startedAt === null ? {} : { startTime: job.startedAt }),
        attributes: { 'longhaul.job_id': job.id, 'longhaul.task_type': job.type, 'longhaul.attempt': job.attempts, 'longhaul.tenant': job.tenant },
      },
      parent,
    );
    return { span, ctx: trace.setSpan(parent, span) };
  }

  /** Runs the handler inside the attempt's span. */
  run<T>(started: { ctx: Context } | null, fn: () => T): T {
    return started ? context.with(started.ctx, fn) : fn();
  }

  /** Ends the attempt's span with where the job goes (`to`) and the handler's error, if any. */
  end(started: { span: Span } | null, to: JobState | 'lease-lost' | 'suspended', error?: unknown): void {
    if (!started) return;
    const { span } = started;
    span.setAttribute('longhaul.outcome', to);
    if (error !== undefined) {
      span.recordException(error instanceof Error ? error : { message: String(error) });
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end();
  }

  /** Forgets a job claimed but never started (handed back). */
  forget(id: string): void {
    this.pending.delete(id);
  }
}
