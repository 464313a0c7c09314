/**
 * What a web page in a browser may make the server do (docs/security.md, "Browser-facing
 * defaults: Host and Origin"):
 *
 * - Without API keys, the `Host` of every request must be a loopback name (`localhost`,
 *   `*.localhost`), an IP address, or a name in `LONGHAUL_ALLOWED_HOSTS`: a DNS-rebinding page
 *   (`attacker.example` resolved to 127.0.0.1) reaches the server under its own name, and is
 *   refused `403 HOST_NOT_ALLOWED`. An IP address cannot be rebound (the page's origin is that
 *   address itself), the rule of development servers such as Vite's.
 * - In every mode, a WebSocket upgrade and every state-changing request (any method but GET,
 *   HEAD and OPTIONS: a form or a `no-cors` fetch can post to uploads, cancels and the rest
 *   cross-site) that carries an `Origin` must come from the server's own origin (the `Origin`
 *   names the request's `Host`) or one in `LONGHAUL_ALLOWED_ORIGINS`; otherwise
 *   `403 ORIGIN_NOT_ALLOWED`. Clients that are not browsers send no `Origin` and are not
 *   concerned; the dashboard, served by this server, posts from its own origin.
 */
import { isIP } from 'node:net';
import { HttpProblem } from './problem.js';

export interface BrowserGuardOptions {
  /** Check `Host` (no API keys configured). */
  checkHost: boolean;
  /** Host names accepted besides loopback names and IP addresses; `.example.com` takes its subdomains too, `*` any host. */
  allowedHosts?: readonly string[];
  /** Origins (`https://app.example.com`) accepted besides the server's own; `*` any. */
  allowedOrigins?: readonly string[];
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export class BrowserGuard {
  private readonly checkHost: boolean;
  private readonly anyHost: boolean;
  private readonly hosts: Set<string>;
  private readonly hostSuffixes: string[];
  private readonly anyOrigin: boolean;
  private readonly origins: Set<string>;

  constructor(options: BrowserGuardOptions) {
    const hosts = (options.allowedHosts ?? []).map((h) => h.trim().toLowerCase()).filter(Boolean);
    this.checkHost = options.checkHost;
    this.anyHost = hosts.includes('*');
    this.hosts = new Set(hosts.filter((h) => !h.startsWith('.')));
    this.hostSuffixes = hosts.filter((h) => h.startsWith('.'));
    const origins = (options.allowedOrigins ?? []).map((o) => o.trim()).filter(Boolean);
    this.anyOrigin = origins.includes('*');
    this.origins = new Set(origins.filter((o) => o !== '*').map(normalizeOrigin));
  }

  /** The refusal of a request (or upgrade: `upgrade` true), or null. */
  check(method: string, host: string | undefined, origin: string | undefined, upgrade = false): HttpProblem | null {
    if (this.checkHost && host !== undefined && !this.hostAllowed(host)) {
      return new HttpProblem(
        403,
        'HOST_NOT_ALLOWED',
        `Host "${host.slice(0, 100)}" is not allowed without API keys: use localhost or an IP address, or add the name to LONGHAUL_ALLOWED_HOSTS`,
      );
    }
    if (origin === undefined || (!upgrade && SAFE_METHODS.has(method))) return null;
    if (this.originAllowed(origin, host)) return null;
    return new HttpProblem(
      403,
      'ORIGIN_NOT_ALLOWED',
      `Origin "${origin.slice(0, 100)}" may not ${upgrade ? 'open WebSockets' : 'send this request'}: only the server's own origin and those in LONGHAUL_ALLOWED_ORIGINS`,
    );
  }

  private hostAllowed(header: string): boolean {
    if (this.anyHost) return true;
    const name = hostname(header);
    if (name === 'localhost' || name.endsWith('.localhost') || isIP(name.replace(/^\[|\]$/g, '')) !== 0) return true;
    return this.hosts.has(name) || this.hostSuffixes.some((s) => name.endsWith(s) || name === s.slice(1));
  }

  private originAllowed(origin: string, host: string | undefined): boolean {
    if (this.anyOrigin) return true;
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      return false; // `null` (sandboxed frames, file:) and junk
    }
    if (this.origins.has(url.origin)) return true;
    // The server's own origin: the page was loaded from the host this request is addressed to
    // (the scheme may differ behind a TLS-terminating proxy).
    return host !== undefined && url.host === withoutDefaultPort(host.toLowerCase());
  }
}

/** The host name of a Host header: lower case, without its port or a trailing dot; IPv6 keeps its brackets. */
function hostname(header: string): string {
  const h = header.trim().toLowerCase();
  const name = h.startsWith('[') ? h.slice(0, h.indexOf(']') + 1) : h.replace(/:\d*$/, '');
  return name.replace(/\.$/, '');
}

function withoutDefaultPort(host: string): string {
  return host.replace(/:(80|443)$/, '');
}

function normalizeOrigin(origin: string): string {
  try {
    return new URL(origin).origin;
  } catch {
    throw new Error(`LONGHAUL_ALLOWED_ORIGINS: "${origin.slice(0, 100)}" is not an origin such as https://app.example.com`);
  }
}
