/**
 * The job listing's statement (`GET /v1/jobs`, the dashboard's jobs page): newest first, by the
 * filters given, one more row than the page to tell whether another page follows.
 */
import type { ListJobsParams } from '../store.js';
import { decodeJobCursor } from '../job-cursor.js';
import { JOB_SELECT } from './rows.js';

export interface ListJobsStatement {
  /** The prepared statement's name: one per shape of filters (which are present). */
  name: string;
  text: string;
  values: unknown[];
  /** Rows that make the page (the statement reads one more). */
  limit: number;
}

/** The statement for `params` on schema `s` (quoted). */
export function listJobsSql(s: string, params: ListJobsParams): ListJobsStatement {
  const where: string[] = [];
  const values: unknown[] = [];
  let shape = 0;
  const add = (bit: number, sql: (n: number) => string, value: unknown) => {
    shape |= bit;
    values.push(value);
    where.push(sql(values.length));
  };
  if (params.tenant !== undefined) add(1, (n) => `j.tenant = $${n}`, params.tenant);
  if (params.parentId !== undefined) add(16, (n) => `j.parent_id = $${n}`, params.parentId);
  if (params.cursor) add(2, (n) => `j.id < $${n}::uuid`, decodeJobCursor(params.cursor));
  if (params.states && params.states.length > 0) add(4, (n) => `j.state = ANY($${n}::text[])`, params.states);
  if (params.type !== undefined) add(8, (n) => `j.type = $${n}`, params.type);
  // strpos, not LIKE: the text is matched as it is. lower() of ASCII letters only, as SQLite's.
  if (params.text) add(32, (n) => `(strpos(j.id::text, lower($${n}::text)) > 0 OR strpos(lower(j.metadata::text COLLATE "C"), lower($${n}::text COLLATE "C")) > 0)`, params.text);
  const limit = Math.max(1, Math.min(Math.floor(params.limit), 1000));
  values.push(limit + 1);
  const n = values.length;
  const from = `FROM ${s}.jobs j LEFT JOIN ${s}.progress p ON p.job_id = j.id`;
  if (params.tenant === undefined) {
    const text = `SELECT ${JOB_SELECT} ${from} ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY j.id DESC LIMIT $${n}`;
    return { name: `list_${shape}`, text, values, limit };
  }
  // A tenant's jobs by id (jobs_tenant) leave out its running ones (a claim writes no entry
  // there): those are read apart (jobs_running holds only running jobs, few),
  // and the two are merged. A branch the state filter rules out is left out.
  const states = params.states && params.states.length > 0 ? params.states : null;
  const idle = states === null || states.some((st) => st !== 'running');
  const running = states === null || states.includes('running');
  shape |= (idle ? 64 : 0) | (running ? 128 : 0);
  const cond = where.join(' AND ');
  const branches = [
    ...(idle ? [`(SELECT j.id FROM ${s}.jobs j WHERE ${cond} AND j.state <> 'running' ORDER BY j.id DESC LIMIT $${n})`] : []),
    // (OFFSET 0: planned on its own, by its filter, not by the order a LIMIT would want from the primary key.)
    ...(running ? [`(SELECT r.id FROM (SELECT j.id FROM ${s}.jobs j WHERE ${cond} AND j.state = 'running' OFFSET 0) r ORDER BY r.id DESC LIMIT $${n})`] : []),
  ];
  const text = `SELECT ${JOB_SELECT} FROM (SELECT u.id FROM (${branches.join(' UNION ALL ')}) u ORDER BY u.id DESC LIMIT $${n}) page
    JOIN ${s}.jobs j ON j.id = page.id LEFT JOIN ${s}.progress p ON p.job_id = j.id ORDER BY j.id DESC`;
  return { name: `list_${shape}`, text, values, limit };
}
