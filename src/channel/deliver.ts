/**
 * Hands one received message to a channel's subscribers: decoded once, given to each subscriber
 * except the one that sent it, and not decoded at all when every subscriber sent it (each
 * process receives all of its own events back).
 */
import type { ChannelHandlers, ChannelLogger } from './channel.js';
import { decode, originPrefix } from './wire.js';

const prefixes = new WeakMap<ChannelHandlers, string | null>();

function prefixOf(h: ChannelHandlers): string | null {
  let p = prefixes.get(h);
  if (p === undefined) {
    p = h.origin === undefined ? null : originPrefix(h.origin);
    prefixes.set(h, p);
  }
  return p;
}

export function deliverMessage(handlers: ReadonlySet<ChannelHandlers>, text: string | undefined, logger: ChannelLogger | undefined, channel: string): void {
  if (text !== undefined && handlers.size > 0) {
    let foreign = false;
    for (const h of handlers) {
      const p = prefixOf(h);
      if (p === null || !text.startsWith(p)) {
        foreign = true;
        break;
      }
    }
    if (!foreign) return;
  }
  const envelope = text === undefined ? null : decode(text);
  if (!envelope) {
    logger?.warn({ channel, bytes: text?.length ?? 0 }, 'ignored a malformed message on the events channel');
    return;
  }
  for (const h of [...handlers]) {
    if (h.origin !== undefined && h.origin === envelope.origin) continue;
    try {
      h.event(envelope);
    } catch (err) {
      logger?.warn({ err, event: envelope.event }, 'a listener of a relayed event threw');
    }
  }
}
