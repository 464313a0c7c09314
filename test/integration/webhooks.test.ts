/**
 * Webhooks: Standard Webhooks signatures checked with the `standardwebhooks` package, the SSRF
 * matrix (every refused range, IPv6 forms, numeric IPv4 spellings, hostnames resolving to
 * private addresses, the allow-list), and delivery against local receivers: verified bodies,
 * no redirects followed, the timeout, 410 as gone, connection pinning, retry schedules.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import type { JobSnapshot } from '../../src/core/job.js';
import { deliverWebhook } from '../../src/webhooks/deliver.js';
import { buildWebhookPayload, webhookEventType } from '../../src/webhooks/payload.js';
import { DEFAULT_RETRY_SCHEDULE, parseRetrySchedule, retryDelayAfter } from '../../src/webhooks/retry-schedule.js';
import { generateWebhookSecret, isWebhookSecret, parseWebhookSecret, webhookHeaders, webhookSignature } from '../../src/webhooks/signing.js';
import { checkWebhookUrl, forbiddenAddressReason, parseAllowlist, type Resolver } from '../../src/webhooks/ssrf.js';
import { type Received, receiver } from '../support/webhook-receiver.js';

const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;

function snapshot(status: JobSnapshot['status']): JobSnapshot {
  const at = '2030-01-01T00:00:00.000Z';
  return {
    id: '0190d7e4-0000-7000-8000-000000000001',
    type: 'csv.import',
    status,
    priority: 'normal',
    input: { uploadId: 'u' },
    metadata: null,
    progress: { percent: 100, stage: null, itemsDone: null, itemsTotal: null, message: null, eta: null, updatedAt: at },
    result: { rows: 3 },
    resultUrl: null,
    error: null,
    attempts: 1,
    maxAttempts: 3,
    cancelRequested: false,
    stalled: false,
    parentId: null,
    createdAt: at,
    startedAt: at,
    finishedAt: '2030-01-01T00:00:05.000Z',
    updatedAt: at,
    runAt: at,
    expiresAt: null,
    links: { self: '/v1/jobs/x', events: '/v1/jobs/x/events', cancel: '/v1/jobs/x/cancel' },
  } as JobSnapshot;
}

// ---- signing ---------------------------------------------------------------------------------------

describe('Standard Webhooks signing', () => {
  test('headers verify with the standardwebhooks package; any change to id, timestamp or body fails', () => {
    const body = JSON.stringify(buildWebhookPayload(snapshot('succeeded')));
    const timestamp = Math.floor(Date.now() / 1000);
    const headers = webhookHeaders({ id: 'msg_1', timestamp, body, secret: SECRET });
    assert.match(headers['webhook-signature'], /^v1,[A-Za-z0-9+/]{43}=$/);
    const wh = new Webhook(SECRET);
    assert.deepEqual(wh.verify(body, headers), JSON.parse(body));
    assert.throws(() => wh.verify(body.replace('succeeded', 'failed'), headers));
    assert.throws(() => wh.verify(body, { ...headers, 'webhook-id': 'msg_2' }));
    assert.throws(() => wh.verify(body, { ...headers, 'webhook-timestamp': String(timestamp + 1) }));
    assert.throws(() => new Webhook(generateWebhookSecret()).verify(body, headers));
    assert.equal(webhookSignature({ id: 'msg_1', timestamp, body, secret: SECRET }), headers['webhook-signature']);
  });

  test("the wire format is the specification's: its published example signs to its published signature", () => {
    // The example of the Standard Webhooks specification (and of its reference libraries' tests):
    // a literal, so a change of signing library cannot change what receivers get unnoticed.
    const example = { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: 1614265330, body: '{"test": 2432232314}', secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' };
    assert.equal(webhookSignature(example), 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
    assert.deepEqual(webhookHeaders({ ...example, timestamp: example.timestamp + 0.9 }), {
      'webhook-id': example.id,
      'webhook-timestamp': '1614265330',
      'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    });
  });

  test('secrets: whsec_ + base64 of 24–64 bytes; errors never echo the secret', () => {
    const generated = generateWebhookSecret();
    assert.ok(isWebhookSecret(generated));
    assert.equal(parseWebhookSecret(generated).length, 32);
    for (const bad of [
      '',
      'whsec_',
      'secret',
      `whsec_${Buffer.alloc(16).toString('base64')}`,
      `whsec_${Buffer.alloc(65).toString('base64')}`,
      'whsec_not base64!!',
    ]) {
      assert.equal(isWebhookSecret(bad), false, bad);
      assert.throws(
        () => parseWebhookSecret(bad, 'LONGHAUL_WEBHOOK_SECRET'),
        (err: Error) => err.message.startsWith('LONGHAUL_WEBHOOK_SECRET') && (bad.length < 8 || !err.message.includes(bad)),
      );
    }
  });

  test('payload: {type, timestamp, data}; only terminal notify states', () => {
    const p = buildWebhookPayload(snapshot('failed'));
    assert.equal(p.type, 'job.failed');
    assert.equal(p.timestamp, '2030-01-01T00:00:05.000Z');
    assert.equal(p.data.status, 'failed');
    assert.equal(webhookEventType('succeeded'), 'job.succeeded');
    assert.equal(webhookEventType('cancelled'), 'job.cancelled');
    assert.equal(webhookEventType('running'), null);
    assert.throws(() => buildWebhookPayload(snapshot('running')), /only succeeded, failed and cancelled/);
  });
});

// ---- SSRF -------------------------------------------------------------------------------------------

describe('SSRF guard', () => {
  const refused: [string, RegExp][] = [
    ['http://127.0.0.1/', /loopback/],
    ['http://127.255.255.254:8080/x', /loopback/],
    ['http://10.0.0.1/', /private/],
    ['http://172.16.0.1/', /private/],
    ['http://172.31.255.255/', /private/],
    ['http://192.168.1.1/', /private/],
    ['http://100.64.0.1/', /carrier-grade NAT/],
    ['http://169.254.1.1/', /link-local/],
    ['http://169.254.169.254/latest/meta-data/', /metadata/],
    ['http://100.100.100.200/', /metadata/],
    ['http://224.0.0.1/', /multicast/],
    ['http://239.255.255.250/', /multicast/],
    ['http://0.0.0.0/', /unspecified/],
    ['http://0/', /unspecified/],
    ['http://255.255.255.255/', /broadcast/],
    ['http://192.0.2.10/', /reserved/],
    ['http://198.18.0.1/', /reserved/],
    ['http://240.0.0.1/', /reserved/],
    // Numeric spellings, normalised by the URL parser.
    ['http://2130706433/', /loopback/],
    ['http://0x7f.1/', /loopback/],
    ['http://0177.0.0.1/', /loopback/],
    ['http://127.1/', /loopback/],
    ['http://0x7f000001/', /loopback/],
    ['http://%31%32%37.0.0.1/', /loopback/],
    ['http://167772161/', /private/], // 10.0.0.1
    // IPv6.
    ['http://[::1]/', /loopback/],
    ['http://[::]/', /unspecified/],
    ['http://[fe80::1]/', /link-local/],
    ['http://[febf:ffff::1]/', /link-local/],
    ['http://[fc00::1]/', /unique-local/],
    ['http://[fd12:3456::1]/', /unique-local/],
    ['http://[fd00:ec2::254]/', /metadata/],
    ['http://[ff02::1]/', /multicast/],
    ['http://[fec0::1]/', /site-local/],
    ['http://[2001:db8::1]/', /reserved/],
    ['http://[::ffff:127.0.0.1]/', /loopback IPv4 address embedded/],
    ['http://[::ffff:7f00:1]/', /loopback IPv4 address embedded/],
    ['http://[0:0:0:0:0:ffff:a00:1]/', /private IPv4 address embedded/],
    ['http://[::ffff:169.254.169.254]/', /metadata/],
    ['http://[::ffff:0:7f00:1]/', /loopback IPv4 address embedded/],
    ['http://[::127.0.0.1]/', /IPv4-compatible/],
    ['http://[::7f00:1]/', /IPv4-compatible/],
    ['http://[::8.8.8.8]/', /IPv4-compatible/],
    ['http://[64:ff9b::7f00:1]/', /loopback IPv4 address embedded.*NAT64/],
    ['http://[64:ff9b::10.0.0.1]/', /private IPv4 address embedded.*NAT64/],
    ['http://[64:ff9b:1::1]/', /NAT64/],
    ['http://[2002:7f00:1::]/', /loopback IPv4 address embedded.*6to4/],
    ['http://[2002:c0a8:101::1]/', /private IPv4 address embedded.*6to4/],
    ['http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', /Teredo/],
    ['http://[100::1]/', /discard/],
    ['http://[4000::1]/', /unallocated/],
    // Schemes and hosts.
    ['ftp://example.com/', /scheme "ftp"/],
    ['file:///etc/passwd', /scheme "file"/],
    ['gopher://127.0.0.1:25/', /scheme "gopher"/],
    ['javascript:alert(1)', /scheme/],
    ['not a url', /not a valid absolute URL/],
    ['http://metadata.google.internal/computeMetadata/v1/', /metadata/],
    ['http://METADATA.GOOGLE.INTERNAL./', /metadata/],
  ];

  test('refuses every non-public range, IPv6 form and numeric spelling', async () => {
    for (const [url, reason] of refused) {
      const check = await checkWebhookUrl(url, { resolve: async () => assert.fail(`no DNS lookup expected for ${url}`) });
      assert.equal(check.ok, false, `${url} should be refused`);
      assert.match(check.reason ?? '', reason, url);
    }
  });

  test('public addresses pass, IPv6 and 6to4/NAT64 of public IPv4 included', async () => {
    for (const url of [
      'https://8.8.8.8/hook',
      'http://1.1.1.1:8080/',
      'http://[2606:4700:4700::1111]/',
      'http://[64:ff9b::808:808]/',
      'http://[2002:808:808::1]/',
      'http://[::ffff:8.8.8.8]/',
    ]) {
      const check = await checkWebhookUrl(url);
      assert.equal(check.ok, true, `${url}: ${check.reason}`);
    }
    assert.equal(forbiddenAddressReason('93.184.216.34'), null);
    assert.match(forbiddenAddressReason('nonsense') ?? '', /not an IP address/);
  });

  test('hostnames are resolved and every address checked (one private address is enough to refuse)', async () => {
    const dns: Record<string, string[]> = {
      'public.example': ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946'],
      'internal.example': ['10.1.2.3'],
      'mixed.example': ['93.184.216.34', '192.168.0.10'],
      'v6only.example': ['fd00::5'],
      'meta.example': ['169.254.169.254'],
    };
    const resolve: Resolver = async (host) => {
      const found = dns[host];
      if (!found) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
      return found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    };
    const ok = await checkWebhookUrl('https://public.example/hook', { resolve });
    assert.equal(ok.ok, true);
    assert.deepEqual(
      ok.addresses?.map((a) => a.address),
      dns['public.example'],
    );
    assert.match(
      (await checkWebhookUrl('https://internal.example/', { resolve })).reason ?? '',
      /internal\.example resolves to a private IPv4 address \(10\.1\.2\.3\)/,
    );
    assert.match((await checkWebhookUrl('https://mixed.example/', { resolve })).reason ?? '', /192\.168\.0\.10/);
    assert.match((await checkWebhookUrl('https://v6only.example/', { resolve })).reason ?? '', /unique-local/);
    assert.match((await checkWebhookUrl('https://meta.example/', { resolve })).reason ?? '', /metadata/);
    assert.match((await checkWebhookUrl('https://nowhere.example/', { resolve })).reason ?? '', /could not be resolved \(ENOTFOUND\)/);
  });

  test('localhost, through the system resolver, is refused', async () => {
    const check = await checkWebhookUrl('http://localhost:8080/hook');
    assert.equal(check.ok, false);
    assert.match(check.reason ?? '', /localhost resolves to a loopback/);
  });

  test('the allow-list lets listed hosts and CIDRs through, and nothing else; metadata stays refused', async () => {
    const allowlist = parseAllowlist(' 127.0.0.1 , 10.0.0.0/8,[::1], hooks.internal, *.svc.cluster.local, 169.254.0.0/16 ');
    const resolve: Resolver = async (host) => [
      { address: host === 'hooks.internal' || host.endsWith('.svc.cluster.local') ? '192.168.7.7' : '172.16.0.1', family: 4 },
    ];
    for (const url of [
      'http://127.0.0.1:9999/',
      'http://[::ffff:127.0.0.1]/',
      'http://10.200.0.1/',
      'http://[::1]:80/',
      'http://hooks.internal/',
      'http://a.b.svc.cluster.local/',
      'http://169.254.10.10/',
    ]) {
      const check = await checkWebhookUrl(url, { allowlist, resolve });
      assert.equal(check.ok, true, `${url}: ${check.reason}`);
    }
    for (const url of [
      'http://127.0.0.2/',
      'http://192.168.1.1/',
      'http://other.internal/',
      'http://svc.cluster.local.evil/',
      'http://169.254.169.254/',
      'http://metadata.google.internal/',
    ]) {
      assert.equal((await checkWebhookUrl(url, { allowlist, resolve })).ok, false, url);
    }
    assert.throws(() => parseAllowlist('10.0.0.0/99'), /not a valid CIDR/);
    assert.throws(() => parseAllowlist('http://x'), /not a hostname, IP address or CIDR/);
    assert.equal(parseAllowlist('').cidrs.length, 0);
  });
});

// ---- delivery ------------------------------------------------------------------------------------------


describe('webhook delivery', () => {
  const allowlist = parseAllowlist('127.0.0.1');
  const wh = new Webhook(SECRET);
  let mode: 'ok' | 'redirect' | 'gone' | 'error' | 'hang' = 'ok';
  const rx = receiver((req, res) => {
    if (mode === 'hang') return;
    if (mode === 'redirect') {
      res.writeHead(302, { location: '/elsewhere' }).end();
      return;
    }
    if (mode === 'gone') return void res.writeHead(410).end('unsubscribed');
    if (mode === 'error') return void res.writeHead(500).end('boom');
    try {
      wh.verify(req.body, req.headers as Record<string, string>);
      res.writeHead(204).end();
    } catch {
      res.writeHead(401).end('bad signature');
    }
  });
  let base = '';
  before(async () => {
    base = await rx.start();
  });
  after(() => rx.close());

  test('a delivery verifies with standardwebhooks at the receiver; headers and JSON body as specified', async () => {
    mode = 'ok';
    const payload = buildWebhookPayload(snapshot('succeeded'));
    const result = await deliverWebhook({ url: `${base}/hooks/longhaul?src=test`, secret: SECRET, payload, id: 'msg_a1', allowlist });
    assert.equal(result.ok, true, result.error ?? '');
    assert.equal(result.status, 204);
    assert.equal(result.gone, false);
    assert.equal(result.error, null);
    assert.ok(result.durationMs >= 0);
    const got = rx.received.at(-1) as Received;
    assert.equal(got.path, '/hooks/longhaul?src=test');
    assert.equal(got.headers['content-type'], 'application/json');
    assert.equal(got.headers['webhook-id'], 'msg_a1');
    assert.ok(Math.abs(Number(got.headers['webhook-timestamp']) - Date.now() / 1000) < 5);
    assert.deepEqual(wh.verify(got.body, got.headers as Record<string, string>), JSON.parse(JSON.stringify(payload)));
    assert.ok(!JSON.stringify(got).includes(SECRET.slice(6)), 'the secret never travels');
  });

  test('every attempt is signed afresh: a receiver failing twice with 500 then succeeding sees three verifiable requests, one success', async () => {
    let calls = 0;
    const flaky = receiver((req, res) => {
      calls++;
      wh.verify(req.body, req.headers as Record<string, string>);
      res.writeHead(calls <= 2 ? 500 : 200).end();
    });
    const url = `${await flaky.start()}/hook`;
    try {
      const outcomes = [];
      for (let attempt = 1; attempt <= 4; attempt++) {
        const r = await deliverWebhook({
          url,
          secret: SECRET,
          payload: { n: 1 },
          id: 'msg_retry',
          allowlist,
          timestamp: Math.floor(Date.now() / 1000) + attempt,
        });
        outcomes.push(r.status);
        if (r.ok) break;
      }
      assert.deepEqual(outcomes, [500, 500, 200]);
      assert.equal(flaky.received.length, 3);
      assert.equal(new Set(flaky.received.map((r) => r.headers['webhook-id'])).size, 1);
      assert.equal(new Set(flaky.received.map((r) => r.headers['webhook-signature'])).size, 3);
    } finally {
      await flaky.close();
    }
  });

  test('redirects are reported, never followed', async () => {
    mode = 'redirect';
    const before = rx.received.length;
    const r = await deliverWebhook({ url: `${base}/start`, secret: SECRET, payload: {}, id: 'msg_r', allowlist });
    assert.equal(r.ok, false);
    assert.equal(r.status, 302);
    assert.match(r.error ?? '', /redirect \(302 to \/elsewhere\) not followed/);
    assert.equal(rx.received.length, before + 1);
    assert.equal(rx.received.at(-1)?.path, '/start');
  });

  test('410 is reported as gone; 500 as a failure with the body snippet', async () => {
    mode = 'gone';
    const gone = await deliverWebhook({ url: `${base}/h`, secret: SECRET, payload: {}, id: 'msg_g', allowlist });
    assert.deepEqual([gone.ok, gone.status, gone.gone, gone.responseSnippet], [false, 410, true, 'unsubscribed']);
    mode = 'error';
    const failed = await deliverWebhook({ url: `${base}/h`, secret: SECRET, payload: {}, id: 'msg_e', allowlist });
    assert.deepEqual([failed.ok, failed.status, failed.gone, failed.error], [false, 500, false, 'receiver answered 500']);
  });

  test('a receiver that never answers times out', async () => {
    mode = 'hang';
    const started = Date.now();
    const r = await deliverWebhook({ url: `${base}/slow`, secret: SECRET, payload: {}, id: 'msg_t', allowlist, timeoutMs: 300 });
    assert.equal(r.ok, false);
    assert.equal(r.status, null);
    assert.match(r.error ?? '', /timed out after 300 ms/);
    assert.ok(Date.now() - started < 2_000);
    assert.ok(r.durationMs >= 290);
  });

  test('connection errors are reported; refused URLs are never contacted', async () => {
    const closed = receiver(() => {});
    const url = await closed.start();
    await closed.close();
    const r = await deliverWebhook({ url, secret: SECRET, payload: {}, id: 'msg_c', allowlist });
    assert.equal(r.ok, false);
    assert.match(r.error ?? '', /ECONNREFUSED/);
    mode = 'ok';
    const before = rx.received.length;
    const refused = await deliverWebhook({ url: `${base}/h`, secret: SECRET, payload: {}, id: 'msg_x' });
    assert.equal(refused.refused, true);
    assert.match(refused.error ?? '', /^refused: loopback/);
    assert.equal(rx.received.length, before);
  });

  test('the connection goes to the checked address (DNS rebinding): one resolution, pinned, Host header kept', async () => {
    mode = 'ok';
    const port = new URL(base).port;
    let lookups = 0;
    // The first answer is checked (allow-listed 127.0.0.1); any later answer would be a private
    // address the guard never saw. The delivery must use the first and never ask again.
    const resolve: Resolver = async () => [{ address: lookups++ === 0 ? '127.0.0.1' : '10.9.9.9', family: 4 }];
    const r = await deliverWebhook({ url: `http://hooks.rebind.test:${port}/pinned`, secret: SECRET, payload: { p: 1 }, id: 'msg_p', allowlist, resolve });
    assert.equal(r.ok, true, r.error ?? '');
    assert.equal(lookups, 1);
    const got = rx.received.at(-1) as Received;
    assert.equal(got.path, '/pinned');
    assert.equal(got.headers.host, `hooks.rebind.test:${port}`);
    // A name the guard refuses is refused at delivery time too.
    const rebound = await deliverWebhook({ url: `http://hooks.rebind.test:${port}/pinned`, secret: SECRET, payload: {}, id: 'msg_q', allowlist, resolve });
    assert.equal(rebound.refused, true);
    assert.match(rebound.error ?? '', /10\.9\.9\.9/);
  });
});

// ---- retry schedule --------------------------------------------------------------------------------------

describe('retry schedule', () => {
  test('the default and custom schedules parse to ms; delays run out after the last entry', () => {
    const s = parseRetrySchedule(DEFAULT_RETRY_SCHEDULE);
    assert.deepEqual(s, [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000]);
    assert.deepEqual(parseRetrySchedule(' 250ms , 1s,2m '), [250, 1_000, 120_000]);
    assert.deepEqual(parseRetrySchedule(), s);
    assert.equal(retryDelayAfter(1, s), 5_000);
    assert.equal(retryDelayAfter(6, s), 36_000_000);
    assert.equal(retryDelayAfter(7, s), null);
  });

  test('bad input is a clear error naming the variable and the entry', () => {
    assert.throws(() => parseRetrySchedule(''), /LONGHAUL_WEBHOOK_RETRY_SCHEDULE is empty/);
    assert.throws(() => parseRetrySchedule('5s,,5m'), /entry 2 is empty/);
    assert.throws(() => parseRetrySchedule('5s,soon'), /"soon" is not a duration/);
    assert.throws(() => parseRetrySchedule('5x'), /"5x" is not a duration/);
    assert.throws(() => parseRetrySchedule('-5s'), /not a duration/);
    assert.throws(() => parseRetrySchedule('0s'), /longer than 0/);
    assert.throws(() => parseRetrySchedule('8d'), /longer than 7 days/);
    assert.throws(() => parseRetrySchedule(Array(51).fill('1s').join(',')), /at most 50/);
  });
});
