/**
 * The job listing's statement (`GET /v1/jobs`, the dashboard's jobs page): newest first, by the
 * filters given, one more row than the page to tell whether another page follows.
 */
import type { SQLInputValue } from 'node:sqlite';
import type { ListJobsParams } from '../store.js';
import { decodeJobCursor } from '../job-cursor.js';
import { jobJson } from './rows.js';

const JOB_ROW = jobJson('j');

/** The statement for `params`, its arguments, and the rows that make the page (it reads one more). */
export function listJobsSql(params: ListJobsParams): { text: string; args: SQLInputValue[]; limit: number } {
  const where: string[] = [];
  const args: SQLInputValue[] = [];
  if (params.tenant !== undefined) {
    where.push('j.tenant = ?');
    args.push(params.tenant);
  }
  if (params.parentId !== undefined) {
    where.push('j.parent_id = ?');
    args.push(params.parentId);
  }
  if (params.cursor) {
    where.push('j.id < ?');
    args.push(decodeJobCursor(params.cursor));
  }
  if (params.states && params.states.length > 0) {
    where.push('j.state IN (SELECT value FROM json_each(?))');
    args.push(JSON.stringify(params.states));
  }
  if (params.type !== undefined) {
    where.push('j.type = ?');
    args.push(params.type);
  }
  if (params.text) {
    // instr, not LIKE: the text is matched as it is, `%` and `_` included.
    where.push('(instr(lower(j.id), lower(?)) > 0 OR instr(lower(j.metadata), lower(?)) > 0)');
    args.push(params.text, params.text);
  }
  const limit = Math.max(1, Math.min(params.limit, 1000));
  args.push(limit + 1);
  const text = `SELECT ${JOB_ROW} FROM jobs j ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY j.id DESC LIMIT ?`;
  return { text, args, limit };
}
