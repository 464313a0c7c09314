/**
 * OpenTelemetry tracing through `@opentelemetry/api` only: when the application registers an SDK
 * (a TracerProvider), Longhaul's spans go to it; otherwise every call here is a no-op and costs
 * next to nothing (`tracingEnabled()` is false, nothing is read or written for traces).
 *
 * A submit runs in a `longhaul.submit` span (a child of the active span: the application's HTTP
 * span, its own span, or the caller's W3C `traceparent` header on the HTTP API). Its context is
 * stored with the job as a `traceparent` string; each attempt's span (`longhaul.attempt`, see
 * attempt-spans.ts) is its child, in whatever process the worker runs, so one trace runs from
 * the request to the end of the job. The string is written and read here, not by a propagator,
 * so it works whichever propagators the application configured.
 */
import {
  type Context,
  context,
  isSpanContextValid,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';

export const TRACER_NAME = 'longhaul';

/** True when an SDK is registered (a tracer provider other than the API's no-op one). */
export function tracingEnabled(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegateTracer(TRACER_NAME) !== undefined;
}

export function tracer(): Tracer {
  return trace.getTracer(TRACER_NAME);
}

/** `00-<trace id>-<span id>-<flags>` of a span context. */
export function formatTraceParent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$/;

/** The span context a W3C `traceparent` names, or null when it is malformed or invalid. */
export function parseTraceParent(value: string | null | undefined): SpanContext | null {
  if (typeof value !== 'string') return null;
  const m = TRACEPARENT.exec(value.trim().toLowerCase());
  if (!m || m[1] === 'ff' || (m[1] === '00' && value.trim().length !== 55)) return null;
  const sc: SpanContext = { traceId: m[2] as string, spanId: m[3] as string, traceFlags: Number.parseInt(m[4] as string, 16), isRemote: true };
  return isSpanContextValid(sc) ? sc : null;
}

/** The traceparent of the active span, or null (no SDK, or no span). */
export function activeTraceParent(): string | null {
  if (!tracingEnabled()) return null;
  const sc = trace.getSpanContext(context.active());
  return sc && isSpanContextValid(sc) ? formatTraceParent(sc) : null;
}

/** A context whose parent is the span a traceparent names (the root context when there is none). */
export function contextOf(traceParent: string | null | undefined): Context {
  const sc = parseTraceParent(traceParent);
  return sc ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

/**
 * Runs `fn` with the caller's `traceparent` header as the parent, unless a span is already active
 * (the application's HTTP instrumentation made one). Without an SDK, just runs `fn`.
 */
export function withRemoteParent<T>(header: string | string[] | undefined, fn: () => T): T {
  if (!tracingEnabled() || trace.getSpan(context.active()) !== undefined) return fn();
  const parent = parseTraceParent(Array.isArray(header) ? header[0] : header);
  return parent ? context.with(trace.setSpanContext(context.active(), parent), fn) : fn();
}

/** Runs a submit in a `longhaul.submit` span; the jobs it makes store this span's context. */
export function inSubmitSpan<T>(type: string, fn: () => Promise<T>, jobIdOf: (out: T) => string | undefined): Promise<T> {
  return tracer().startActiveSpan(`longhaul.submit ${type}`, { kind: SpanKind.PRODUCER, attributes: { 'longhaul.task_type': type } }, (span: Span) =>
    fn().then(
      (out) => {
        const id = jobIdOf(out);
        if (id !== undefined) span.setAttribute('longhaul.job_id', id);
        span.end();
        return out;
      },
      (err: unknown) => {
        span.recordException(err as Error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
        span.end();
        throw err;
      },
    ),
  );
}
