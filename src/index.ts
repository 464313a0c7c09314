/**
 * Longhaul's public entry point, `longhaul`: `Longhaul`, `defineTask`, schedules, the errors and
 * the public types. What the library uses inside (the bus class, config defaults, backoff, ids,
 * state rules, log fields) is not exported; the store classes are at `longhaul/stores`. The list
 * is held by test/unit/public-api.test.ts: a change here changes test/unit/public-api.txt in the
 * same commit.
 */
export type { ResultFile, ResultsHandle, UploadInfo, UploadsHandle } from './blobs/handles.js';
export type { JobFilesOptions } from './blobs/job-files.js';
// The bus is reached as `lh.bus`: its types, not the class.
export type { JobBus, JobEventName, JobEvents } from './channel/bus.js';
export type { Channel, ChannelHandlers, Envelope } from './channel/channel.js';
export type { LonghaulConfig } from './config.js';
export type { BackoffPolicy } from './core/backoff.js';
export {
  BatchItemError,
  ChildFailedError,
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
export type { TenantQuota, TenantQuotas } from './core/quotas.js';
export { LOG_REDACT } from './core/log-fields.js';
export type { LonghaulMetrics } from './metrics/metrics.js';
export type { ChildrenCounts, JobSnapshot, Priority, ResultFileLink } from './core/job.js';
export type { JobWait } from './core/workflow.js';
export type { Progress, ProgressUpdate } from './core/progress.js';
export { isTerminal, JOB_STATES, type JobState, TERMINAL_STATES } from './core/states.js';
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
export { generateWebhookSecret } from './webhooks/signing.js';
export { InvalidWebhookError, type WebhookConfigOptions, type WebhookOption, WebhookRefusedError } from './webhooks/service.js';
export { JobAbortedError } from './core/abort.js';
