/**
 * core/optional-packages.ts (issue 35): only Node's "package not found" for one of a feature's
 * own packages becomes a MissingPackageError naming them and the install command; every other
 * failure to load is rethrown as it was. The imports that fail here are real ones (of a
 * package and a file that do not exist), so the error is Node's own.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkOptional, loadOptional, MissingPackageError, missingPackageOf, OPTIONAL_PACKAGES } from '../../src/core/optional-packages.js';

const ABSENT = 'longhaul-test-absent-package';
const need = { feature: 'The probe feature', packages: [ABSENT] };

describe('optional packages', () => {
  it('a missing package of the feature becomes a MissingPackageError naming it and the install command', async () => {
    const err = await loadOptional(need, () => import(ABSENT)).then(
      () => assert.fail('the import should fail'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof MissingPackageError);
    assert.equal(err.code, 'MISSING_PACKAGE');
    assert.equal(err.missing, ABSENT);
    assert.equal(err.message, `The probe feature needs the package ${ABSENT}, which is not installed: npm install ${ABSENT}`);
    // Node's error is kept as the cause.
    assert.equal((err.cause as { code?: string }).code, 'ERR_MODULE_NOT_FOUND');
  });

  it('names every package of a feature that needs several, and the one missing', () => {
    const err = new MissingPackageError(OPTIONAL_PACKAGES.s3, '@aws-sdk/lib-storage');
    assert.equal(
      err.message,
      'S3 blob storage (LONGHAUL_S3_BUCKET) needs the packages @aws-sdk/client-s3 and @aws-sdk/lib-storage (@aws-sdk/lib-storage is not installed): npm install @aws-sdk/client-s3 @aws-sdk/lib-storage',
    );
    const three = new MissingPackageError({ feature: 'X', packages: ['a', 'b', 'c'] }, 'b');
    assert.equal(three.message, 'X needs the packages a, b and c (b is not installed): npm install a b c');
  });

  it('rethrows as it was: another package not found (one the feature package needs), a missing file, any other error', async () => {
    const other = await import(ABSENT).catch((e: unknown) => e);
    assert.equal(await loadOptional({ feature: 'F', packages: ['pg'] }, () => import(ABSENT)).catch((e: unknown) => (e as Error).message), (other as Error).message);
    const missingFile = './no-such-file.js';
    const file = await loadOptional(need, () => import(missingFile)).catch((e: unknown) => e);
    assert.equal((file as { code?: string }).code, 'ERR_MODULE_NOT_FOUND');
    assert.ok(!(file instanceof MissingPackageError));
    const thrown = new Error(`Cannot find package '${ABSENT}' imported from x`);
    assert.equal(await loadOptional(need, () => Promise.reject(thrown)).catch((e: unknown) => e), thrown, 'the same message without the code is not Node\'s "not found"');
    assert.equal(await loadOptional(need, () => Promise.reject('text')).catch((e: unknown) => e), 'text');
    // A package whose name begins like the feature's is another package.
    assert.equal(missingPackageOf(Object.assign(new Error("Cannot find package 'pg-pool' imported from x"), { code: 'ERR_MODULE_NOT_FOUND' }), ['pg']), undefined);
    assert.equal(missingPackageOf(Object.assign(new Error("Cannot find package 'pg' imported from x"), { code: 'ERR_MODULE_NOT_FOUND' }), ['pg']), 'pg');
  });

  it('passes the loaded module through', async () => {
    const mod = await loadOptional(need, () => import('node:path'));
    assert.equal(typeof mod.join, 'function');
  });

  it('checkOptional resolves without loading: a missing package is the same error, installed ones pass', () => {
    assert.throws(
      () => checkOptional(need, (s) => import.meta.resolve(s)),
      (e: unknown) => e instanceof MissingPackageError && e.missing === ABSENT,
    );
    assert.doesNotThrow(() => checkOptional({ feature: 'F', packages: ['fastify', 'pino'] }, (s) => import.meta.resolve(s)));
  });
});
