/**
 * The dashboard in a real browser (Debian's Chromium via playwright-core): submit through the
 * form and watch the progress bar reach 100 % without a reload, cancel a running job, jobs
 * that appear live, replay a group of dead letters, and sign-in with a key that sees only its
 * tenant. Every wait is for a condition, with room for a loaded 2-core machine.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { browserMissing, type DashboardServer, launchBrowser, screenshot, startDashboardServer, watchPage } from '../support/browser.js';
import { failedThroughStore } from '../support/dead-letters.js';

const WAIT = { timeout: 30_000 };
const missing = browserMissing();

/**
 * Opens a page of the dashboard anew, so it fetches its data again. Two hash changes in a row may
 * reach the router in one render (a loaded machine), and the page would then stay mounted with
 * what it had: the overview is waited for in between.
 */
async function openAfresh(page: Page, path: string): Promise<void> {
  await page.goto('/#/');
  await page.getByRole('heading', { name: 'Overview' }).waitFor(WAIT);
  await page.goto(path);
}

/** The job detail's status (its data-status attribute) reaches `status`. */
async function waitForStatus(page: Page, status: string): Promise<void> {
  await page.locator(`[data-testid="job-detail"][data-status="${status}"]`).waitFor(WAIT);
}

describe('dashboard in Chromium', { skip: missing ?? false }, () => {
  let browser: Browser;
  let server: DashboardServer;
  let context: BrowserContext;
  let page: Page;
  let problems: string[];

  before(async () => {
    browser = await launchBrowser();
    server = await startDashboardServer();
    context = await browser.newContext({ baseURL: server.base, viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    problems = watchPage(page);
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await server?.close();
  });

  it('opens the overview with the counts of every state and no error or CSP violation', async () => {
    for (let i = 0; i < 3; i++) await server.lh.submit('demo.sleep', { steps: 2, stepMs: 10 });
    await server.lh.submit('demo.fail', { code: 'OVERVIEW' });
    await page.goto('/');
    await page.getByRole('heading', { name: 'Overview' }).waitFor(WAIT);
    await page.locator('[data-testid="feed-status"]', { hasText: 'live' }).waitFor(WAIT);
    await page.waitForFunction(() => {
      const row = [...document.querySelectorAll('[data-testid="state-counts"] tr')].find((r) => r.querySelector('th')?.textContent === 'failed');
      return row?.querySelector('.num')?.textContent === '1';
    }, undefined, WAIT);
    // Stalled jobs now and zombies reaped: read from the database by /v1/stats.
    for (const tile of ['tile-stalled', 'tile-zombies']) {
      await page.locator(`[data-testid="${tile}"] .tile-value`, { hasText: /^\d+$/ }).waitFor(WAIT);
    }
    // The chart library arrives in its own file, on first use, and draws.
    await page.locator('.chart-canvas canvas').waitFor(WAIT);
    // Queues per task type come from /metrics where the server has it; otherwise the page says so.
    if ((await fetch(`${server.base}/metrics`)).status === 200) {
      await page.locator('[data-testid="queues"] th', { hasText: 'demo.sleep' }).waitFor(WAIT);
    } else {
      await page.getByText('This server has no /metrics').waitFor(WAIT);
    }
    await screenshot(page, 'overview');
    assert.deepEqual(problems, []);
  });

  it('submits demo.sleep through the form and follows its progress bar to 100 % without a reload', async () => {
    await page.goto('/#/submit');
    await page.evaluate(() => {
      (window as unknown as { marker: number }).marker = 42;
    });
    const typeField = page.getByLabel('Task type');
    await typeField.waitFor(WAIT);
    // The form shows a text field until the task types arrive: ask the server, not the first render.
    if ((await fetch(`${server.base}/v1/task-types`)).status === 200) {
      await page.locator('select#submit-type').waitFor(WAIT);
      // A server with GET /v1/task-types: the type is picked and the input form is built from
      // demo.sleep's JSON Schema (integer fields steps and stepMs).
      await typeField.selectOption('demo.sleep');
      await page.getByLabel('steps').fill('12');
      await page.getByLabel('stepMs').fill('150');
    } else {
      await typeField.fill('demo.sleep');
      await page.getByLabel('Input (JSON)').fill('{"steps": 12, "stepMs": 150}');
    }
    await screenshot(page, 'submit');
    await page.getByRole('button', { name: 'Submit job' }).click();
    await page.waitForURL(/#\/jobs\/[0-9a-f-]{36}$/, WAIT);
    // Progress moves while it runs, then reaches 100 %.
    await page.waitForFunction(() => {
      const v = Number(document.querySelector('[data-testid="job-detail"] [role="progressbar"]')?.getAttribute('aria-valuenow'));
      return v > 0 && v < 100;
    }, undefined, WAIT);
    await screenshot(page, 'job-running');
    await page.locator('[data-testid="job-detail"] [role="progressbar"][aria-valuenow="100"]').waitFor(WAIT);
    await waitForStatus(page, 'succeeded');
    await page.locator('[data-testid="timeline"] li', { hasText: 'succeeded' }).waitFor(WAIT);
    assert.equal(await page.evaluate(() => (window as unknown as { marker?: number }).marker), 42, 'the page was not reloaded');
    await screenshot(page, 'job-detail');
    assert.deepEqual(problems, []);
  });

  it('cancels a running job with its Cancel button', async () => {
    const job = await server.lh.submit('demo.sleep', { steps: 200, stepMs: 100 });
    await page.goto(`/#/jobs/${job.id}`);
    await waitForStatus(page, 'running');
    // Once a step is done it has a checkpoint to show after the cancel.
    await page.locator('[data-testid="job-detail"] [role="progressbar"]:not([aria-valuenow="0"])').waitFor(WAIT);
    await page.getByRole('button', { name: 'Cancel job' }).click();
    await waitForStatus(page, 'cancelled');
    assert.equal((await server.lh.get(job.id))?.status, 'cancelled');
    // The attempt's checkpoint (demo.sleep saves one per step) is shown; a retry resumes from it.
    await page.locator('pre.json[data-label="checkpoint"]', { hasText: '"step"' }).waitFor(WAIT);
    // Retry is offered for a cancelled job, and queues it again.
    await page.getByRole('button', { name: 'Retry job' }).click();
    await page.locator('[data-testid="job-detail"][data-status="running"], [data-testid="job-detail"][data-status="queued"]').waitFor(WAIT);
    await server.lh.cancel(job.id);
    await waitForStatus(page, 'cancelled');
    assert.deepEqual(problems, []);
  });

  it('shows job data as text: markup in input and metadata is never run', async () => {
    const evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';
    const job = await server.lh.submit('demo.fail', { code: 'ESCAPED' }, { metadata: { note: evil } });
    await page.goto(`/#/jobs/${job.id}`);
    await waitForStatus(page, 'failed');
    await page.locator('pre.json', { hasText: 'onerror' }).waitFor(WAIT);
    assert.equal(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned), undefined);
    assert.equal(await page.locator('[data-testid="job-detail"] img').count(), 0);
    assert.ok(((await page.locator('pre.json', { hasText: 'onerror' }).textContent()) ?? '').includes(evil.replaceAll('"', '\\"')));
    await page.locator('[data-testid="error"]', { hasText: 'ESCAPED' }).first().waitFor(WAIT);
    // Where the server lists attempts, the failed one is there with its code and stack.
    const attempts = await fetch(`${server.base}/v1/jobs/${job.id}/attempts`);
    if (attempts.status === 200) {
      const attempt = page.locator('[data-testid="attempts"] li', { hasText: 'Attempt 1' });
      await attempt.locator('[data-testid="error"]', { hasText: 'ESCAPED' }).waitFor(WAIT);
      await attempt.locator('summary', { hasText: 'Stack' }).click();
      await attempt.locator('pre', { hasText: 'demo.fail failed on purpose' }).waitFor(WAIT);
    }
    assert.deepEqual(problems, []);
  });

  it("shows a workflow's children and its result file, which downloads", async () => {
    const parent = await server.lh.submit('demo.export', { rows: 300, shards: 3 });
    await page.goto(`/#/jobs/${parent.id}`);
    await waitForStatus(page, 'succeeded');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="children"] li').length === 3, undefined, WAIT);
    await page.locator('[data-testid="children"] .badge-succeeded').nth(2).waitFor(WAIT);
    const link = page.locator('[data-testid="result-files"] a', { hasText: 'export.csv' });
    await link.waitFor(WAIT);
    const url = await link.getAttribute('href');
    assert.match(url ?? '', /\/v1\/jobs\/[^/]+\/results\/export\.csv\?exp=\d+&sig=/);
    const download = await page.request.get(url ?? '');
    assert.equal(download.status(), 200);
    assert.equal((await download.text()).trim().split('\n').length, 301, 'a header and 300 rows');
    // A child links back to its parent.
    await page.locator('[data-testid="children"] li a').first().click();
    await page.getByRole('link', { name: parent.id }).waitFor(WAIT);
    assert.deepEqual(problems, []);
  });

  it('shows new jobs and their changes on the jobs page as they happen', async () => {
    await page.goto('/#/jobs');
    await page.getByRole('heading', { name: 'Jobs' }).waitFor(WAIT);
    await page.locator('[data-testid="jobs-table"][aria-busy="false"]').waitFor(WAIT);
    const job = await server.lh.submit('demo.sleep', { steps: 3, stepMs: 100 });
    const row = page.locator(`tr[data-job-id="${job.id}"]`);
    await row.waitFor(WAIT);
    await row.locator('.badge-succeeded').waitFor(WAIT);
    await screenshot(page, 'jobs');
    // Search: text in metadata, found by the server (letters in any case).
    const tagged = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { metadata: { customer: 'Umbrella Corp' } });
    await page.getByLabel('Search').fill('UMBRELLA');
    await page.getByLabel('Search').press('Enter');
    await page.waitForURL(/q=UMBRELLA/, WAIT);
    await page.locator(`tr[data-job-id="${job.id}"]`).waitFor({ ...WAIT, state: 'detached' });
    await page.locator(`tr[data-job-id="${tagged.id}"]`).waitFor(WAIT);
    assert.equal(await page.locator('tbody tr[data-job-id]').count(), 1);
    await page.getByLabel('Search').fill('');
    await page.getByLabel('Search').press('Enter');
    await page.locator(`tr[data-job-id="${job.id}"]`).waitFor(WAIT);
    // Filters: by state (server-side) and a full id.
    await page.getByLabel('State').selectOption('failed');
    await page.waitForURL(/state=failed/, WAIT);
    await page.locator(`tr[data-job-id="${job.id}"]`).waitFor({ ...WAIT, state: 'detached' });
    await page.locator('tbody tr .badge-failed').first().waitFor(WAIT);
    assert.equal(await page.locator('tbody tr .badge-succeeded').count(), 0);
    assert.deepEqual(problems, []);
  });

  it('works from the keyboard: skip button, navigation links, focus on the new page, buttons', async () => {
    await page.goto('about:blank');
    await page.goto('/#/');
    await page.getByRole('heading', { name: 'Overview' }).waitFor(WAIT);
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Skip to content');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Overview');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Jobs');
    await page.keyboard.press('Enter');
    await page.waitForURL(/#\/jobs$/, WAIT);
    await page.waitForFunction(() => document.activeElement?.textContent === 'Jobs' && document.activeElement.tagName === 'H1', undefined, WAIT);
    // From the heading, Tab reaches the filters, by their labels.
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('name')), 'state');
    // Every control that acts is a button or a link.
    assert.equal(await page.locator('main [onclick], main div[tabindex="0"], main span[tabindex="0"]').count(), 0);
    assert.deepEqual(problems, []);
  });

  it('replays a whole group of dead letters', async (t) => {
    const probe = await fetch(`${server.base}/v1/dead-letters`);
    const body = (await probe.json()) as { code?: string; detail?: string };
    if (probe.status === 404 && /^no route /.test(body.detail ?? '')) {
      // Pending on purpose: the dead-letter routes come with the h-dlq branch; this test runs once they exist.
      t.skip('GET /v1/dead-letters is not on this branch yet (h-dlq adds it)');
      return;
    }
    const failed = await Promise.all([1, 2, 3].map(() => server.lh.submit('demo.fail', { code: 'REPLAY_ME' })));
    for (const j of failed) await server.lh.wait(j.id);
    await page.goto('/#/dead-letters');
    const group = page.locator('tr[data-group="demo.fail / REPLAY_ME"]');
    await group.waitFor(WAIT);
    await group.getByRole('button', { name: /^Show jobs/ }).click();
    for (const j of failed) await page.locator('.group-jobs tr', { hasText: j.id }).waitFor(WAIT);
    await screenshot(page, 'dead-letters');
    page.once('dialog', (d) => d.accept());
    await group.getByRole('button', { name: /^Replay group/ }).click();
    await page.locator('[data-testid="dl-notice"]', { hasText: 'Replayed 3 jobs' }).waitFor(WAIT);
    for (const j of failed) {
      const transitions = await server.lh.transitions(j.id);
      assert.ok(
        transitions.some((e) => e.from === 'failed' && e.to === 'queued'),
        `job ${j.id} was replayed`,
      );
    }
    // Discard one job: it is deleted.
    const lone = await server.lh.submit('demo.fail', { code: 'DISCARD_ONE' });
    await server.lh.wait(lone.id);
    const loneGroup = page.locator('tr[data-group="demo.fail / DISCARD_ONE"]');
    await loneGroup.waitFor(WAIT);
    await loneGroup.getByRole('button', { name: /^Show jobs/ }).click();
    page.once('dialog', (d) => d.accept());
    await page.getByRole('button', { name: `Discard job ${lone.id}` }).click();
    await page.locator('[data-testid="dl-notice"]', { hasText: 'Discarded 1 job' }).waitFor(WAIT);
    assert.equal(await server.lh.get(lone.id), null);
    await loneGroup.waitFor({ ...WAIT, state: 'detached' });
    assert.deepEqual(problems, []);
  });

  it('replays, then discards, the group of jobs that failed without an error code, as a group', async () => {
    // Made through the store: no task fails without a code. The type has no worker, so a replayed job waits.
    const ids = await failedThroughStore(server.lh.store, { tenant: 'default', type: 'web.nocode', count: 3 });
    // Jobs failed through the store announce nothing: the page is opened afresh to list them.
    await openAfresh(page, '/#/dead-letters');
    const group = page.locator('tr[data-group="web.nocode / no code"]');
    await group.waitFor(WAIT);
    await group.getByRole('button', { name: /^Show jobs/ }).click();
    for (const id of ids) await page.locator('.group-jobs tr', { hasText: id }).waitFor(WAIT);
    const requests: string[] = [];
    page.on('request', (r) => {
      if (r.url().includes('/v1/dead-letters/') && r.method() === 'POST') requests.push(`${r.url()} ${r.postData() ?? ''}`);
    });
    page.once('dialog', (d) => d.accept());
    await group.getByRole('button', { name: /^Replay group/ }).click();
    await page.locator('[data-testid="dl-notice"]', { hasText: 'Replayed 3 jobs' }).waitFor(WAIT);
    assert.equal(requests.length, 1, 'one request for the whole group');
    assert.match(requests[0] ?? '', /"code":null/);
    for (const id of ids) assert.equal((await server.lh.get(id))?.status, 'queued');
    await group.waitFor({ ...WAIT, state: 'detached' });
    // Failed again, the group comes back; discarded, its jobs are gone.
    const again = await failedThroughStore(server.lh.store, { tenant: 'default', type: 'web.nocode2', count: 2 });
    const group2 = page.locator('tr[data-group="web.nocode2 / no code"]');
    await openAfresh(page, '/#/dead-letters');
    await group2.waitFor(WAIT);
    page.once('dialog', (d) => d.accept());
    await group2.getByRole('button', { name: /^Discard group/ }).click();
    await page.locator('[data-testid="dl-notice"]', { hasText: 'Discarded 2 jobs' }).waitFor(WAIT);
    for (const id of again) assert.equal(await server.lh.get(id), null);
    assert.deepEqual(problems, []);
  });
});

