/**
 * Configuration checks made at start (src/config.ts): contradictory heartbeat settings are
 * refused with the names of the settings actually given, log levels are checked by name, and a
 * task whose own heartbeat settings would reap its healthy jobs is reported when registered.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { checkHeartbeat, DEFAULTS, logLevelFromEnv, resolveConfig } from '../../src/config.js';
import { defineTask, Longhaul } from '../../src/index.js';

describe('heartbeat settings', () => {
  it('accepts a timeout of at least twice the interval, the defaults included', () => {
    assert.equal(resolveConfig({}, {}).heartbeatTimeoutMs, DEFAULTS.heartbeatTimeoutMs);
    assert.doesNotThrow(() => resolveConfig({}, { LONGHAUL_HEARTBEAT_INTERVAL_MS: '200', LONGHAUL_HEARTBEAT_TIMEOUT_MS: '400' }));
    assert.doesNotThrow(() => checkHeartbeat(15_000, 30_000));
  });

  it('refuses a timeout under twice the interval, naming the settings that were given', () => {
    assert.throws(
      () => resolveConfig({}, { LONGHAUL_HEARTBEAT_TIMEOUT_MS: '3000' }),
      /^Error: LONGHAUL_HEARTBEAT_TIMEOUT_MS must be at least twice LONGHAUL_HEARTBEAT_INTERVAL_MS \(unset: the default\): 3000 ms < 2 × 5000 ms/,
    );
    assert.throws(
      () => resolveConfig({}, { LONGHAUL_HEARTBEAT_INTERVAL_MS: '20000' }),
      /^Error: LONGHAUL_HEARTBEAT_TIMEOUT_MS \(unset: the default\) must be at least twice LONGHAUL_HEARTBEAT_INTERVAL_MS: 30000 ms < 2 × 20000 ms/,
    );
    // Options win over the environment, and the message names them.
    assert.throws(
      () => resolveConfig({ heartbeatIntervalMs: 1000 }, { LONGHAUL_HEARTBEAT_INTERVAL_MS: '100', LONGHAUL_HEARTBEAT_TIMEOUT_MS: '1500' }),
      /^Error: LONGHAUL_HEARTBEAT_TIMEOUT_MS must be at least twice heartbeatIntervalMs: 1500 ms < 2 × 1000 ms/,
    );
    assert.throws(
      () => resolveConfig({ heartbeatIntervalMs: 100, heartbeatTimeoutMs: 100 }, {}),
      /heartbeatTimeoutMs must be at least twice heartbeatIntervalMs/,
    );
  });
});

describe('log levels', () => {
  it('takes pino levels (any case) and silent; refuses others by the variable’s name', () => {
    assert.equal(logLevelFromEnv('LONGHAUL_LOG_LEVEL', 'info', {}), 'info');
    assert.equal(logLevelFromEnv('LONGHAUL_LOG_LEVEL', 'info', { LONGHAUL_LOG_LEVEL: ' WARN ' }), 'warn');
    assert.equal(logLevelFromEnv('LONGHAUL_HTTP_LOG_LEVEL', 'warn', { LONGHAUL_HTTP_LOG_LEVEL: 'silent' }), 'silent');
    assert.throws(
      () => logLevelFromEnv('LONGHAUL_LOG_LEVEL', 'info', { LONGHAUL_LOG_LEVEL: 'loud' }),
      /^Error: LONGHAUL_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent \(got "loud"\)$/,
    );
  });
});

describe('Longhaul.open', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'longhaul-config-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses contradictory heartbeat options before it creates the database', async () => {
    const database = join(dir, 'refused.db');
    await assert.rejects(
      Longhaul.open({ database, heartbeatIntervalMs: 1000, heartbeatTimeoutMs: 1500, logger: pino({ level: 'silent' }) }),
      /heartbeatTimeoutMs must be at least twice heartbeatIntervalMs/,
    );
    assert.equal(existsSync(database), false);
  });

  it('names the SQLite file it cannot open', async () => {
    await assert.rejects(
      Longhaul.open({ database: join(dir, 'missing', 'x.db'), logger: pino({ level: 'silent' }) }),
      new RegExp(`^Error: cannot open the SQLite database ${join(dir, 'missing', 'x.db')}: the directory ${join(dir, 'missing')} does not exist$`),
    );
  });

  it('logs a warning for a task whose own heartbeat settings would reap its healthy jobs', async () => {
    const lines: { msg: string; level: number; task?: string }[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
        done();
      },
    });
    const tight = defineTask({ type: 'cfg.tight', heartbeatIntervalMs: 10_000, async run() {} }); // default timeout 30 s ≥ 20 s: fine
    const broken = defineTask({ type: 'cfg.broken', heartbeatTimeoutMs: 1_000, async run() {} }); // default interval 5 s
    const lh = await Longhaul.open({ database: join(dir, 'tasks.db'), tasks: [tight, broken], logger: pino({ level: 'warn' }, sink) });
    try {
      const warnings = lines.filter((l) => l.level === 40 && l.task !== undefined);
      assert.deepEqual(
        warnings.map((w) => w.task),
        ['cfg.broken'],
      );
      assert.match(warnings[0]?.msg ?? '', /^task "cfg\.broken": heartbeatTimeoutMs must be at least twice heartbeatIntervalMs: 1000 ms < 2 × 5000 ms/);
    } finally {
      await lh.close();
    }
  });
});
