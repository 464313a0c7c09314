/**
 * What a job snapshot says about its result files: `results: [{name, size, contentType, url}]`
 * and `resultUrl` (the first file's URL), each a signed URL that expires after the signer's
 * lifetime (1 hour by default) and never after the job's own expiry.
 */
import type { ResultFile } from './handles.js';
import type { UrlSigner } from './signed-urls.js';

export interface ResultDescriptor {
  name: string;
  size: number;
  contentType: string;
  url: string;
}

export interface ResultLinks {
  results: ResultDescriptor[];
  resultUrl: string | null;
}

/** The path a result file is served at; the signature covers exactly this string. */
export function resultFilePath(jobId: string, name: string): string {
  return `/v1/jobs/${encodeURIComponent(jobId)}/results/${encodeURIComponent(name)}`;
}

export interface ResultLinkOptions {
  /** Unix ms of the job's expiry (results deleted then): URLs expire no later. */
  notAfter?: number | null;
  now?: number;
  ttlMs?: number;
  /** Prepended to each URL (e.g. `https://api.example.com`); by default URLs are paths, like the snapshot's links. */
  baseUrl?: string;
}

export function buildResultLinks(jobId: string, files: readonly ResultFile[], signer: UrlSigner, options: ResultLinkOptions = {}): ResultLinks {
  const base = (options.baseUrl ?? '').replace(/\/+$/, '');
  const results = files.map((f) => ({
    name: f.name,
    size: f.size,
    contentType: f.contentType,
    url:
      base +
      signer.sign(resultFilePath(jobId, f.name), {
        ...(options.now === undefined ? {} : { now: options.now }),
        ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
        notAfter: options.notAfter ?? null,
      }),
  }));
  return { results, resultUrl: results[0]?.url ?? null };
}
