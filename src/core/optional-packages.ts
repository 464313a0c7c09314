/**
 * The packages only an optional feature needs, and the error that names them when the feature is
 * configured without them. Longhaul declares them as optional peer dependencies: an app that
 * installs Longhaul gets none of them (the AWS SDK alone is 22 MB) and installs those of the
 * features it uses (docs/configuration.md, "Optional packages").
 *
 * Each place that loads such a feature's module passes the import itself, as a function
 * (`loadOptional(OPTIONAL_PACKAGES.s3, () => import('./s3-store.js'))`): this module does no
 * I/O, and a test can pass an import that fails. Only Node's "package not found" error for one
 * of the feature's own packages becomes a MissingPackageError; anything else (a package the
 * feature's package needs, a missing file of Longhaul's, an error thrown while loading) is
 * rethrown as it was.
 */

export interface OptionalFeature {
  /** What the user configured, as a sentence's subject: `S3 blob storage (LONGHAUL_S3_BUCKET)`. */
  readonly feature: string;
  /** The packages it needs, as they are installed. */
  readonly packages: readonly string[];
}

/** Every optional feature's packages: the `peerDependenciesMeta` of package.json, by feature. */
export const OPTIONAL_PACKAGES = {
  postgres: { feature: 'A PostgreSQL database (a postgres:// URL)', packages: ['pg'] },
  redis: { feature: 'The Redis relay (LONGHAUL_REDIS_URL)', packages: ['ioredis'] },
  s3: { feature: 'S3 blob storage (LONGHAUL_S3_BUCKET)', packages: ['@aws-sdk/client-s3', '@aws-sdk/lib-storage'] },
  pdf: { feature: 'The PDF format of the example task report.generate', packages: ['pdfkit'] },
} as const satisfies Record<string, OptionalFeature>;

/** A feature was configured, but a package it needs is not installed. */
export class MissingPackageError extends Error {
  readonly code = 'MISSING_PACKAGE';
  readonly feature: string;
  readonly packages: readonly string[];
  /** The package Node could not find (one of `packages`). */
  readonly missing: string;

  constructor(need: OptionalFeature, missing: string, options?: { cause?: unknown }) {
    const [last, ...rest] = [...need.packages].reverse();
    const names = rest.length === 0 ? `the package ${last}` : `the packages ${[...rest].reverse().join(', ')} and ${last}`;
    const which = need.packages.length > 1 ? ` (${missing} is not installed)` : ', which is not installed';
    super(`${need.feature} needs ${names}${which}: npm install ${need.packages.join(' ')}`, options);
    this.name = 'MissingPackageError';
    this.feature = need.feature;
    this.packages = need.packages;
    this.missing = missing;
  }
}

/**
 * The package of `packages` that `err` says Node cannot find (`ERR_MODULE_NOT_FOUND`, "Cannot
 * find package 'pg' imported from ..."), or undefined for any other error.
 */
export function missingPackageOf(err: unknown, packages: readonly string[]): string | undefined {
  if (!(err instanceof Error) || (err as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  const name = /^Cannot find package '([^']+)'/.exec(err.message)?.[1];
  return name !== undefined && packages.includes(name) ? name : undefined;
}

/** `err` as a MissingPackageError when it is Node's "not found" for one of the feature's packages, else `err` itself. */
export function missingPackageError(need: OptionalFeature, err: unknown): unknown {
  const missing = missingPackageOf(err, need.packages);
  return missing === undefined ? err : new MissingPackageError(need, missing, { cause: err });
}

/** Runs `load` (an `import()` of the module that uses the feature's packages); a missing package becomes a MissingPackageError. */
export async function loadOptional<T>(need: OptionalFeature, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    throw missingPackageError(need, err);
  }
}

/**
 * Checks, without loading them, that the feature's packages can be found: `resolve` is the
 * caller's `import.meta.resolve`, so that they are looked up from where they will be imported.
 * For a feature opened later than it is configured (S3 blob storage opens on first use), so
 * that a missing package is reported when the instance opens, not at the first upload.
 */
export function checkOptional(need: OptionalFeature, resolve: (specifier: string) => string): void {
  for (const name of need.packages) {
    try {
      resolve(name);
    } catch (err) {
      throw missingPackageError(need, err);
    }
  }
}
