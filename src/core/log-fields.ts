/**
 * What log lines carry, and what they never carry. Every line about a job has the job's id, task
 * type, attempt and tenant (`jobLogFields`); URLs are logged without the query values that
 * authorise (`redactUrl`: signed URLs' `sig`, stream tokens); and the logger Longhaul makes
 * censors fields named like secrets (`REDACT_PATHS`, pino's redact). Pure: no I/O.
 */

/** The job fields every log line about a job carries (`attempt`: attempts started, 1-based while running). */
export interface JobLogFields {
  jobId: string;
  type: string;
  attempt: number;
  tenant: string;
}

export function jobLogFields(job: { id: string; type: string; attempts: number; tenant: string }): JobLogFields {
  return { jobId: job.id, type: job.type, attempt: job.attempts, tenant: job.tenant };
}

/** Query parameters whose values authorise a request: a signed URL's signature, a stream token. */
const SECRET_PARAMS = /([?&](?:sig|token|access_token|api_key|apikey|key|secret)=)[^&#]*/gi;

/** The URL (or path with a query) with authorising query values replaced by `[redacted]`. */
export function redactUrl(url: string): string {
  return url.replace(SECRET_PARAMS, '$1[redacted]');
}

/** Fields pino censors wherever a log line has them (defence in depth: code never logs them on purpose). */
export const REDACT_PATHS: readonly string[] = [
  'secret',
  '*.secret',
  'webhook.secret',
  '*.webhook.secret',
  'apiKey',
  '*.apiKey',
  'token',
  '*.token',
  'authorization',
  'headers.authorization',
  'req.headers.authorization',
  'request.headers.authorization',
  'headers.cookie',
  'req.headers.cookie',
  'urlSigningSecret',
  '*.urlSigningSecret',
  'secretsKey',
  '*.secretsKey',
];

/** pino's `redact` option for the loggers Longhaul makes. */
export const LOG_REDACT = { paths: [...REDACT_PATHS], censor: '[redacted]' };
