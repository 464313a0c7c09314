/** Content types of stored files: validated (they are sent back as a response header) or guessed from the file name. */
import { lookup } from 'mime-types';

const MEDIA_TYPE =
  /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}(?:\s*;\s*[A-Za-z0-9!#$&^_.+-]+=(?:[A-Za-z0-9!#$&^_.+-]+|"[^"\\\r\n]*"))*$/;

export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

export function isMediaType(value: unknown): value is string {
  return typeof value === 'string' && value.length <= 255 && MEDIA_TYPE.test(value);
}

/** The media type registered for the name's extension, else application/octet-stream. */
export function guessContentType(name: string): string {
  return lookup(name) || DEFAULT_CONTENT_TYPE;
}
