import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startConsole } from '../lib/console/index.js';
import type { ConsoleServer } from '../lib/console/server.js';
import { awsClients, createQueue, receiveAll, uniqueName } from './support/aws.js';
import { launchChromium } from './support/browser.js';
import { useTestDatabase } from './support/database.js';
import { insertEvents } from './support/events.js';
import { drainUntilIdle, emulatorRelay } from './support/relay.js';

// The console's pages in headless Chromium, against a real database, the
// real relay publishing to the emulator's SQS, and the real local server.

const db = useTestDatabase();
const aws = awsClients();
const SCREENSHOT = process.env.UPDATE_SCREENSHOTS
  ? fileURLToPath(new URL('../docs/images/console-overview.png', import.meta.url))
  : path.join(os.tmpdir(), `console-overview-${process.pid}.png`);

let browser: Browser;
let acting: ConsoleServer;
let readOnly: ConsoleServer;
let queue: { url: string };
/** Content-Security-Policy violations and page errors seen in any page. */
const problems: string[] = [];

beforeAll(async () => {
  browser = await launchChromium();
  queue = await createQueue(aws.sqs, uniqueName('console-browser'));
  acting = await startConsole({ db: db.pool, allowActions: true, actor: 'alice@ops' });
  readOnly = await startConsole({ db: db.pool });
});

afterAll(async () => {
  await browser?.close();
  await acting?.close();
  await readOnly?.close();
});

/** A page logged in through the URL the console printed (token → cookie → redirect). */
async function open(server: ConsoleServer): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 760 }, timezoneId: 'UTC' });
  const page = await context.newPage();
  // Failed loads are seen as responses (an action's 403 is one the test asks for).
  page.on(
    'console',
    (m) => m.type() === 'error' && !/^Failed to load resource/.test(m.text()) && problems.push(m.text()),
  );
  page.on(
    'response',
    (r) =>
      r.status() >= 400 && !r.url().includes('/api/actions/') && problems.push(`${r.status()} ${r.url()}`),
  );
  page.on('pageerror', (e) => problems.push(String(e)));
  await page.goto(server.url);
  expect(new URL(page.url()).search).toBe(''); // the token left the address bar
  return { context, page };
}

const ready = (page: Page, view: string) => page.waitForSelector(`main[data-ready="${view}"]`);

/** An outbox with a day of history, so the overview has something to show. */
async function history() {
  await db.pool.query(`
    INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, processed_at)
    SELECT gen_random_uuid(), 'order', 'order-' || (g % 900),
           (ARRAY['order.created', 'order.paid', 'payment.captured'])[g % 3 + 1], '{}'::jsonb, t, t + interval '90 ms'
    FROM generate_series(1, 24000) g,
         LATERAL (SELECT now() - interval '1 day' * (1 - g / 24000.0)
                        - interval '40 minutes' * sin(g / 24000.0 * 2 * pi() * 3) AS t) x
    WHERE t < now()`);
  const dead = await insertEvents(db.pool, 14, (i) => ({
    eventType: 'payment.captured',
    aggregateId: `pay-${i}`,
  }));
  await db.pool.query(
    `UPDATE outbox_events SET attempts = 5, dead_lettered_at = now() - (random() * interval '5 hours'),
       last_error = 'attempt limit (5) reached; last error: sqs:https://sqs.eu-west-1.amazonaws.com/123456789012/payments: ThrottlingException: Rate exceeded'
     WHERE id = ANY($1::uuid[])`,
    [dead],
  );
  const waiting = await insertEvents(db.pool, 37, (i) => ({
    eventType: 'invoice.issued',
    aggregateId: `inv-${i}`,
  }));
  await db.pool.query(
    `UPDATE outbox_events SET retry_after = now() + interval '25 seconds', attempts = 0,
       waiting_for = '{sqs:https://sqs.eu-west-1.amazonaws.com/123456789012/billing}'
     WHERE id = ANY($1::uuid[])`,
    [waiting],
  );
}

