/**
 * The wire form of an Envelope: `{"v":1,"o":origin,"e":event,"d":data}` as JSON text, and its
 * strict reading. A message that does not parse or does not have the expected fields is
 * refused (null), never half-applied: any process, or a person with psql, can write to the
 * channel.
 */
import type { Progress } from '../core/progress.js';
import { isJobState } from '../core/states.js';
import { type Envelope, MAX_CHANGED_IDS, RELAY_EVENT_NAMES, type RelayEventName } from './channel.js';
import { parseJson } from '../core/json-text.js';

const VERSION = 1;
/** Free-text fields (reasons) longer than this are cut when a message must shrink. */
const REASON_CUT = 200;

/** How every message sent by `origin` begins (encode writes `v` and `o` first). */
export function originPrefix(origin: string): string {
  return `{"v":${VERSION},"o":${JSON.stringify(origin)},`;
}

export function encode(envelope: Envelope): string {
  return JSON.stringify({ v: VERSION, o: envelope.origin, e: envelope.event, d: envelope.data });
}

/**
 * The encoding of `envelope` in at most `maxBytes` UTF-8 bytes, or null when it cannot fit.
 * To fit, progress is sent as null (receivers read it elsewhere) and reasons are cut; ids,
 * tenants and types are never altered.
 */
export function encodeWithin(envelope: Envelope, maxBytes: number): string | null {
  let text = encode(envelope);
  if (Buffer.byteLength(text) <= maxBytes) return text;
  let slim: Envelope | null = null;
  if (envelope.event === 'job:progress' && envelope.data.progress !== null) {
    slim = { ...envelope, data: { ...envelope.data, progress: null } };
  } else if ('reason' in envelope.data && envelope.data.reason.length > REASON_CUT) {
    slim = { ...envelope, data: { ...envelope.data, reason: `${envelope.data.reason.slice(0, REASON_CUT)}…` } } as Envelope;
  }
  if (!slim) return null;
  text = encode(slim);
  return Buffer.byteLength(text) <= maxBytes ? text : null;
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
const str = (v: unknown): v is string => typeof v === 'string';
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v !== '';
const numOrNull = (v: unknown) => v === null || (typeof v === 'number' && Number.isFinite(v));
const strOrNull = (v: unknown) => v === null || typeof v === 'string';

export function isProgress(v: unknown): v is Progress {
  return (
    isObj(v) &&
    numOrNull(v.percent) &&
    strOrNull(v.stage) &&
    numOrNull(v.itemsDone) &&
    numOrNull(v.itemsTotal) &&
    strOrNull(v.message) &&
    numOrNull(v.eta) &&
    strOrNull(v.updatedAt) &&
    (v.stagePercent === undefined || numOrNull(v.stagePercent))
  );
}

const CHECKS: { [K in RelayEventName]: (d: Obj) => boolean } = {
  'job:submitted': (d) => nonEmpty(d.id) && nonEmpty(d.tenant) && nonEmpty(d.type) && isJobState(d.state),
  'job:changed': (d) => nonEmpty(d.id) && nonEmpty(d.tenant) && nonEmpty(d.type) && isJobState(d.from) && isJobState(d.to) && str(d.reason),
  'jobs:changed': (d) =>
    Array.isArray(d.ids) &&
    d.ids.length > 0 &&
    d.ids.length <= MAX_CHANGED_IDS &&
    d.ids.every(nonEmpty) &&
    nonEmpty(d.tenant) &&
    nonEmpty(d.type) &&
    isJobState(d.from) &&
    isJobState(d.to) &&
    str(d.reason),
  'job:progress': (d) => nonEmpty(d.id) && nonEmpty(d.tenant) && (d.progress === null || isProgress(d.progress)),
  'jobs:promoted': (d) => Number.isInteger(d.count) && (d.count as number) >= 0,
  'job:cancel-requested': (d) => nonEmpty(d.id) && str(d.reason),
};

/** Only the fields of each event, so nothing unexpected reaches the bus. */
function pick(event: RelayEventName, d: Obj): Obj {
  switch (event) {
    case 'job:submitted':
      return { id: d.id, tenant: d.tenant, type: d.type, state: d.state };
    case 'job:changed':
      return { id: d.id, tenant: d.tenant, type: d.type, from: d.from, to: d.to, reason: d.reason };
    case 'jobs:changed':
      return { ids: [...(d.ids as string[])], tenant: d.tenant, type: d.type, from: d.from, to: d.to, reason: d.reason };
    case 'job:progress': {
      const p = d.progress as Obj | null;
      const progress =
        p === null
          ? null
          : {
              percent: p.percent,
              stage: p.stage,
              itemsDone: p.itemsDone,
              itemsTotal: p.itemsTotal,
              message: p.message,
              eta: p.eta,
              updatedAt: p.updatedAt,
              ...(p.stagePercent === undefined ? {} : { stagePercent: p.stagePercent }),
            };
      return { id: d.id, tenant: d.tenant, progress };
    }
    case 'jobs:promoted':
      return { count: d.count };
    case 'job:cancel-requested':
      return { id: d.id, reason: d.reason };
  }
}

/** The envelope in `text`, or null when it is not a well-formed message of a known event. */
export function decode(text: string): Envelope | null {
  let raw: unknown;
  try {
    raw = parseJson(text);
  } catch {
    return null;
  }
  if (!isObj(raw) || raw.v !== VERSION || !nonEmpty(raw.o) || !isObj(raw.d)) return null;
  const event = raw.e as RelayEventName;
  if (!RELAY_EVENT_NAMES.includes(event) || !CHECKS[event](raw.d)) return null;
  return { origin: raw.o, event, data: pick(event, raw.d) } as Envelope;
}
