/** Longhaul's public entry point. */
export type { ResultFile, ResultsHandle, UploadInfo, UploadsHandle } from './blobs/handles.js';
export type { JobFilesOptions } from './blobs/job-files.js';
export { JobBus, type JobEventName, type JobEvents } from './channel/bus.js';
export type { Channel, ChannelHandlers, Envelope } from './channel/channel.js';
export { DEFAULTS, type LonghaulConfig, resolveConfig } from './config.js';
export { type BackoffPolicy, backoffDelay, DEFAULT_BACKOFF } from './core/backoff.js';
export {
  BatchItemError,
  ChildFailedError,
  classifyError,
  FatalError,
  IdempotencyConflictError,
  InputValidationError,
  InvalidOptionsError,
  InvalidScheduleError,
  JobEndedError,
  type JobError,
  JobNotFoundError,
  JobStateConflictError,
  LeaseLostError,
  LonghaulError,
  QueueFullError,
  RetryableError,
  ScheduleDeclaredError,
  ScheduleExistsError,
  ScheduleNotFoundError,
  TenantQuotaExceededError,
  UnknownTaskError,
  UnstorableValueError,
  WaitTimeoutError,
} from './core/errors.js';
export { uuidv7 } from './core/ids.js';
export { quotaFor, type TenantQuota, type TenantQuotas } from './core/quotas.js';
export { jobLogFields, LOG_REDACT, redactUrl } from './core/log-fields.js';
export type { LonghaulMetrics } from './metrics/metrics.js';
export type { ChildrenCounts, JobSnapshot, Priority, ResultFileLink } from './core/job.js';
export type { JobWait } from './core/workflow.js';
export type { Progress, ProgressUpdate } from './core/progress.js';
export { canTransition, isTerminal, JOB_STATES, type JobState, TERMINAL_STATES } from './core/states.js';
export { Longhaul, type OpenOptions, type StartWorkerOptions, type SubmitOptions, type WebhookDelivery, type WorkerHandle, type WorkerHealth } from './longhaul.js';
export type { DeadLetterJobPage, DeadLetterPageOptions, DeadLetterSelection } from './longhaul.js';
export type { AttemptPage, DeadLetterGroupView, DeadLetterOutcome, JobAttempt, TaskTypeView } from './core/api-types.js';
// The store classes are at `longhaul/stores` (src/stores.ts): exported here, they would load
// `pg` for every user. Their types stay here.
export type { PostgresStore } from './store/postgres/postgres-store.js';
export type { SqliteStore } from './store/sqlite/sqlite-store.js';
export type { MigrationResult, SqlTransaction, Store } from './store/store.js';
export {
  type ChildOutcome,
  type ChildrenSummary,
  type ChildrenView,
  type ChildSpec,
  collectSchedules,
  collectTasks,
  type DeclaredSchedule,
  defineSchedule,
  defineTask,
  type ScheduleDeclaration,
  type FailurePolicy,
  type SagaStep,
  type StageDefinition,
  type Task,
  type TaskContext,
} from './task-api/define.js';
export type { SchedulePatch, ScheduleInput, ScheduleScope, ScheduleView, Schedules, TickReport } from './facade/schedules.js';
export { Suspended } from './workflow/run.js';
export { generateWebhookSecret, webhookSignature } from './webhooks/signing.js';
export { InvalidWebhookError, type WebhookConfigOptions, type WebhookOption, WebhookRefusedError } from './webhooks/service.js';
export { JobAbortedError } from './core/abort.js';