describe('dashboard sign-in in Chromium', { skip: missing ?? false }, () => {
  const KEY_A = 'dash-key-aaaaaaaa';
  const KEY_B = 'dash-key-bbbbbbbb';
  const KEY_OPS = 'dash-key-opsopsops';
  let browser: Browser;
  let server: DashboardServer;

  before(async () => {
    browser = await launchBrowser();
    server = await startDashboardServer({ apiKeys: `tenantA:${KEY_A},tenantB:${KEY_B},ops:${KEY_OPS}`, adminTenants: ['ops'] });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  it('asks for a key, then shows only that tenant’s jobs, live, and never puts the key in a URL', async () => {
    const mine = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantA', metadata: { owner: 'A' } });
    const theirs = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantB', metadata: { owner: 'B' } });
    const context = await browser.newContext({ baseURL: server.base, viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const problems = watchPage(page, [401, 404]);
    const urls: string[] = [];
    page.on('request', (r) => urls.push(r.url()));
    try {
      await page.goto('/#/jobs');
      await page.getByRole('heading', { name: 'Sign in' }).waitFor(WAIT);
      await screenshot(page, 'sign-in');
      await page.getByLabel('API key').fill('not-a-valid-key');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').filter({ hasText: 'not valid' }).waitFor(WAIT);
      await page.getByLabel('API key').fill(KEY_A);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Jobs' }).waitFor(WAIT);
      await page.locator(`tr[data-job-id="${mine.id}"]`).waitFor(WAIT);
      await page.locator('[data-testid="feed-status"]', { hasText: 'live' }).waitFor(WAIT);
      // A new job of the tenant arrives through the feed; the other tenant's never shows.
      const live = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantA' });
      await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantB' });
      await page.locator(`tr[data-job-id="${live.id}"]`).waitFor(WAIT);
      assert.equal(await page.locator(`tr[data-job-id="${theirs.id}"]`).count(), 0);
      assert.equal(await page.locator('tbody tr[data-job-id]').count(), 2, 'tenant A has two jobs');
      // Another tenant's job, asked for by id, is not found.
      await page.goto(`/#/jobs/${theirs.id}`);
      await page.getByRole('alert').filter({ hasText: 'No job' }).waitFor(WAIT);
      assert.ok(!urls.some((u) => u.includes(KEY_A) || u.includes(KEY_B)), 'no URL carries a key');
      // Signing out forgets the key.
      await page.goto('/#/');
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('heading', { name: 'Sign in' }).waitFor(WAIT);
      assert.equal(await page.evaluate(() => sessionStorage.length), 0);
      assert.deepEqual(problems, []);
    } finally {
      await context.close();
    }
  });

  it("an admin filters the jobs page by tenant and sees only that tenant's rows, live; a tenant key has no such filter", async () => {
    const a = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantA' });
    const b = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantB' });
    const own = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'ops' });
    const context = await browser.newContext({ baseURL: server.base, viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const problems = watchPage(page, [401]);
    try {
      await page.goto('/#/jobs');
      await page.getByLabel('API key').fill(KEY_OPS);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.locator(`tr[data-job-id="${own.id}"]`).waitFor(WAIT);
      assert.equal(await page.locator(`tr[data-job-id="${b.id}"]`).count(), 0, "an admin's own tenant by default");
      // The filter, with the tenants of the configured keys suggested.
      const field = page.getByLabel('Tenant');
      await field.waitFor(WAIT);
      assert.deepEqual((await page.locator('#tenant-list option').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value))).sort(), ['ops', 'tenantA', 'tenantB']);
      await field.fill('tenantB');
      await field.press('Enter');
      await page.waitForURL(/tenant=tenantB/, WAIT);
      await page.locator('[data-testid="jobs-tenant"]', { hasText: 'tenantB' }).waitFor(WAIT);
      await page.locator(`tr[data-job-id="${b.id}"]`).waitFor(WAIT);
      await page.locator(`tr[data-job-id="${own.id}"]`).waitFor({ ...WAIT, state: 'detached' });
      assert.equal(await page.locator(`tr[data-job-id="${a.id}"]`).count(), 0);
      // Live: the feed follows tenantB while its jobs are shown.
      await page.locator('[data-testid="feed-status"]', { hasText: 'live' }).waitFor(WAIT);
      const later = await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantB' });
      await server.lh.submit('demo.sleep', { steps: 1, stepMs: 1 }, { tenant: 'tenantA' });
      await page.locator(`tr[data-job-id="${later.id}"]`).waitFor(WAIT);
      const shown = await page.locator('tbody tr[data-job-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job-id')));
      const tenantB = new Set((await server.lh.list({ tenant: 'tenantB', limit: 100 })).items.map((j) => j.id));
      assert.ok(shown.length >= 2 && shown.every((id) => id !== null && tenantB.has(id)), `only tenantB's rows: ${shown.join(', ')}`);
      await screenshot(page, 'jobs-tenant-filter');
      // A row opens that tenant's job.
      await page.getByRole('link', { name: b.id }).click();
      await page.locator('[data-testid="job-detail"][data-status="succeeded"]').waitFor(WAIT);
      await page.locator('[data-testid="timeline"] li', { hasText: 'succeeded' }).waitFor(WAIT);
      assert.deepEqual(problems, []);

      // A tenant key sees no tenant filter.
      await page.goto('/#/');
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByLabel('API key').fill(KEY_A);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.goto('/#/jobs');
      await page.locator(`tr[data-job-id="${a.id}"]`).waitFor(WAIT);
      assert.equal(await page.getByLabel('Tenant').count(), 0);
    } finally {
      await context.close();
    }
  });
});
