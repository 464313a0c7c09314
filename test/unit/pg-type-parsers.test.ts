import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { parseIntegerArray, STORE_TYPES } from '../../src/store/postgres/type-parsers.js';

const pgParse = (pg.types.getTypeParser as unknown as (oid: number, format: string) => (v: string) => unknown)(1007, 'text');

describe('the store pool reads integer[] by splitting its common text', () => {
  it('reads what pg reads, for the common text and for everything it hands to pg', () => {
    const texts = ['{}', '{1}', '{1,2,3}', '{-5,0,2147483647,-2147483648}', '{1,NULL,3}', '{NULL}', '{{1,2},{3,4}}', '[0:1]={7,8}', '{"1","2"}'];
    for (const t of texts) assert.deepEqual(parseIntegerArray(t), pgParse(t), t);
    const long = `{${Array.from({ length: 1000 }, (_, i) => i + 1).join(',')}}`;
    assert.deepEqual(parseIntegerArray(long), pgParse(long));
  });

  it('is the pool’s parser for integer[]; the others are pg’s, but bigint’s, which reads the same', () => {
    const pool = STORE_TYPES.getTypeParser as unknown as (oid: number, format: string) => unknown;
    const own = pg.types.getTypeParser as unknown as (oid: number, format: string) => unknown;
    assert.equal(pool(1007, 'text'), parseIntegerArray);
    for (const oid of [23, 25, 114, 1009, 1016]) assert.equal(pool(oid, 'text'), own(oid, 'text'), String(oid));
    assert.equal(pool(1007, 'binary'), own(1007, 'binary'));
    assert.equal(pool(20, 'binary'), own(20, 'binary'));
    const bigint = pool(20, 'text') as (v: string) => unknown;
    const pgBigint = own(20, 'text') as (v: string) => unknown;
    assert.notEqual(bigint, pgBigint);
    for (const t of ['0', '1795610188639', '-5', '9223372036854775807', '-9223372036854775808']) assert.equal(bigint(t), pgBigint(t), t);
  });
});
