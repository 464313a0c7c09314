/**
 * The API client of the dashboard: same-origin fetch with the signed-in API key in the
 * Authorization header (never in a URL), problem+json errors as ApiError.
 */

const KEY_STORAGE = 'longhaul.apiKey';

/** Kept for the browser tab's session only: closing the tab signs out. */
let apiKey: string | null = sessionStorage.getItem(KEY_STORAGE);
const authListeners = new Set<() => void>();

export function currentKey(): string | null {
  return apiKey;
}

export function setKey(key: string | null): void {
  apiKey = key;
  if (key === null) sessionStorage.removeItem(KEY_STORAGE);
  else sessionStorage.setItem(KEY_STORAGE, key);
  for (const l of authListeners) l();
}

/** Called when the server answers 401 (no key, a wrong one) and when the key changes. */
export function onAuthChange(listener: () => void): () => void {
  authListeners.add(listener);
  return () => authListeners.delete(listener);
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly errors: { path: string; message: string }[] = [],
  ) {
    super(message);
  }
}

export function authHeaders(): Record<string, string> {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : {};
}

let unauthorized = false;
/** True after a 401, until a key is set: the app shows the sign-in form. */
export function needsSignIn(): boolean {
  return unauthorized;
}

export async function api<T>(path: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json', ...authHeaders() };
  let body: string | undefined;
  if (init.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(init.body);
  }
  const res = await fetch(path, { method: init.method ?? 'GET', headers, body, signal: init.signal ?? null, cache: 'no-store' });
  if (res.status === 401) {
    const wasSignedIn = !unauthorized;
    unauthorized = true;
    if (wasSignedIn) for (const l of authListeners) l();
  } else if (unauthorized && res.ok) {
    unauthorized = false;
  }
  if (!res.ok) {
    let code = 'HTTP_ERROR';
    let message = `${res.status} ${res.statusText}`;
    let errors: { path: string; message: string }[] = [];
    try {
      const p = (await res.json()) as { code?: string; detail?: string; title?: string; errors?: { path: string; message: string }[] };
      code = p.code ?? code;
      message = p.detail ?? p.title ?? message;
      if (Array.isArray(p.errors)) errors = p.errors;
    } catch {
      // not a problem document: keep the status line
    }
    throw new ApiError(res.status, code, message, errors);
  }
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** Signs in: checks the key against the API, then keeps it. */
export async function signIn(key: string): Promise<void> {
  const res = await fetch('/v1/jobs?limit=1', { headers: { authorization: `Bearer ${key}`, accept: 'application/json' }, cache: 'no-store' });
  if (res.status === 401) throw new ApiError(401, 'UNAUTHORIZED', 'That API key is not valid.');
  if (!res.ok) throw new ApiError(res.status, 'HTTP_ERROR', `The server answered ${res.status}.`);
  unauthorized = false;
  setKey(key);
}

export function signOut(): void {
  unauthorized = true;
  setKey(null);
}

/** A route that newer servers have: true when it answered 404 NOT_FOUND for its path (not for an id). */
export function isMissingRoute(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404 && err.code === 'NOT_FOUND' && /^no route /.test(err.message);
}
