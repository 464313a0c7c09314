/**
 * The SSRF guard for webhook URLs: only http(s), and every address the host resolves to must
 * be public unicast. Refused: loopback, private (10/8, 172.16/12, 192.168/16), CGNAT
 * (100.64/10), link-local (169.254/16, fe80::/10), multicast, unspecified, broadcast,
 * reserved/documentation/benchmarking ranges, IPv6 unique-local (fc00::/7), site-local,
 * Teredo, and every IPv6 form that embeds a refused IPv4 address (IPv4-mapped, IPv4-translated,
 * NAT64 64:ff9b::/96, 6to4 2002::/16; IPv4-compatible ::/96 always). Cloud metadata hosts and
 * addresses are refused even when an allow-list range covers them.
 *
 * Numeric IPv4 spellings (`2130706433`, `0x7f.1`, `0177.0.0.1`) need no special case: the
 * WHATWG URL parser turns them into dotted quads before the check sees the host.
 *
 * `LONGHAUL_WEBHOOK_ALLOWLIST` (comma-separated hostnames, `*.suffix` wildcards, IP addresses
 * or CIDRs) lets operators and tests reach specific internal targets.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import ipaddr from 'ipaddr.js';

type IPAddress = ipaddr.IPv4 | ipaddr.IPv6;

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a hostname to all its addresses (injectable for tests). */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (hostname) => {
  const found = await dnsLookup(hostname, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

export interface Allowlist {
  hosts: Set<string>;
  /** `*.example.internal` entries, stored as `.example.internal`. */
  suffixes: string[];
  cidrs: [IPAddress, number][];
}

export const EMPTY_ALLOWLIST: Allowlist = { hosts: new Set(), suffixes: [], cidrs: [] };

/** Parses `LONGHAUL_WEBHOOK_ALLOWLIST`; a bad entry is an error naming it. */
export function parseAllowlist(spec: string | undefined): Allowlist {
  const list: Allowlist = { hosts: new Set(), suffixes: [], cidrs: [] };
  for (const raw of (spec ?? '').split(',')) {
    const entry = raw.trim().toLowerCase();
    if (entry === '') continue;
    const bare = entry.startsWith('[') && entry.endsWith(']') ? entry.slice(1, -1) : entry;
    if (bare.includes('/') && isIpLiteral(bare.slice(0, bare.indexOf('/')))) {
      try {
        list.cidrs.push(ipaddr.parseCIDR(bare));
      } catch {
        throw new Error(`LONGHAUL_WEBHOOK_ALLOWLIST: "${raw.trim()}" is not a valid CIDR`);
      }
    } else if (isIpLiteral(bare)) {
      const ip = ipaddr.parse(bare);
      list.cidrs.push([ip, ip.kind() === 'ipv4' ? 32 : 128]);
    } else if (/^\*\.[a-z0-9-]+(\.[a-z0-9-]+)*\.?$/.test(bare)) {
      list.suffixes.push(bare.slice(1).replace(/\.$/, ''));
    } else if (/^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$/.test(bare)) {
      list.hosts.add(bare.replace(/\.$/, ''));
    } else {
      throw new Error(`LONGHAUL_WEBHOOK_ALLOWLIST: "${raw.trim()}" is not a hostname, IP address or CIDR`);
    }
  }
  return list;
}

/** Strict literals only (dotted quad or IPv6): the URL parser has already normalised other IPv4 spellings. */
function isIpLiteral(host: string): boolean {
  return ipaddr.IPv4.isValidFourPartDecimal(host) || ipaddr.IPv6.isValid(host);
}

const METADATA_HOSTS = new Set(['metadata.google.internal', 'metadata.goog', 'metadata', 'instance-data', 'instance-data.ec2.internal', 'metadata.azure.com']);
const METADATA_ADDRESSES = new Set(['169.254.169.254', '169.254.170.2', '169.254.169.253', 'fd00:ec2::254', 'fd00:ec2::23', '100.100.100.200', '192.0.0.192']);

/** Why `address` may not be reached, or null when it is public unicast. Ignores the allow-list. */
export function forbiddenAddressReason(address: string): string | null {
  let ip: IPAddress;
  try {
    ip = ipaddr.parse(address);
  } catch {
    return `"${address}" is not an IP address`;
  }
  return forbiddenReason(ip);
}

function forbiddenReason(ip: IPAddress): string | null {
  if (METADATA_ADDRESSES.has(ip.toString())) return 'cloud metadata address';
  if (ip.kind() === 'ipv4') {
    const range = ip.range();
    return range === 'unicast' ? null : `${describe(range)} IPv4 address`;
  }
  const v6 = ip as ipaddr.IPv6;
  const range = v6.range();
  const parts = v6.parts;
  // IPv4-compatible ::a.b.c.d (deprecated; ipaddr.js calls it "unicast"): never legitimate.
  if (parts.slice(0, 6).every((p) => p === 0))
    return range === 'unspecified' ? 'unspecified IPv6 address' : range === 'loopback' ? 'loopback IPv6 address' : 'IPv4-compatible IPv6 address';
  const embedded = embeddedIPv4(v6, range);
  if (embedded) {
    const inner = forbiddenReason(embedded);
    return inner ? `${inner} embedded in an IPv6 address (${describe(range)})` : null;
  }
  if (range !== 'unicast') return `${describe(range)} IPv6 address`;
  // Global unicast is 2000::/3; everything else outside the named ranges is unallocated.
  if ((parts[0] as number) >> 13 !== 1) return 'unallocated IPv6 address';
  return null;
}

/** The IPv4 address an IPv6 form carries (mapped, translated, NAT64 well-known prefix, 6to4). */
function embeddedIPv4(ip: ipaddr.IPv6, range: string): ipaddr.IPv4 | null {
  const p = ip.parts as number[];
  const v4 = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
  switch (range) {
    case 'ipv4Mapped': // ::ffff:a.b.c.d
    case 'rfc6145': // ::ffff:0:a.b.c.d
      return v4(p[6] as number, p[7] as number);
    case 'rfc6052': // 64:ff9b::/96 only; the local-use 64:ff9b:1::/48 is refused as non-unicast
      return p[1] === 0xff9b && p[2] === 0 && p[3] === 0 && p[4] === 0 && p[5] === 0 ? v4(p[6] as number, p[7] as number) : null;
    case '6to4': // 2002:AABB:CCDD::/48
      return v4(p[1] as number, p[2] as number);
    default:
      return null;
  }
}

const RANGE_NAMES: Record<string, string> = {
  loopback: 'loopback',
  private: 'private',
  carrierGradeNat: 'carrier-grade NAT (100.64/10)',
  linkLocal: 'link-local',
  multicast: 'multicast',
  unspecified: 'unspecified',
  broadcast: 'broadcast',
  uniqueLocal: 'unique-local',
  reserved: 'reserved',
  ipv4Mapped: 'IPv4-mapped',
  rfc6145: 'IPv4-translated',
  rfc6052: 'NAT64',
  '6to4': '6to4',
  teredo: 'Teredo',
  deprecatedSiteLocal: 'site-local',
};

function describe(range: string): string {
  return RANGE_NAMES[range] ?? range;
}

function allowedByCidr(ip: IPAddress, list: Allowlist): boolean {
  const candidates: IPAddress[] = [ip];
  if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()) candidates.push((ip as ipaddr.IPv6).toIPv4Address());
  return candidates.some((c) => list.cidrs.some(([net, bits]) => net.kind() === c.kind() && c.match(net, bits)));
}

function allowedHost(host: string, list: Allowlist): boolean {
  return list.hosts.has(host) || list.suffixes.some((s) => host.endsWith(s));
}

export type UrlCheck =
  | { ok: true; url: URL; hostname: string; addresses: ResolvedAddress[]; reason?: undefined }
  | { ok: false; reason: string; url?: undefined; hostname?: undefined; addresses?: undefined };

export interface CheckOptions {
  allowlist?: Allowlist;
  resolve?: Resolver;
}

/**
 * Whether a webhook may be sent to `rawUrl`, with the addresses checked (delivery connects to
 * exactly these, so a DNS answer that changes after the check cannot redirect it).
 */
export async function checkWebhookUrl(rawUrl: string, options: CheckOptions = {}): Promise<UrlCheck> {
  const allowlist = options.allowlist ?? EMPTY_ALLOWLIST;
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    return { ok: false, reason: 'not a valid absolute URL' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return { ok: false, reason: `scheme "${url.protocol.replace(/:$/, '')}" is not allowed (only http and https)` };
  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname.replace(/\.$/, '').toLowerCase();
  if (hostname === '') return { ok: false, reason: 'URL has no host' };
  if (METADATA_HOSTS.has(hostname)) return { ok: false, reason: `host ${hostname} is a cloud metadata service` };
  const hostAllowed = allowedHost(hostname, allowlist);

  let addresses: ResolvedAddress[];
  if (isIpLiteral(hostname)) {
    addresses = [{ address: hostname, family: ipaddr.parse(hostname).kind() === 'ipv4' ? 4 : 6 }];
  } else {
    try {
      addresses = await (options.resolve ?? systemResolver)(hostname);
    } catch (err) {
      return { ok: false, reason: `host ${hostname} could not be resolved (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
    }
    if (addresses.length === 0) return { ok: false, reason: `host ${hostname} has no addresses` };
  }
  for (const a of addresses) {
    let ip: IPAddress;
    try {
      ip = ipaddr.parse(a.address);
    } catch {
      return { ok: false, reason: `host ${hostname} resolved to an invalid address` };
    }
    if (
      METADATA_ADDRESSES.has(ip.toString()) ||
      (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress() && METADATA_ADDRESSES.has((ip as ipaddr.IPv6).toIPv4Address().toString()))
    ) {
      return { ok: false, reason: `${hostname} is (or resolves to) a cloud metadata address` };
    }
    if (hostAllowed || allowedByCidr(ip, allowlist)) continue;
    const why = forbiddenReason(ip);
    if (why)
      return {
        ok: false,
        reason: hostname === a.address ? `${why} is not allowed` : `host ${hostname} resolves to a ${why} (${a.address}), which is not allowed`,
      };
  }
  return { ok: true, url, hostname, addresses };
}
