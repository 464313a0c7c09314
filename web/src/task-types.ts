/**
 * The task types the server knows. `GET /v1/task-types` lists them with their input schemas
 * on servers that have it; on older ones the list is derived from what the server has shown:
 * the types of recent jobs and of `/v1/stats` (schemas unknown, the form asks for JSON).
 */
import { api, isMissingRoute } from './api';
import type { JobPage, JobStats, TaskTypeView } from 'longhaul/client';

export interface TaskTypes {
  types: TaskTypeView[];
  /** True when the list came from `/v1/task-types` (complete, with schemas). */
  registered: boolean;
}

let cached: Promise<TaskTypes> | null = null;

export function taskTypes(refresh = false): Promise<TaskTypes> {
  if (!cached || refresh) {
    cached = load().catch((err) => {
      cached = null;
      throw err;
    });
  }
  return cached;
}

async function load(): Promise<TaskTypes> {
  try {
    const list = await api<TaskTypeView[] | { items: TaskTypeView[] }>('/v1/task-types');
    return { types: Array.isArray(list) ? list : list.items, registered: true };
  } catch (err) {
    if (!isMissingRoute(err)) throw err;
  }
  const [stats, recent] = await Promise.all([api<JobStats>('/v1/stats'), api<JobPage>('/v1/jobs?limit=200')]);
  const names = new Set<string>([...Object.keys(stats.durations), ...recent.items.map((j) => j.type)]);
  return { types: [...names].sort().map((type) => ({ type, inputSchema: null, description: null, maxAttempts: null, priority: null, timeoutMs: null, concurrency: null })), registered: false };
}
