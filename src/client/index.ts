/**
 * `longhaul/client`: the typed SDK of the Longhaul HTTP API for Node and browsers (fetch only,
 * no Node-only modules).
 */
export type { JobStats, JobTransition, ScheduleInput, SchedulePatch, ScheduleView, SnapshotPage as JobPage, StreamToken } from '../core/api-types.js';
export type { FieldIssue as FieldError, JobError } from '../core/errors.js';
export type { JobSnapshot, Priority } from '../core/job.js';
export type { Progress } from '../core/progress.js';
export { isTerminal, JOB_STATES, type JobState, TERMINAL_STATES } from '../core/states.js';
export { LonghaulClient, snapshotKey } from './client.js';
export type {
  FetchLike,
  GetResult,
  ListFilters,
  LonghaulClientOptions,
  PollingOptions,
  PurgeRequest,
  PurgeResponse,
  RequestOptions,
  StreamOptions,
  StreamTokenRequest,
  StreamTuning,
  SubmitOptions,
  SubmitResult,
  WaitOptions,
} from './options.js';
export type { BatchJob, BatchOptions, BatchResult, SignalResult } from './requests.js';
export { LonghaulApiError, LonghaulTimeoutError, parseRetryAfter, TenantQuotaExceededApiError } from './errors.js';
export { parseSse, readSse, type SseComment, type SseEvent, type SseItem, SseParser, type SseRetry } from './sse.js';
