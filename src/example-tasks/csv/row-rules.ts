/**
 * The schema `csv.import` checks: a header `id,email,name,amount,date` and, per data row, one
 * rule per column. Pure functions: a row in, the list of reasons it is rejected out (empty when
 * the row is accepted). Reasons are fixed strings so that the summary can count them.
 */

export const COLUMNS = ['id', 'email', 'name', 'amount', 'date'] as const;

export const REASONS = {
  columns: `wrong column count (expected ${COLUMNS.length}: ${COLUMNS.join(',')})`,
  idMissing: 'id: missing',
  idInvalid: 'id: not 1-64 letters, digits, _ or -',
  emailMissing: 'email: missing',
  emailInvalid: 'email: not an email address',
  nameMissing: 'name: missing',
  nameTooLong: 'name: longer than 200 characters',
  amountMissing: 'amount: missing',
  amountInvalid: 'amount: not a number',
  amountPrecision: 'amount: more than 2 decimal places',
  dateMissing: 'date: missing',
  dateInvalid: 'date: not a valid ISO date (YYYY-MM-DD)',
  unclosedQuote: 'malformed CSV: quote not closed at end of file',
} as const;

export type Reason = (typeof REASONS)[keyof typeof REASONS];

const ID = /^[A-Za-z0-9_-]{1,64}$/;
// Pragmatic, not RFC 5322: a local part without spaces or specials, a dotted domain of labels.
const EMAIL = /^[^\s@"(),:;<>[\\\]]{1,64}@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;
const NUMBER = /^-?\d{1,15}(?:\.(\d+))?$/;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Whether a header row names the expected columns, in order (case and surrounding spaces ignored). */
export function headerMatches(fields: readonly string[]): boolean {
  return fields.length === COLUMNS.length && COLUMNS.every((name, i) => fields[i]?.trim().toLowerCase() === name);
}

function isCalendarDate(text: string): boolean {
  const m = DATE.exec(text);
  if (!m) return false;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  if (month < 1 || month > 12 || day < 1) return false;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  return day <= (month === 2 && leap ? 29 : (DAYS_IN_MONTH[month - 1] ?? 0));
}

/** The reasons a data row is rejected, in column order; empty when it is valid. */
export function checkRow(fields: readonly string[]): Reason[] {
  if (fields.length !== COLUMNS.length) return [REASONS.columns];
  const [id = '', email = '', name = '', amount = '', date = ''] = fields.map((f) => f.trim());
  const reasons: Reason[] = [];
  if (id === '') reasons.push(REASONS.idMissing);
  else if (!ID.test(id)) reasons.push(REASONS.idInvalid);
  if (email === '') reasons.push(REASONS.emailMissing);
  else if (!EMAIL.test(email)) reasons.push(REASONS.emailInvalid);
  if (name === '') reasons.push(REASONS.nameMissing);
  else if (name.length > 200) reasons.push(REASONS.nameTooLong);
  if (amount === '') reasons.push(REASONS.amountMissing);
  else {
    const m = NUMBER.exec(amount);
    if (!m) reasons.push(REASONS.amountInvalid);
    else if ((m[1]?.length ?? 0) > 2) reasons.push(REASONS.amountPrecision);
  }
  if (date === '') reasons.push(REASONS.dateMissing);
  else if (!isCalendarDate(date)) reasons.push(REASONS.dateInvalid);
  return reasons;
}