describe('the console in a browser', () => {
  it('shows a dead letter in its group, redrives it, and the relay publishes it', async () => {
    await history();
    // The relay as first deployed: no route for order.shipped, so it dead-letters at once.
    const before = emulatorRelay(db.pool, aws, [
      { match: 'order.created', targets: [{ type: 'sqs', queueUrl: queue.url }] },
    ]);
    const [shipped] = await insertEvents(db.pool, 1, () => ({
      eventType: 'order.shipped',
      aggregateId: 'o-42',
    }));
    await insertEvents(db.pool, 2, () => ({ eventType: 'order.created' }));
    await drainUntilIdle(before.relay);

    const { context, page } = await open(acting);
    await ready(page, 'overview');
    const cards = page.getByTestId('cards');
    await expect.poll(() => cards.textContent()).toMatch(/Dead letters\s*15/);
    expect(await page.locator('table').first().textContent()).toContain('123456789012/billing');
    expect(await page.locator('.chart canvas').count()).toBe(2);
    await page.screenshot({ path: SCREENSHOT, fullPage: true });

    await page.click('nav >> text=Dead letters');
    await ready(page, 'dead-letters');
    const row = page.locator('tr.group', { hasText: 'order.shipped' });
    expect(await row.textContent()).toMatch(/^1order\.shipped—no route for event type "order\.shipped"/);
    await row.locator('a').first().click();
    await ready(page, 'group');
    expect(await page.locator('tbody').textContent()).toContain('order/o-42');
    await page.click('button:text("Redrive group")');
    await expect.poll(() => page.locator('#confirm-title').textContent()).toBe('Redrive 1?');
    expect(await page.locator('#confirm-text').textContent()).toContain('audited as alice@ops');
    await page.click('#confirm-ok');
    // The page is drawn again, the outcome in its status line.
    await page.waitForSelector('text=This group has no dead letters left.');
    expect(await page.locator('.status').textContent()).toBe('Done: 1 redriven by alice@ops.');

    // The route is fixed; the next relay run publishes the redriven event.
    const after = emulatorRelay(db.pool, aws, [
      { match: '*', targets: [{ type: 'sqs', queueUrl: queue.url }] },
    ]);
    await drainUntilIdle(after.relay);
    const messages = await receiveAll(aws.sqs, queue.url, 3);
    expect(messages.map((m) => JSON.parse(m.Body ?? '{}').id)).toContain(shipped);
    await page.goto(new URL(`/#/event/${shipped}`, acting.url).href);
    await ready(page, 'event');
    expect(await page.locator('h1').textContent()).toBe('order.shipped published');
    expect(await page.getByTestId('payload-hidden').count()).toBe(1);
    await page.click('text=order/o-42');
    await ready(page, 'timeline');
    expect(await page.locator('tbody tr').count()).toBe(1);
    expect(await page.locator('tbody').textContent()).toContain('published');
    await context.close();
    expect(problems).toEqual([]);
  });

  it('read-only: no actions in the page, and the API refuses them', async () => {
    const { context, page } = await open(readOnly);
    await ready(page, 'overview');
    expect(await page.locator('#mode').textContent()).toContain('read-only');
    await page.click('nav >> text=Dead letters');
    await ready(page, 'dead-letters');
    await page.locator('tr.group a').first().click();
    await ready(page, 'group');
    expect(await page.locator('button').count()).toBe(2); // the dialog's, never shown
    expect(await page.locator('main').textContent()).toContain('Read-only');
    const refused = await page.evaluate(async () => {
      const { csrfToken } = (await (await fetch('api/session')).json()) as { csrfToken: string };
      const response = await fetch('api/actions/discard', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-csrf-token': csrfToken },
        body: JSON.stringify({ all: true, dryRun: true }),
      });
      return { status: response.status, body: (await response.json()) as { error: string } };
    });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatch(/read-only/);
    await context.close();
    expect(problems).toEqual([]);
  });

  it('refuses a missing or wrong token, a foreign Host header and a missing CSRF token', async () => {
    const stranger = await browser.newContext();
    const page = await stranger.newPage();
    const base = `http://127.0.0.1:${acting.port}`;
    for (const target of ['/', '/assets/app.js', '/assets/vendor/uPlot.iife.min.js', '/api/overview']) {
      const response = await page.goto(`${base}${target}`);
      expect(response?.status(), target).toBe(401);
      expect(await page.textContent('body')).not.toContain('uPlot');
    }
    expect((await page.goto(`${base}/?token=wrong`))?.status()).toBe(401);
    await stranger.close();

    const foreign = await new Promise<number>((resolve, reject) => {
      const req = http.get(
        {
          host: '127.0.0.1',
          port: acting.port,
          path: '/',
          headers: { host: 'attacker.example', authorization: `Bearer ${acting.token}` },
        },
        (res) => resolve(res.statusCode ?? 0),
      );
      req.on('error', reject);
    });
    expect(foreign).toBe(403);

    const { context, page: logged } = await open(acting);
    await ready(logged, 'overview');
    const headers = await logged.evaluate(async () => {
      const page = await fetch('./');
      return { csp: page.headers.get('content-security-policy'), type: page.headers.get('content-type') };
    });
    expect(headers.csp).toContain("script-src 'self'");
    expect(headers.type).toBe('text/html; charset=utf-8');
    const noCsrf = await logged.evaluate(async () => {
      const response = await fetch('api/actions/redrive', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ all: true, dryRun: true }),
      });
      return response.status;
    });
    expect(noCsrf).toBe(403);
    await context.close();
  });
});
