/** Hash routes (`#/jobs?state=failed`): the server serves one page, and links stay shareable. */
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  path: string;
  params: URLSearchParams;
}

export function parseRoute(hash: string): Route {
  const h = hash.replace(/^#/, '') || '/';
  const q = h.indexOf('?');
  return { path: q < 0 ? h : h.slice(0, q), params: new URLSearchParams(q < 0 ? '' : h.slice(q + 1)) };
}

export function href(path: string, params?: Record<string, string | undefined>): string {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) if (v) qs.set(k, v);
  const s = qs.toString();
  return `#${path}${s ? `?${s}` : ''}`;
}

/**
 * An API path with an admin's `tenant` parameter when the page shows another tenant's jobs
 * (null: the caller's own, no parameter).
 */
export function withTenant(path: string, tenant: string | null): string {
  if (!tenant) return path;
  return `${path}${path.includes('?') ? '&' : '?'}tenant=${encodeURIComponent(tenant)}`;
}

export function navigate(path: string, params?: Record<string, string | undefined>, replace = false): void {
  const target = href(path, params);
  if (replace) history.replaceState(null, '', target);
  else location.hash = target;
  if (replace) window.dispatchEvent(new HashChangeEvent('hashchange'));
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(location.hash));
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}
