/**
 * Result file routes:
 *   GET /v1/jobs/{id}/results/{name}?exp&sig   the file, authorised by the URL's signature alone
 *                                              (no API key: the link can be handed to a browser),
 *                                              with Range (206/416), ETag and attachment disposition
 *   GET /v1/jobs/{id}/result                   (API key) 302 to a fresh signed URL of the first file
 * A tampered or unsigned URL is 403, a genuine but expired one 410, a file of an expired job 410.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import parseRange from 'range-parser';
import { resultFilePath } from '../../blobs/result-links.js';
import type { StoredResultFile } from '../../blobs/results.js';
import type { UrlSigner } from '../../blobs/signed-urls.js';
import type { BlobStore } from '../../blobs/store.js';
import { isUuid } from '../../core/ids.js';
import type { JobState } from '../../core/states.js';
import { HttpProblem } from '../problem.js';
import { jobIdParam, pathParams, query, resultNameParam, signedUrlPartParam } from '../params.js';

export interface JobResultFiles {
  state: JobState;
  files: StoredResultFile[];
  /** Unix ms when the job's results expire (signed URLs never outlive it). */
  expiresAt?: number | null;
}

export interface ResultRouteOptions {
  blobs: BlobStore;
  signer: UrlSigner;
  /** The job's state and recorded files; `tenant` null means any tenant (the URL's signature is the authorisation). Null for an unknown job. */
  getResultFiles(id: string, tenant: string | null): Promise<JobResultFiles | null>;
  /** Called once per download: a GET whose response starts at byte 0 (a whole file, or the first range of a resumable one). */
  onDownload?(jobId: string, name: string): void | Promise<void>;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route authorises requests by a signed URL, not an API key. */
    signedUrl?: boolean;
  }
}

const problem = { $ref: 'Problem#' } as const;
const fileParams = pathParams({ id: jobIdParam, name: resultNameParam });

export function registerResultRoutes(app: FastifyInstance, options: ResultRouteOptions): void {
  const { blobs, signer, getResultFiles } = options;

  // HEAD is a route of its own: Fastify's automatic HEAD would replace Content-Length with 0.
  for (const method of ['GET', 'HEAD'] as const) {
    app.route<{ Params: { id: string; name: string }; Querystring: { exp?: string; sig?: string } }>({
      method,
      url: '/v1/jobs/:id/results/:name',
      exposeHeadRoute: false,
      config: { signedUrl: true },
      schema: {
        ...(method === 'HEAD' ? { hide: true } : {}),
        summary: 'Download a result file through its signed URL',
        tags: ['results'],
        security: [],
        params: fileParams,
        querystring: query({ exp: signedUrlPartParam, sig: signedUrlPartParam }),
        response: { ...Object.fromEntries([403, 404, 410, 416].map((c) => [c, problem])) },
      },
      handler: async (request, reply) => {
        const { id, name } = request.params;
        // The signature covers the path exactly as requested (nothing to decode: ids and names are URL-safe).
        const rawPath = request.url.split('?')[0] as string;
        const check = rawPath === resultFilePath(id, name) ? signer.verify(rawPath, request.query.exp, request.query.sig) : 'invalid';
        if (check === 'invalid')
          throw new HttpProblem(403, 'INVALID_SIGNATURE', 'the URL signature is missing or does not match; request a fresh URL from the job');
        if (check === 'expired') throw new HttpProblem(410, 'URL_EXPIRED', 'this signed URL has expired; request a fresh one from the job');
        const job = isUuid(id) ? await getResultFiles(id, null) : null;
        if (!job) throw new HttpProblem(404, 'NOT_FOUND', `job ${id} not found`);
        if (job.state === 'expired') throw new HttpProblem(410, 'EXPIRED', `job ${id} expired; its result files were deleted`);
        const file = job.files.find((f) => f.name === name);
        if (!file) throw new HttpProblem(404, 'RESULT_NOT_FOUND', `job ${id} has no result file "${name}"`);
        return serveFile(request, reply, blobs, id, file, options.onDownload);
      },
    });
  }

  app.get<{ Params: { id: string } }>(
    '/v1/jobs/:id/result',
    {
      schema: {
        summary: "Redirect to a signed URL of the job's (first) result file",
        tags: ['results'],
        params: pathParams({ id: jobIdParam }),
        response: { 302: { type: 'null', description: 'Location: the signed URL' }, ...Object.fromEntries([401, 404, 410].map((c) => [c, problem])) },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const job = isUuid(id) ? await getResultFiles(id, request.tenant) : null;
      if (!job) throw new HttpProblem(404, 'NOT_FOUND', `job ${id} not found`);
      if (job.state === 'expired') throw new HttpProblem(410, 'EXPIRED', `job ${id} expired; its result files were deleted`);
      const first = job.files[0];
      if (!first) throw new HttpProblem(404, 'NO_RESULT_FILE', `job ${id} (${job.state}) has no result file`);
      const url = signer.sign(resultFilePath(id, first.name), { notAfter: job.expiresAt ?? null });
      return reply.header('Cache-Control', 'no-store').redirect(url, 302);
    },
  );
}

async function serveFile(
  request: FastifyRequest,
  reply: FastifyReply,
  blobs: BlobStore,
  jobId: string,
  file: StoredResultFile,
  onDownload: ResultRouteOptions['onDownload'],
): Promise<FastifyReply> {
  const etag = `"${file.sha256}"`;
  let start = 0;
  let end = file.size - 1;
  let partial = false;
  const rangeHeader = request.headers.range;
  // If-Range: a resumed download of a different version gets the whole new file.
  const ifRange = request.headers['if-range'];
  if (rangeHeader && file.size > 0 && (ifRange === undefined || ifRange === etag)) {
    const ranges = parseRange(file.size, rangeHeader, { combine: true });
    if (ranges === -1) {
      reply.header('Content-Range', `bytes */${file.size}`);
      throw new HttpProblem(416, 'RANGE_NOT_SATISFIABLE', `range "${rangeHeader.slice(0, 100)}" is outside the file's ${file.size} bytes`);
    }
    // Malformed (-2), non-byte and multi-part ranges are ignored: the whole file is sent (RFC 9110 §14.2).
    if (ranges !== -2 && ranges.type === 'bytes' && ranges.length === 1) {
      start = (ranges[0] as { start: number }).start;
      end = (ranges[0] as { end: number }).end;
      partial = true;
    }
  }

  let body: Awaited<ReturnType<BlobStore['get']>> | null = null;
  if (request.method !== 'HEAD') {
    try {
      body = await blobs.get(file.key, file.size === 0 ? {} : { start, end });
    } catch (err) {
      if ((err as { code?: string }).code === 'BLOB_NOT_FOUND') {
        throw new HttpProblem(404, 'RESULT_NOT_FOUND', `result file "${file.name}" of job ${jobId} is missing from blob storage`);
      }
      throw err;
    }
  }
  reply
    .header('Accept-Ranges', 'bytes')
    .header('ETag', etag)
    .header('Cache-Control', 'private, no-store')
    .header('X-Content-Type-Options', 'nosniff')
    .header('Content-Disposition', `attachment; filename="${file.name}"`);
  reply.type(file.contentType).header('Content-Length', String(file.size === 0 ? 0 : end - start + 1));
  if (partial) reply.code(206).header('Content-Range', `bytes ${start}-${end}/${file.size}`);
  if (!body) return reply.send();
  if (start === 0 && onDownload) {
    try {
      await onDownload(jobId, file.name);
    } catch (err) {
      request.log.warn({ err, jobId }, 'counting a result download failed');
    }
  }
  return reply.send(body);
}
