/**
 * The task types an instance knows (its tasks module, and tasks registered since), with what a
 * form needs to submit one: the JSON Schema of its input (null when it has none, or only a
 * Standard Schema without a JSON Schema), its description and defaults. These are exactly the
 * types a submission is accepted for: a server started without a tasks module knows none, and
 * refuses every submission as an unknown type (422).
 */
import type { TaskTypeView } from '../core/api-types.js';
import type { Task } from '../task-api/define.js';
import { inputJsonSchema } from '../task-api/schema.js';

export function taskTypes(tasks: ReadonlyMap<string, Task>): TaskTypeView[] {
  return [...tasks.values()]
    .map((t) => ({
      type: t.type,
      inputSchema: inputJsonSchema(t.input),
      description: t.description ?? null,
      maxAttempts: t.maxAttempts ?? null,
      priority: t.priority ?? null,
      timeoutMs: t.timeoutMs ?? null,
      concurrency: t.concurrency ?? null,
    }))
    .sort((a, b) => (a.type < b.type ? -1 : a.type > b.type ? 1 : 0));
}
