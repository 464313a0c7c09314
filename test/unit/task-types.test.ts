/**
 * task-api/schema.ts inputJsonSchema and facade/task-types.ts: what `GET /v1/task-types` says of
 * each task's input (its JSON Schema, a Standard Schema's own JSON Schema when it can give one,
 * null otherwise) and of its settings.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { taskTypes } from '../../src/facade/task-types.js';
import { defineTask, type Task } from '../../src/task-api/define.js';
import { inputJsonSchema, type StandardSchemaV1 } from '../../src/task-api/schema.js';

/** A Standard Schema accepting anything, with a Standard JSON Schema converter when `json` is given. */
function standard(json?: () => unknown): StandardSchemaV1 {
  const std: Record<string, unknown> = { version: 1, vendor: 'test', validate: (value: unknown) => ({ value }) };
  if (json) std.jsonSchema = { input: json, output: json };
  return { '~standard': std } as unknown as StandardSchemaV1;
}

describe('inputJsonSchema', () => {
  it('a JSON Schema as given; a Standard Schema with a converter gives its own; none or a failing one: null', () => {
    const json = { type: 'object', properties: { n: { type: 'integer' } } };
    assert.equal(inputJsonSchema(json), json);
    assert.equal(inputJsonSchema(undefined), null);
    let target: unknown;
    const converted = inputJsonSchema(
      standard((...args: unknown[]) => {
        target = args[0];
        return { type: 'string' };
      }),
    );
    assert.deepEqual(converted, { type: 'string' });
    assert.deepEqual(target, { target: 'draft-2020-12' });
    assert.equal(inputJsonSchema(standard()), null);
    assert.equal(
      inputJsonSchema(
        standard(() => {
          throw new Error('cannot convert a transform');
        }),
      ),
      null,
    );
    assert.equal(inputJsonSchema(standard(() => 'not a schema')), null);
  });
});

describe('taskTypes', () => {
  it('lists the tasks by type with their input schema, description and settings', () => {
    const tasks = new Map<string, Task>(
      [
        defineTask({ type: 'b.plain', run: () => 1 }),
        defineTask({ type: 'a.full', description: 'does a', input: { type: 'object' }, maxAttempts: 4, priority: 'high', timeoutMs: 5_000, concurrency: 2, run: () => 1 }),
      ].map((t) => [t.type, t]),
    );
    assert.deepEqual(taskTypes(tasks), [
      { type: 'a.full', inputSchema: { type: 'object' }, description: 'does a', maxAttempts: 4, priority: 'high', timeoutMs: 5_000, concurrency: 2 },
      { type: 'b.plain', inputSchema: null, description: null, maxAttempts: null, priority: null, timeoutMs: null, concurrency: null },
    ]);
    assert.throws(() => defineTask({ type: 'x', description: 3 as unknown as string, run: () => 1 }), /description must be a string/);
  });
});
