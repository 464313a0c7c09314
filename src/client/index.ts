/**
 * `longhaul/client`: the typed SDK of the Longhaul HTTP API for Node and browsers (fetch only,
 * no Node-only modules).
 */
export type { JobError } from '../core/errors.js';
export type { JobSnapshot, Priority } from '../core/job.js';
export type { Progress } from '../core/progress.js';
export { isTerminal, JOB_STATES, type JobState, TERMINAL_STATES } from '../core/states.js';
export {
  type FetchLike,
  type GetResult,
  type JobPage,
  type JobStats,
  type JobTransition,
  type ListFilters,
  LonghaulClient,
  type LonghaulClientOptions,
  type PollingOptions,
  type RequestOptions,
  type StreamOptions,
  type StreamToken,
  type StreamTokenRequest,
  type StreamTuning,
  type SubmitOptions,
  type SubmitResult,
  snapshotKey,
  type WaitOptions,
} from './client.js';
export { type FieldError, LonghaulApiError, LonghaulTimeoutError, parseRetryAfter } from './errors.js';
export { parseSse, readSse, type SseComment, type SseEvent, type SseItem, SseParser, type SseRetry } from './sse.js';
