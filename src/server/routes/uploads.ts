/**
 * Upload routes:
 *   POST /v1/uploads       the raw request body (any content type) streamed to blob storage →
 *                          201 {id, size, sha256, contentType, createdAt, expiresAt}; 413 beyond the limit;
 *                          429 UPLOAD_QUOTA_EXCEEDED past the tenant's maxUploads or maxUploadBytes
 *   GET  /v1/uploads/{id}  that metadata; 404 unknown or another tenant's, 410 after expiry
 * The body is never parsed or buffered: this plugin's only content-type parser hands the request
 * stream through, and the size limit is enforced while streaming.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import { DEFAULT_CONTENT_TYPE, isMediaType } from '../../blobs/media-type.js';
import { BlobTooLargeError, type BlobStore } from '../../blobs/store.js';
import { findUpload, storeUpload } from '../../blobs/uploads.js';
import type { UploadQuota } from '../../blobs/upload-quota.js';
import { UploadQuotaExceededError } from '../../core/errors.js';
import { RESOURCE_DEFAULTS } from '../../core/quotas.js';
import { HttpProblem } from '../problem.js';
import { pathParams, uploadIdParam } from '../params.js';

export interface UploadRouteOptions {
  blobs: BlobStore;
  /** Default 1 GiB (LONGHAUL_MAX_UPLOAD_BYTES). */
  maxUploadBytes: number;
  /** Default 24 h (LONGHAUL_UPLOAD_TTL_MS). */
  uploadTtlMs: number;
  /** The upload quota of a tenant (maxUploads, maxUploadBytes of LONGHAUL_TENANT_QUOTAS). Default: RESOURCE_DEFAULTS for every tenant. */
  uploadQuota?: (tenant: string) => UploadQuota;
  /** Told of each upload refused at a quota (metrics). */
  onQuotaRefused?: (quota: 'maxUploads' | 'maxUploadBytes') => void;
}

const problem = { $ref: 'Problem#' } as const;
const uploadInfoSchema = {
  type: 'object',
  properties: {
    id: { type: 'string', format: 'uuid' },
    size: { type: 'integer' },
    sha256: { type: 'string', description: 'hex SHA-256 of the bytes' },
    contentType: { type: 'string' },
    createdAt: { type: 'string', format: 'date-time' },
    expiresAt: { type: 'string', format: 'date-time' },
  },
} as const;

export async function registerUploadRoutes(app: FastifyInstance, options: UploadRouteOptions): Promise<void> {
  await app.register(async (scope) => {
    // Scoped to this plugin: every body, JSON included, reaches the handler as the raw stream.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

    scope.post(
      '/v1/uploads',
      {
        schema: {
          summary: 'Upload a file (the raw request body) for jobs to read',
          tags: ['uploads'],
          consumes: ['*/*'],
          response: { 201: uploadInfoSchema, ...Object.fromEntries([400, 401, 413, 429].map((c) => [c, problem])) },
        },
        // Before body parsing: Fastify's parser lookup answers a malformed Content-Type with 415.
        onRequest: (request, _reply, done) => {
          try {
            uploadContentType(request);
            done();
          } catch (err) {
            done(err as Error);
          }
        },
      },
      async (request, reply) => {
        const contentType = uploadContentType(request);
        const declared = request.headers['content-length'];
        if (declared !== undefined && Number(declared) > options.maxUploadBytes) {
          reply.header('Connection', 'close');
          throw tooLarge(options.maxUploadBytes);
        }
        const body = (request.body as Readable | undefined) ?? request.raw;
        // The client going away mid-body aborts the write (pipeline sees the request stream fail too).
        const abort = new AbortController();
        const onClose = () => {
          if (!request.raw.complete) abort.abort(new Error('client disconnected during the upload'));
        };
        request.raw.on('close', onClose);
        try {
          const info = await storeUpload(options.blobs, {
            tenant: request.tenant,
            body,
            contentType,
            maxBytes: options.maxUploadBytes,
            ttlMs: options.uploadTtlMs,
            signal: abort.signal,
            quota: options.uploadQuota?.(request.tenant) ?? RESOURCE_DEFAULTS,
            ...(declared !== undefined && /^\d+$/.test(declared) ? { declaredBytes: Number(declared) } : {}),
          });
          return reply.code(201).header('Location', `/v1/uploads/${info.id}`).send(info);
        } catch (err) {
          if (err instanceof UploadQuotaExceededError) {
            options.onQuotaRefused?.(err.quota);
            // The body may not have been read (refused before its first byte): close after answering.
            if (!request.raw.complete) reply.header('Connection', 'close');
            throw err;
          }
          if (err instanceof BlobTooLargeError) {
            // The rest of the body is not read: close the connection after answering.
            reply.header('Connection', 'close');
            throw tooLarge(options.maxUploadBytes);
          }
          // Not a server error (nor logged as one): nobody is left to read the answer anyway.
          if (abort.signal.aborted || request.raw.destroyed)
            throw new HttpProblem(400, 'UPLOAD_ABORTED', 'the client disconnected before the upload was complete');
          throw err;
        } finally {
          request.raw.off('close', onClose);
        }
      },
    );
  });

  app.get<{ Params: { id: string } }>(
    '/v1/uploads/:id',
    {
      schema: {
        summary: "An upload's metadata",
        tags: ['uploads'],
        params: pathParams({ id: uploadIdParam }),
        response: { 200: uploadInfoSchema, ...Object.fromEntries([401, 404, 410].map((c) => [c, problem])) },
      },
    },
    async (request, reply) => {
      const found = await findUpload(options.blobs, request.tenant, request.params.id);
      if (found.status === 'missing') throw new HttpProblem(404, 'NOT_FOUND', `upload ${request.params.id} not found`);
      if (found.status === 'expired') throw new HttpProblem(410, 'EXPIRED', `upload ${found.info.id} expired at ${found.info.expiresAt}`);
      return reply.header('Cache-Control', 'no-store').send(found.info);
    },
  );
}

function tooLarge(max: number): HttpProblem {
  return new HttpProblem(413, 'UPLOAD_TOO_LARGE', `uploads are limited to ${max} bytes (LONGHAUL_MAX_UPLOAD_BYTES)`);
}

function uploadContentType(request: FastifyRequest): string {
  const header = request.headers['content-type'];
  if (header === undefined || header.trim() === '') return DEFAULT_CONTENT_TYPE;
  const value = header.trim();
  if (!isMediaType(value)) throw new HttpProblem(400, 'INVALID_CONTENT_TYPE', `Content-Type "${header.trim().slice(0, 100)}" is not a valid media type`);
  return value;
}
